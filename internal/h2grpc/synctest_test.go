package h2grpc

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
)

// These tests run the server in a synctest bubble over net.Pipe
// connections, so that its timers run on the bubble's fake clock: the
// timing they check is exact, and they take no real time.

// pipeListener hands out the server ends of net.Pipe connections.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// dial returns the client end of a new connection to the server.
func (l *pipeListener) dial() net.Conn {
	cli, srv := net.Pipe()
	l.conns <- srv
	return cli
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// servePipe starts s on a pipe listener in the bubble; the cleanup closes
// it and waits for Serve.
func servePipe(t *testing.T, s *Server) *pipeListener {
	l := newPipeListener()
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return l
}

func TestSynctestHandshakeTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(Options{}) // HandshakeTimeout 10 s
		l := servePipe(t, s)
		cli := l.dial()
		defer cli.Close()
		closed := make(chan struct{})
		go func() {
			io.Copy(io.Discard, cli) // the server's SETTINGS, then EOF
			close(closed)
		}()
		time.Sleep(10*time.Second - time.Millisecond)
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("closed before HandshakeTimeout")
		default:
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		select {
		case <-closed:
		default:
			t.Fatal("still open after HandshakeTimeout")
		}
		s.mu.Lock()
		n := len(s.conns)
		s.mu.Unlock()
		if n != 0 {
			t.Errorf("%d connections left", n)
		}
	})
}

func TestSynctestDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(Options{})
		waited := make(chan time.Duration, 1)
		s.Handle("/test.Test/Wait", func(ctx context.Context, msg, out []byte) ([]byte, error) {
			start := time.Now()
			<-ctx.Done()
			waited <- time.Since(start)
			return nil, ctx.Err()
		})
		l := servePipe(t, s)
		rc := newRawClient(t, l.dial())
		rc.handshake()
		rc.writeHeaders(1, false, rc.grpcHeaders("/test.Test/Wait", "grpc-timeout", "50m"))
		rc.check(rc.fr.WriteData(1, true, grpcMessage("x")))
		r := rc.readResponse(1, nil)
		if d := <-waited; d != 50*time.Millisecond {
			t.Errorf("the handler's context ended after %v, want 50ms", d)
		}
		checkStatus(t, r, codes.DeadlineExceeded, "deadline")
	})
}

func TestSynctestShutdown(t *testing.T) {
	for _, graceful := range []bool{true, false} {
		name := map[bool]string{true: "graceful", false: "expired"}[graceful]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newServer(Options{})
				ended := make(chan error, 1)
				s.Handle("/test.Test/Slow", func(ctx context.Context, msg, out []byte) ([]byte, error) {
					if graceful {
						time.Sleep(3 * time.Second)
						return out, nil
					}
					<-ctx.Done()
					ended <- ctx.Err()
					return nil, ctx.Err()
				})
				l := servePipe(t, s)
				rc := newRawClient(t, l.dial())
				rc.handshake()
				rc.call(1, "/test.Test/Slow", "x")
				synctest.Wait() // the handler runs
				start := time.Now()
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				shutdown := make(chan error, 1)
				go func() { shutdown <- s.Shutdown(ctx) }()
				// The client reads GOAWAY, the answer (graceful), then EOF.
				var sawGoAway bool
				var status string
				for {
					f, err := rc.readErr(time.Minute)
					if err != nil {
						break
					}
					switch f := f.(type) {
					case *http2.GoAwayFrame:
						sawGoAway = f.ErrCode == http2.ErrCodeNo
					case *http2.MetaHeadersFrame:
						if f.StreamEnded() {
							for _, hf := range f.Fields {
								if hf.Name == "grpc-status" {
									status = hf.Value
								}
							}
						}
					}
				}
				err := <-shutdown
				took := time.Since(start)
				if !sawGoAway {
					t.Error("no GOAWAY NO_ERROR")
				}
				if graceful {
					if err != nil || took != 3*time.Second || status != "0" {
						t.Errorf("Shutdown: %v after %v, call status %q; want nil after 3s, status 0", err, took, status)
					}
				} else {
					if !errors.Is(err, context.DeadlineExceeded) || took != 5*time.Second || status != "" {
						t.Errorf("Shutdown: %v after %v, call status %q; want DeadlineExceeded after 5s, no answer", err, took, status)
					}
					if err := <-ended; !errors.Is(err, context.Canceled) {
						t.Errorf("handler context: %v", err)
					}
				}
			})
		})
	}
}

// timeoutListener's Accept fails with a timeout a few times, then waits
// for a connection or Close, as a real listener would after a temporary
// error.
type timeoutListener struct {
	*pipeListener
	timeouts *int
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "accept timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

func (l timeoutListener) Accept() (net.Conn, error) {
	if *l.timeouts > 0 {
		*l.timeouts--
		return nil, timeoutError{}
	}
	return l.pipeListener.Accept()
}

// Serve backs off on temporary Accept errors (5, 10, 20, 40, 80 ms), and
// a Close during a backoff still closes the listener: Serve returns.
func TestSynctestAcceptBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(Options{})
		n := 5
		l := timeoutListener{newPipeListener(), &n}
		done := make(chan error, 1)
		go func() { done <- s.Serve(l) }()
		time.Sleep(100 * time.Millisecond) // in the fifth backoff
		s.Close()
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case err := <-done:
			if !errors.Is(err, ErrServerClosed) {
				t.Errorf("Serve: %v", err)
			}
		default:
			l.Close() // let the bubble end
			t.Fatal("Serve still running after Close")
		}
	})
}
