// Command gateway is the harness of Portero's gateway throughput benchmark
// (scripts/bench-gateway.sh runs it and writes docs/benchmarks-gateway.md).
// It plays every part except Portero and nginx, on 127.0.0.1 only:
//
//	gateway upstream -listen ADDR            the upstream: Go net/http answering "ok"
//	gateway proxy -listen ADDR -upstream URL a bare httputil.ReverseProxy, configured
//	                                         as the Portero gateway configures its own
//	                                         (-buffer-pool=false: without its copy-buffer pool)
//	gateway refusal -listen ADDR -from URL   a bare net/http handler answering every
//	                                         request with the bytes of the 429 that URL
//	                                         (a refusing Portero) sends: the yardstick
//	                                         of the refusal's CPU
//	gateway load -url URL -c 64 -d 10s       a closed-loop load generator (when wrk
//	                                         is not installed): requests/s, latency
//	                                         percentiles, status counts
//	gateway decide -n 200000                 the middleware's decision overhead per
//	                                         request in process, as percentiles
//	gateway freeport                         prints a free port on 127.0.0.1 (for nginx)
//
// Each server prints "listening on ADDR" once it accepts connections and
// runs until it is interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/memstore"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gateway upstream|proxy|refusal|load|decide|freeport [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "upstream":
		err = runUpstream(ctx, args)
	case "proxy":
		err = runProxy(ctx, args)
	case "refusal":
		err = runRefusal(ctx, args)
	case "load":
		err = runLoad(ctx, args, os.Stdout)
	case "decide":
		err = runDecide(args, os.Stdout)
	case "freeport":
		err = freePort(os.Stdout)
	default:
		err = fmt.Errorf("unknown command %q", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

// serve listens on addr (which must be a loopback address), prints it and
// serves h until ctx is done.
func serve(ctx context.Context, addr string, h http.Handler) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("listen %s: the benchmark stays on loopback", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("listening on %s\n", ln.Addr())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func runUpstream(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("upstream", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ok := []byte("ok\n")
	return serve(ctx, *listen, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write(ok)
	}))
}

// runProxy is the baseline: the same httputil.ReverseProxy, Rewrite and
// Transport settings as internal/gateway, without the limiter.
func runProxy(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address")
	upstream := fs.String("upstream", "", "upstream URL")
	pool := fs.Bool("buffer-pool", true, "reuse the response copy buffers, as the gateway does (false: a new 32 KiB buffer per request, ReverseProxy's default)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	target, err := url.Parse(*upstream)
	if err != nil || target.Host == "" {
		return fmt.Errorf("-upstream %q: want a URL", *upstream)
	}
	transport := &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ResponseHeaderTimeout: 30 * time.Second,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
		DisableCompression:    true,
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
		},
		Transport: transport,
	}
	if *pool {
		rp.BufferPool = &copyBuffers{}
	}
	return serve(ctx, *listen, rp)
}

// copyBuffers is the gateway's ReverseProxy.BufferPool (internal/gateway
// copyBuffers), repeated here since the harness cannot import it.
type copyBuffers struct{ pool sync.Pool }

const copyBufferSize = 32 << 10

func (c *copyBuffers) Get() []byte {
	if b, ok := c.pool.Get().(*[copyBufferSize]byte); ok {
		return b[:]
	}
	return new([copyBufferSize]byte)[:]
}

func (c *copyBuffers) Put(b []byte) {
	if cap(b) >= copyBufferSize {
		c.pool.Put((*[copyBufferSize]byte)(b[:copyBufferSize]))
	}
}

// runRefusal asks -from (a Portero that refuses every request) for one
// refusal and then answers every request with its status, headers and body
// from a bare net/http handler: the least a Go server can spend on sending
// those bytes. net/http adds Date itself, as it does for Portero.
func runRefusal(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("refusal", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address")
	from := fs.String("from", "", "URL of a refusing Portero")
	if err := fs.Parse(args); err != nil {
		return err
	}
	status, header, body, err := fetchRefusal(*from)
	if err != nil {
		return err
	}
	return serve(ctx, *listen, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		for k, v := range header {
			h[k] = v
		}
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
}

// fetchRefusal GETs u until it answers 429 (at most 10 times) and returns
// that answer, without the headers net/http sets by itself.
func fetchRefusal(u string) (int, http.Header, []byte, error) {
	pu, err := url.Parse(u)
	if err != nil || pu.Host == "" {
		return 0, nil, nil, fmt.Errorf("-from %q: want a URL", u)
	}
	if ip := net.ParseIP(pu.Hostname()); ip == nil || !ip.IsLoopback() {
		return 0, nil, nil, fmt.Errorf("-from %q: the benchmark stays on loopback", u)
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true}, Timeout: 5 * time.Second}
	for range 10 {
		resp, err := client.Get(u)
		if err != nil {
			return 0, nil, nil, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, nil, nil, err
		}
		if resp.StatusCode == http.StatusTooManyRequests {
			h := resp.Header.Clone()
			h.Del("Date")
			return resp.StatusCode, h, body, nil
		}
	}
	return 0, nil, nil, fmt.Errorf("%s answered no 429 in 10 requests", u)
}

// runLoad keeps c connections busy for d, each sending the next request as
// soon as the previous answer is read (as wrk does), and reports
// requests/s, latency percentiles and status counts.
func runLoad(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	target := fs.String("url", "", "URL to GET")
	conns := fs.Int("c", 64, "connections")
	dur := fs.Duration("d", 10*time.Second, "duration")
	if err := fs.Parse(args); err != nil {
		return err
	}
	u, err := url.Parse(*target)
	if err != nil || u.Host == "" {
		return fmt.Errorf("-url %q: want a URL", *target)
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-url %q: the benchmark stays on loopback", *target)
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: *conns, MaxConnsPerHost: *conns, DisableCompression: true}}
	ctx, cancel := context.WithTimeout(ctx, *dur)
	defer cancel()
	var (
		mu     sync.Mutex
		lats   []time.Duration
		status = map[int]int{}
		errs   atomic.Int64
		wg     sync.WaitGroup
	)
	start := time.Now()
	for range *conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			my, myStatus := make([]time.Duration, 0, 1<<16), map[int]int{}
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "GET", *target, nil)
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				my = append(my, time.Since(t0))
				myStatus[resp.StatusCode]++
			}
			mu.Lock()
			lats = append(lats, my...)
			for k, v := range myStatus {
				status[k] += v
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lats)
	pct := func(p float64) time.Duration {
		if len(lats) == 0 {
			return 0
		}
		return lats[min(int(p*float64(len(lats))), len(lats)-1)]
	}
	fmt.Fprintf(out, "requests %d in %.2fs: %.0f requests/s; latency p50 %v p90 %v p99 %v; errors %d; status",
		len(lats), elapsed.Seconds(), float64(len(lats))/elapsed.Seconds(), pct(0.5), pct(0.9), pct(0.99), errs.Load())
	codes := make([]int, 0, len(status))
	for c := range status {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	for _, c := range codes {
		fmt.Fprintf(out, " %d:%d", c, status[c])
	}
	fmt.Fprintln(out)
	return nil
}

// runDecide times the middleware in front of a no-op handler one request
// at a time, against the no-op handler alone, and prints percentiles of
// each and the difference of the medians: the decision overhead at p50.
// The store is the memory store; the policy has the shape of the default
// configuration (per client, a login rule that GET does not match, global).
func runDecide(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("decide", flag.ContinueOnError)
	n := fs.Int("n", 200000, "requests per subject")
	if err := fs.Parse(args); err != nil {
		return err
	}
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		return err
	}
	defer store.Close(context.Background())
	mk := func(perClient string) (*policy.Policy, error) {
		return policy.New([]policy.Rule{
			{Name: "per-client", Key: policy.MustParseKey("ip"), Algorithm: portero.TokenBucket, Limit: portero.MustParseLimit(perClient)},
			{Name: "login", Match: policy.Match{Methods: []string{"POST"}, Path: "/login"}, Key: policy.MustParseKey("ip"),
				Algorithm: portero.SlidingCounter, Limit: portero.MustParseLimit("3/min")},
			{Name: "global", Key: policy.MustParseKey("global"), Algorithm: portero.SlidingCounter, Limit: portero.MustParseLimit("1000000000/s")},
		}, policy.Options{})
	}
	noop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	subjects := []struct {
		name  string
		limit string // per-client limit; "" for the handler alone
		want  int
	}{
		{"no-op handler alone", "", 200},
		{"middleware, allowed", "1000000/s burst 1000000", 200},
		{"middleware, refused", "1/h burst 1", 429},
	}
	reqs := make([]*http.Request, 250)
	for i := range reqs {
		reqs[i] = httptest.NewRequest("GET", "/items/1", nil)
		reqs[i].RemoteAddr = "10.0." + strconv.Itoa(i) + ".1:1234"
	}
	var base time.Duration
	for _, s := range subjects {
		h := http.Handler(noop)
		if s.limit != "" {
			p, err := mk(s.limit)
			if err != nil {
				return err
			}
			l, err := httplimit.New(httplimit.Config{Policy: p, Store: store})
			if err != nil {
				return err
			}
			h = l.Handler(noop)
		}
		w := &discard{h: http.Header{}}
		for _, r := range reqs { // warm up; refused clients use their one request
			w.serve(h, r)
		}
		lats := make([]time.Duration, *n)
		for i := range lats {
			r := reqs[i%len(reqs)]
			t0 := time.Now()
			w.serve(h, r)
			lats[i] = time.Since(t0)
			if w.code != s.want {
				return fmt.Errorf("%s: status %d, want %d", s.name, w.code, s.want)
			}
		}
		slices.Sort(lats)
		p := func(q float64) time.Duration { return lats[int(q*float64(len(lats)-1))] }
		extra := ""
		if s.limit == "" {
			base = p(0.5)
		} else {
			extra = fmt.Sprintf("; overhead at p50 %v", p(0.5)-base)
		}
		fmt.Fprintf(out, "%-22s p50 %v p90 %v p99 %v%s\n", s.name+":", p(0.5), p(0.9), p(0.99), extra)
	}
	return nil
}

// discard is a ResponseWriter that keeps the status and headers only.
type discard struct {
	h    http.Header
	code int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(code int)        { d.code = code }

func (d *discard) serve(h http.Handler, r *http.Request) {
	clear(d.h)
	d.code = http.StatusOK
	h.ServeHTTP(d, r)
}

// freePort prints a port that was free on 127.0.0.1 a moment ago.
func freePort(out io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	_, err = fmt.Fprintln(out, ln.Addr().(*net.TCPAddr).Port)
	return err
}
