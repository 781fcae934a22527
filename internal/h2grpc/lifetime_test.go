package h2grpc

import (
	"context"
	"errors"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http2"
)

// The connection-lifetime limits (IdleTimeout, MaxConnectionAge and its
// grace, PingMinInterval), in a synctest bubble: the times they check are
// exact.

// event is one thing a raw client saw, at a bubble instant.
type event struct {
	at     time.Time
	kind   string // "goaway", "ping-ack", "answer" (a stream's end), "closed"
	code   http2.ErrCode
	debug  string
	stream uint32
	status string // grpc-status of an answer
}

// watch reads every frame rc receives, in a goroutine, and reports what
// matters; the channel is closed after the connection closes.
func watch(rc *rawClient) <-chan event {
	ch := make(chan event, 64)
	go func() {
		defer close(ch)
		for {
			f, err := rc.readErr(24 * time.Hour)
			if err != nil {
				ch <- event{at: time.Now(), kind: "closed"}
				return
			}
			switch f := f.(type) {
			case *http2.GoAwayFrame:
				ch <- event{at: time.Now(), kind: "goaway", code: f.ErrCode, debug: string(f.DebugData())}
			case *http2.PingFrame:
				if f.IsAck() {
					ch <- event{at: time.Now(), kind: "ping-ack"}
				}
			case *http2.MetaHeadersFrame:
				if f.StreamEnded() {
					e := event{at: time.Now(), kind: "answer", stream: f.StreamID}
					for _, hf := range f.Fields {
						if hf.Name == "grpc-status" {
							e.status = hf.Value
						}
					}
					ch <- e
				}
			}
		}
	}()
	return ch
}

// seen returns the events reported so far, without waiting.
func seen(ch <-chan event) []event {
	var out []event
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				return out
			}
			out = append(out, e)
		default:
			return out
		}
	}
}

func kinds(es []event) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.kind)
	}
	return out
}

// Idle: GOAWAY NO_ERROR then close exactly IdleTimeout after the last call
// ended; a call in flight, however long, is not idleness.
func TestSynctestIdleTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(Options{IdleTimeout: time.Minute})
		release := make(chan struct{})
		s.Handle("/test.Test/Hold", func(ctx context.Context, msg, out []byte) ([]byte, error) {
			<-release
			return out, nil
		})
		l := servePipe(t, s)
		rc := newRawClient(t, l.dial())
		rc.handshake()
		start := time.Now()
		ev := watch(rc)
		time.Sleep(30 * time.Second)
		rc.call(1, "/test.Test/Hold", "x")
		// The call is held for five minutes: no idleness meanwhile.
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if es := seen(ev); len(es) != 0 {
			t.Fatalf("while a call was in flight: %v", kinds(es))
		}
		close(release)
		synctest.Wait()
		ended := time.Now()
		if es := seen(ev); len(es) != 1 || es[0].kind != "answer" || es[0].status != "0" {
			t.Fatalf("after the release: %+v, want the answer", es)
		}
		time.Sleep(time.Minute - time.Millisecond)
		synctest.Wait()
		if es := seen(ev); len(es) != 0 {
			t.Fatalf("before IdleTimeout: %v", kinds(es))
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		es := seen(ev)
		if len(es) != 2 || es[0].kind != "goaway" || es[0].code != http2.ErrCodeNo || es[1].kind != "closed" {
			t.Fatalf("after IdleTimeout: %+v, want GOAWAY NO_ERROR then closed", es)
		}
		if got := es[0].at.Sub(ended); got != time.Minute {
			t.Errorf("GOAWAY %v after the last call ended (%v after the start), want 1m", got, es[0].at.Sub(start))
		}
	})
}

// Age: GOAWAY NO_ERROR at MaxConnectionAge ±10%; a call in flight is still
// answered; one that is not done by the grace is cut off with the
// connection, its context cancelled.
func TestSynctestMaxConnectionAge(t *testing.T) {
	for _, finishes := range []bool{true, false} {
		name := map[bool]string{true: "call-completes", false: "grace-expires"}[finishes]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newServer(Options{MaxConnectionAge: 10 * time.Minute, MaxConnectionAgeGrace: time.Minute})
				release := make(chan struct{})
				cancelled := make(chan error, 1)
				s.Handle("/test.Test/Hold", func(ctx context.Context, msg, out []byte) ([]byte, error) {
					select {
					case <-release:
						return out, nil
					case <-ctx.Done():
						cancelled <- ctx.Err()
						return nil, ctx.Err()
					}
				})
				l := servePipe(t, s)
				rc := newRawClient(t, l.dial())
				rc.handshake()
				start := time.Now()
				ev := watch(rc)
				rc.call(1, "/test.Test/Hold", "x")
				var goAway event
				for goAway.kind == "" && time.Since(start) < 12*time.Minute {
					time.Sleep(time.Second)
					synctest.Wait()
					for _, e := range seen(ev) {
						if e.kind != "goaway" {
							t.Fatalf("%v after %v, before the GOAWAY", e.kind, time.Since(start))
						}
						goAway = e
					}
				}
				if age := goAway.at.Sub(start); goAway.code != http2.ErrCodeNo || age < 9*time.Minute || age > 11*time.Minute {
					t.Fatalf("GOAWAY %+v after %v, want NO_ERROR after 9m to 11m", goAway, age)
				}
				if finishes {
					time.Sleep(30 * time.Second)
					close(release)
					synctest.Wait()
					es := seen(ev)
					if len(es) != 2 || es[0].kind != "answer" || es[0].status != "0" || es[1].kind != "closed" {
						t.Fatalf("after the release: %+v, want the answer, then closed", es)
					}
					return
				}
				time.Sleep(time.Until(goAway.at.Add(time.Minute - time.Millisecond)))
				synctest.Wait()
				if es := seen(ev); len(es) != 0 {
					t.Fatalf("before the grace ended: %v at %v after the GOAWAY", kinds(es), es[0].at.Sub(goAway.at))
				}
				time.Sleep(2 * time.Millisecond)
				synctest.Wait()
				if es := seen(ev); len(es) != 1 || es[0].kind != "closed" {
					t.Fatalf("after the grace: %+v, want closed without an answer", es)
				}
				if err := <-cancelled; !errors.Is(err, context.Canceled) {
					t.Errorf("the call's context: %v, want cancelled", err)
				}
			})
		})
	}
}

// Pings: spaced by PingMinInterval they are all answered; sooner, the
// third strike ends the connection with ENHANCE_YOUR_CALM "too_many_pings";
// an answer sent forgives the strikes.
func TestSynctestPingPolicy(t *testing.T) {
	ping := func(t *testing.T, rc *rawClient) {
		t.Helper()
		rc.check(rc.fr.WritePing(false, [8]byte{1}))
	}
	synctest.Test(t, func(t *testing.T) {
		s := newServer(Options{PingMinInterval: 10 * time.Second})
		l := servePipe(t, s)

		// Spaced out: always answered.
		rc := newRawClient(t, l.dial())
		rc.handshake()
		ev := watch(rc)
		for range 6 {
			ping(t, rc)
			time.Sleep(10 * time.Second)
		}
		synctest.Wait()
		if es := seen(ev); len(es) != 6 || es[5].kind != "ping-ack" {
			t.Fatalf("pings 10s apart: %v, want 6 acks", kinds(es))
		}

		// Every second: the first is free, three strikes end it.
		rc = newRawClient(t, l.dial())
		rc.handshake()
		ev = watch(rc)
		for i := range 4 {
			ping(t, rc)
			synctest.Wait()
			es := seen(ev)
			if i < 3 {
				if len(es) != 1 || es[0].kind != "ping-ack" {
					t.Fatalf("ping %d: %v, want an ack", i+1, kinds(es))
				}
				time.Sleep(time.Second)
				continue
			}
			if len(es) != 2 || es[0].kind != "goaway" || es[0].code != http2.ErrCodeEnhanceYourCalm || es[0].debug != "too_many_pings" || es[1].kind != "closed" {
				t.Fatalf("ping %d: %+v, want GOAWAY ENHANCE_YOUR_CALM too_many_pings, then closed", i+1, es)
			}
		}

		// Two strikes, an answer, two more strikes: still open (without
		// the answer, the third ping after it would be the third strike).
		rc = newRawClient(t, l.dial())
		rc.handshake()
		ev = watch(rc)
		for i := range 5 {
			if i == 3 {
				rc.call(1, "/test.Test/Echo", "x")
				synctest.Wait()
			}
			ping(t, rc)
			time.Sleep(time.Second)
		}
		synctest.Wait()
		for _, e := range seen(ev) {
			if e.kind == "goaway" || e.kind == "closed" {
				t.Fatalf("strikes were not forgiven by the answer: %+v", e)
			}
		}
	})
}

// Serve refuses a TCP listener that is not loopback, and takes loopback
// and unix sockets.
func TestServeLocalOnly(t *testing.T) {
	for _, tc := range []struct {
		addr net.Addr
		ok   bool
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8081}, true},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 8081}, true},
		{&net.TCPAddr{IP: net.IPv4(127, 1, 2, 3), Port: 8081}, true},
		{&net.UnixAddr{Name: "/run/portero.sock", Net: "unix"}, true},
		{pipeAddr{}, true},
		{&net.TCPAddr{Port: 8081}, false}, // ":8081", every interface
		{&net.TCPAddr{IP: net.IPv4zero, Port: 8081}, false},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 8081}, false},
		{&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 8081}, false},
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 8081}, false},
	} {
		err := CheckLocal(tc.addr)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrNotLoopback)) {
			t.Errorf("CheckLocal(%v) = %v, want ok %v", tc.addr, err, tc.ok)
		}
	}
	lis, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(Options{})
	defer s.Close()
	if err := s.Serve(lis); !errors.Is(err, ErrNotLoopback) {
		t.Fatalf("Serve on %v = %v, want ErrNotLoopback", lis.Addr(), err)
	}
	if _, err := lis.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the refused listener is still open: Accept = %v", err)
	}
}
