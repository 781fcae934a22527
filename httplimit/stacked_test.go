package httplimit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/overload"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/memstore"
	"github.com/portero-rl/portero/store/redisstore"
)

// The stacked-shape experiment: a per-client rule stacked on a paced queue
// of 2/s (2 places) shaped {delay: 0, max_delay: 600ms}. Of 8 requests at
// once the first departs in 0.5 s and the second would in 1.0 s, past the
// bound: it and the six after it are refused, and a refused request counts
// in no rule.

// stack is a rule stacked on the shaped queue, and how many units the store
// holds for the client under it.
type stack struct {
	name string
	rule policy.Rule
	used func(t *testing.T, st portero.Store, r *policy.Rule) int64
}

// clientKey is the store key of the client 127.0.0.1 under r.
func clientKey(t *testing.T, r *policy.Rule) string {
	t.Helper()
	p, err := policy.New(nil, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	k, ok := p.KeyOf(r.Key, nil, &policy.Request{ClientIP: netip.MustParseAddr("127.0.0.1")})
	if !ok {
		t.Fatal("no key for 127.0.0.1")
	}
	return k
}

func stacks(t *testing.T) []stack {
	quota, err := portero.ParseQuota("1000/day")
	if err != nil {
		t.Fatal(err)
	}
	peekUsed := func(t *testing.T, st portero.Store, r *policy.Rule) int64 {
		t.Helper()
		d, err := st.Peek(context.Background(), r.StoreRule(), clientKey(t, r), time.Now(), 1)
		if err != nil {
			t.Fatal(err)
		}
		return d.Limit - d.Remaining
	}
	return []stack{
		{"rate", rule(t, "per-client", "ip", "100/min", func(r *policy.Rule) { r.Algorithm = portero.SlidingLog }), peekUsed},
		{"quota", policy.Rule{Name: "per-client", Key: policy.MustParseKey("ip"), Limit: quota}, peekUsed},
		{"concurrency", policy.Rule{Name: "per-client", Key: policy.MustParseKey("ip"), Concurrency: portero.ConcurrencyRule{Max: 20}},
			func(t *testing.T, st portero.Store, r *policy.Rule) int64 {
				t.Helper()
				l, d, err := st.(portero.LeaseStore).Acquire(context.Background(), time.Now(), r.Concurrency, clientKey(t, r))
				if err != nil {
					t.Fatal(err)
				}
				defer l.Release(context.Background())
				return d.Limit - d.Remaining - 1 // less this probe's own slot
			}},
	}
}

// shapedStack is the middleware with s's rule stacked on the shaped queue.
func shapedStack(t *testing.T, st portero.Store, s stack) (*httplimit.Limiter, *policy.Policy) {
	t.Helper()
	p, err := policy.New([]policy.Rule{
		s.rule,
		rule(t, "pace", "global", "2/s", func(r *policy.Rule) { r.Algorithm = portero.LeakyQueue }),
	}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := httplimit.New(httplimit.Config{Policy: p, Store: st, Shapes: map[string]overload.Shape{"pace": {MaxDelay: 600 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	return lim, p
}

// TestShapeExperiment runs the experiment in a synctest bubble, where the
// 8 requests arrive at the same instant: exactly 1 is admitted, 7 are
// refused with 429, and the stacked rule counts 1.
func TestShapeExperiment(t *testing.T) {
	for _, s := range stacks(t) {
		t.Run(s.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st, err := memstore.New(memstore.Config{SweepInterval: -1})
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close(context.Background())
				lim, p := shapedStack(t, st, s)
				release := make(chan struct{})
				h := lim.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
				codes := make(chan int, 8)
				for range 8 {
					go func() {
						rec := httptest.NewRecorder()
						req := httptest.NewRequest("GET", "/", nil)
						req.RemoteAddr = "127.0.0.1:1234"
						h.ServeHTTP(rec, req)
						codes <- rec.Code
					}()
				}
				time.Sleep(time.Second) // the admitted one is past its hold, in the handler
				synctest.Wait()
				if got := s.used(t, st, p.Rule("per-client")); got != 1 {
					t.Errorf("the stacked rule counts %d for the client, want 1: the 7 refused count in no rule", got)
				}
				close(release)
				n := map[int]int{}
				for range 8 {
					n[<-codes]++
				}
				if n[200] != 1 || n[429] != 7 {
					t.Errorf("statuses %v, want one 200 and seven 429", n)
				}
			})
		})
	}
}

// TestShapeRefusalCountsNothing runs the experiment over real loopback HTTP,
// on the memory store and on a real redis-server: whatever the machine's
// speed spreads the 8 requests over, the stacked rule counts exactly the
// admitted ones, and every other request is refused with 429.
func TestShapeRefusalCountsNothing(t *testing.T) {
	srv := redistest.Start(t)
	stores := map[string]func(t *testing.T, prefix string) portero.Store{
		"memory": func(t *testing.T, _ string) portero.Store {
			st, err := memstore.New(memstore.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close(context.Background()) })
			return st
		},
		"redis": func(t *testing.T, prefix string) portero.Store {
			st, err := redisstore.New(redisstore.Config{URL: srv.URL(), Prefix: prefix, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close(context.Background()) })
			return st
		},
	}
	for name, open := range stores {
		for _, s := range stacks(t) {
			t.Run(name+"/"+s.name, func(t *testing.T) {
				st := open(t, "stacked-"+s.name+":")
				lim, p := shapedStack(t, st, s)
				g := newHoldGate()
				hs := httptest.NewServer(lim.Handler(g))
				defer hs.Close()
				codes := make(chan int, 8)
				var wg sync.WaitGroup
				for range 8 {
					wg.Go(func() {
						resp, err := http.Get(hs.URL)
						if err != nil {
							t.Error(err)
							codes <- 0
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						codes <- resp.StatusCode
					})
				}
				// Every refusal comes at once; the admitted requests wait in
				// the handler until the count is read.
				n := map[int]int{}
				for range 8 {
					select {
					case c := <-codes:
						n[c]++
						continue
					case <-g.entered:
					}
					n[200]++
				}
				if got := s.used(t, st, p.Rule("per-client")); got != int64(n[200]) || n[200] < 1 || n[200]+n[429] != 8 {
					t.Errorf("statuses %v and the stacked rule counts %d: want it to count exactly the admitted requests", n, got)
				}
				close(g.release)
				wg.Wait()
			})
		}
	}
}
