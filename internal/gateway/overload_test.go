package gateway_test

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/overload"
)

// The real-process overload test (docs/benchmarks-overload.md): the
// gateway, on a loopback listener, in front of a loopback upstream that
// serves a fixed number of requests per second; a load generator offering
// 1.5 times that, open loop, with clients that give up after a patience;
// goodput (answers in time) with and without load shedding in front of the
// gateway. The CI form is short; the doc's figures come from
//
//	go test ./internal/gateway -run TestOverloadRealProcess -v -overload.duration=20s -overload.runs=5
var (
	overloadDuration = flag.Duration("overload.duration", 3*time.Second, "how long TestOverloadRealProcess offers load, per run")
	overloadRuns     = flag.Int("overload.runs", 1, "runs of each mode in TestOverloadRealProcess; medians are logged")
)

const (
	upWorkers  = 10
	upRun      = 50 * time.Millisecond // upstream: 10 at once, 50 ms each = 200/s
	upCapacity = float64(upWorkers) / 0.05
	offered    = 1.5 * upCapacity
	patience   = 500 * time.Millisecond
)

// fixedRateUpstream is a real server that serves upWorkers requests at a
// time, upRun each, first come first served, and — like most servers —
// does not notice that a client has gone away: every request it accepted
// gets its turn. Closing stop lets the ones still queued go at the end.
func fixedRateUpstream(t *testing.T) *httptest.Server {
	t.Helper()
	sem := make(chan struct{}, upWorkers)
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case sem <- struct{}{}:
		case <-stop:
			return
		}
		time.Sleep(upRun)
		<-sem
		_, _ = w.Write([]byte("done\n"))
	}))
	t.Cleanup(func() { close(stop); srv.Close() })
	return srv
}

// loadResult is one run's figures.
type loadResult struct {
	sent, ok, shed, failed int
	goodput                float64       // answers 200 within patience that came while load was offered, per second
	p50, p99               time.Duration // latency of those answers
}

// offer sends offered requests per second to url for d, each on its own
// schedule (open loop: a slow answer does not slow the next request), each
// giving up after patience.
func offer(t *testing.T, url string, d time.Duration) loadResult {
	t.Helper()
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: time.Second}).DialContext,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     10 * time.Second,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	n := int(offered * d.Seconds())
	var (
		mu     sync.Mutex
		res    loadResult
		lats   []time.Duration
		inLoad int
		wg     sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(float64(i) * float64(time.Second) / offered))))
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
			t0 := time.Now()
			resp, err := client.Do(req)
			lat := time.Since(t0)
			code := 0
			if err == nil {
				code = resp.StatusCode
				resp.Body.Close()
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case code == 200 && lat <= patience:
				res.ok++
				lats = append(lats, lat)
				if t0.Add(lat).Before(end) {
					inLoad++
				}
			case code == 503:
				res.shed++
			default:
				res.failed++ // gave up, or answered too late
			}
		})
	}
	wg.Wait()
	res.sent = n
	// Over the offered stretch only: the queue a shedder keeps drains after
	// the load stops, which would flatter it.
	res.goodput = float64(inLoad) / d.Seconds()
	slices.Sort(lats)
	if len(lats) > 0 {
		res.p50 = lats[(len(lats)-1)/2]
		res.p99 = lats[min(len(lats)-1, (len(lats)*99+99)/100-1)]
	}
	return res
}

// runOverload runs one mode on a fresh upstream and gateway: no shedding
// (order 0 and shedding false), or an overload.Gate of that order in front
// of the gateway.
func runOverload(t *testing.T, shedding bool, order overload.Order, d time.Duration) loadResult {
	t.Helper()
	up := fixedRateUpstream(t)
	g, _, _ := gw(t, fmt.Sprintf(`
upstreams:
  api: {url: %s}
routes:
  - name: api
    match: {path: /**}
    upstream: api
rules:
  - name: per-ip
    key: ip
    algorithm: token-bucket
    limit: 100000/s
`, up.URL))
	var h http.Handler = g
	if shedding {
		gate, err := overload.New(overload.Config{
			MaxInFlight: upWorkers, // what the upstream can run at once
			QueueSize:   100,       // half a second of its work
			ServiceTime: upRun,
			Order:       order,
		})
		if err != nil {
			t.Fatal(err)
		}
		mw, err := httplimit.Shed(httplimit.ShedConfig{Gate: gate, Timeout: patience})
		if err != nil {
			t.Fatal(err)
		}
		h = mw(g)
	}
	front := httptest.NewServer(h)
	defer front.Close()
	return offer(t, front.URL+"/work", d)
}

// TestOverloadRealProcess asserts only what holds on a loaded two-core
// machine: with shedding the goodput is clearly above the goodput without
// (about 2.2 times with the defaults: without, the upstream's queue grows
// by 100 a second and from about 0.9 s on every answer comes after the
// client's 0.5 s; with, the excess is refused at once and what is admitted
// is answered in time), and the shedder did refuse.
func TestOverloadRealProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("offers load for seconds; not in -short")
	}
	d := *overloadDuration
	// The CI form compares no shedding with FIFO shedding; the longer runs
	// for the doc (-overload.runs > 1) add LIFO.
	var without, with, lifo []loadResult
	for range max(1, *overloadRuns) {
		without = append(without, runOverload(t, false, overload.FIFO, d))
		with = append(with, runOverload(t, true, overload.FIFO, d))
		if *overloadRuns > 1 {
			lifo = append(lifo, runOverload(t, true, overload.LIFO, d))
		}
	}
	modes := []struct {
		name string
		rs   []loadResult
	}{{"without shedding", without}, {"shedding fifo", with}}
	if len(lifo) > 0 {
		modes = append(modes, struct {
			name string
			rs   []loadResult
		}{"shedding lifo", lifo})
	}
	for _, m := range modes {
		r := m.rs[len(m.rs)-1]
		t.Logf("%-16s offered %.0f/s for %v to an upstream of %.0f/s, patience %v: last run sent %d, ok %d, 503 %d, failed or late %d",
			m.name, offered, d, upCapacity, patience, r.sent, r.ok, r.shed, r.failed)
		t.Logf("%-16s medians of %d runs: goodput %.1f/s (%.0f%% of capacity), p50 %v, p99 %v",
			m.name, len(m.rs), median(m.rs, func(r loadResult) float64 { return r.goodput }),
			100*median(m.rs, func(r loadResult) float64 { return r.goodput })/upCapacity,
			time.Duration(median(m.rs, func(r loadResult) float64 { return float64(r.p50) })).Round(time.Millisecond),
			time.Duration(median(m.rs, func(r loadResult) float64 { return float64(r.p99) })).Round(time.Millisecond))
	}
	gw, gwo := median(with, func(r loadResult) float64 { return r.goodput }), median(without, func(r loadResult) float64 { return r.goodput })
	if gw < 1.3*gwo {
		t.Errorf("goodput with shedding %.1f/s, without %.1f/s: want at least 1.3 times", gw, gwo)
	}
	if with[len(with)-1].shed == 0 {
		t.Error("the shedder refused nothing at 1.5 times the capacity")
	}
}

func median(rs []loadResult, f func(loadResult) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
