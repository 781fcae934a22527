// Package bench measures Portero's memory store beside its peers, each the
// same way: one hot key serially and in parallel, a million keys at random,
// and the heap each key costs. It is a separate module so that the peers
// never become dependencies of Portero. scripts/bench.sh runs it and writes
// docs/benchmarks.md.
package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	chirate "github.com/go-chi/httprate"
	sethvargo "github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	throttledmem "github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/store/memstore"
)

// Every subject enforces the same limit: a million per second with a burst
// of a thousand (or a million per second window for the window-based peers).
const (
	perSecond = 1_000_000
	burst     = 1_000
	numKeys   = 1_000_000
)

// allowFunc decides one request of cost 1 for key; now is used only by the
// forms that take the instant (the others read the clock themselves).
type allowFunc func(key string, now time.Time) bool

// subject is one limiter under test: make builds a fresh one and returns its
// decision function and a function that releases it.
type subject struct {
	name string
	make func(tb testing.TB) (allowFunc, func())
}

// takesNow reports whether the subject uses the instant it is given; the
// others read their own clock, and are given none.
func (s subject) takesNow() bool { return strings.HasSuffix(s.name, "-now") }

var ctx = context.Background()

func subjects() []subject {
	porteroRule := portero.Rule{Name: "bench", Algorithm: portero.GCRA,
		Limit: portero.Limit{Count: perSecond, Window: time.Second, Burst: burst}}
	newPortero := func(tb testing.TB, cfg memstore.Config) (*memstore.Limiter, func()) {
		s, err := memstore.New(cfg)
		if err != nil {
			tb.Fatal(err)
		}
		l, err := s.Limiter(porteroRule)
		if err != nil {
			tb.Fatal(err)
		}
		return l, func() { s.Close(ctx) }
	}
	return []subject{
		{"noop-now", func(testing.TB) (allowFunc, func()) {
			return func(k string, now time.Time) bool { return len(k) > 0 && k[0] != 0 && now.UnixNano() > 0 }, func() {}
		}},
		{"portero-now", func(tb testing.TB) (allowFunc, func()) {
			l, done := newPortero(tb, memstore.Config{})
			return func(k string, now time.Time) bool {
				d, _ := l.AllowN(ctx, k, now, 1)
				return d.Allowed
			}, done
		}},
		{"portero-clock", func(tb testing.TB) (allowFunc, func()) {
			l, done := newPortero(tb, memstore.Config{})
			return func(k string, _ time.Time) bool {
				d, _ := l.Allow(ctx, k)
				return d.Allowed
			}, done
		}},
		{"portero-coarse", func(tb testing.TB) (allowFunc, func()) {
			l, done := newPortero(tb, memstore.Config{ClockResolution: time.Millisecond})
			return func(k string, _ time.Time) bool {
				d, _ := l.Allow(ctx, k)
				return d.Allowed
			}, done
		}},
		{"xrate-syncmap-now", func(testing.TB) (allowFunc, func()) {
			m := newXRateSyncMap()
			return func(k string, now time.Time) bool { return m.get(k).AllowN(now, 1) }, func() {}
		}},
		{"xrate-syncmap-clock", func(testing.TB) (allowFunc, func()) {
			m := newXRateSyncMap()
			return func(k string, _ time.Time) bool { return m.get(k).Allow() }, func() {}
		}},
		{"xrate-sharded-now", func(testing.TB) (allowFunc, func()) {
			m := newXRateSharded()
			return func(k string, now time.Time) bool { return m.get(k).AllowN(now, 1) }, func() {}
		}},
		{"xrate-sharded-clock", func(testing.TB) (allowFunc, func()) {
			m := newXRateSharded()
			return func(k string, _ time.Time) bool { return m.get(k).Allow() }, func() {}
		}},
		{"sethvargo-memorystore", func(tb testing.TB) (allowFunc, func()) {
			s, err := sethvargo.New(&sethvargo.Config{Tokens: perSecond, Interval: time.Second})
			if err != nil {
				tb.Fatal(err)
			}
			return func(k string, _ time.Time) bool {
				_, _, _, ok, _ := s.Take(ctx, k)
				return ok
			}, func() { s.Close(ctx) }
		}},
		{"throttled-gcra-memstore", func(tb testing.TB) (allowFunc, func()) {
			st, err := throttledmem.NewCtx(1 << 20) // LRU bounded like Portero's default
			if err != nil {
				tb.Fatal(err)
			}
			rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerSec(perSecond), MaxBurst: burst})
			if err != nil {
				tb.Fatal(err)
			}
			return func(k string, _ time.Time) bool {
				limited, _, _ := rl.RateLimitCtx(ctx, k, 1)
				return !limited
			}, func() {}
		}},
		{"ulule-memory", func(testing.TB) (allowFunc, func()) {
			st := ululemem.NewStoreWithOptions(ulule.StoreOptions{Prefix: "b", CleanUpInterval: time.Minute})
			l := ulule.New(st, ulule.Rate{Period: time.Second, Limit: perSecond})
			return func(k string, _ time.Time) bool {
				c, _ := l.Get(ctx, k)
				return !c.Reached
			}, func() {}
		}},
		{"httprate-local", func(testing.TB) (allowFunc, func()) {
			return newHTTPRate().allow, func() {}
		}},
	}
}

// xrateSyncMap keys *rate.Limiter by string in a sync.Map, the common way to
// use golang.org/x/time/rate per client.
type xrateSyncMap struct{ m sync.Map }

func newXRateSyncMap() *xrateSyncMap { return &xrateSyncMap{} }

func (x *xrateSyncMap) get(k string) *rate.Limiter {
	if l, ok := x.m.Load(k); ok {
		return l.(*rate.Limiter)
	}
	l, _ := x.m.LoadOrStore(k, rate.NewLimiter(perSecond, burst))
	return l.(*rate.Limiter)
}

// xrateSharded keys *rate.Limiter by string in 64 mutex-guarded maps.
type xrateSharded struct {
	shards [64]struct {
		sync.Mutex
		m map[string]*rate.Limiter
		_ [40]byte
	}
}

func newXRateSharded() *xrateSharded {
	x := &xrateSharded{}
	for i := range x.shards {
		x.shards[i].m = map[string]*rate.Limiter{}
	}
	return x
}

func (x *xrateSharded) get(k string) *rate.Limiter {
	var h uint32 = 2166136261 // FNV-1a
	for i := 0; i < len(k); i++ {
		h = (h ^ uint32(k[i])) * 16777619
	}
	s := &x.shards[h%uint32(len(x.shards))]
	s.Lock()
	l := s.m[k]
	if l == nil {
		l = rate.NewLimiter(perSecond, burst)
		s.m[k] = l
	}
	s.Unlock()
	return l
}

// httpRate decides as httprate.RateLimiter.OnLimit does, without the HTTP
// request and response: under the limiter's mutex it estimates the rate
// from the local counter and increments it.
type httpRate struct {
	mu sync.Mutex
	rl *chirate.RateLimiter
}

func newHTTPRate() *httpRate {
	return &httpRate{rl: chirate.NewRateLimiter(perSecond, time.Second)}
}

func (h *httpRate) allow(k string, _ time.Time) bool {
	window := time.Now().UTC().Truncate(time.Second)
	h.mu.Lock()
	defer h.mu.Unlock()
	_, r, _ := h.rl.Status(k)
	if int(math.Round(r))+1 > perSecond {
		return false
	}
	h.rl.Counter().IncrementBy(k, window, 1)
	return true
}

// keys returns numKeys distinct IPv4-like keys and a random order of them,
// made once.
var keys = sync.OnceValues(func() ([]string, []uint32) {
	ks := make([]string, numKeys)
	for i := range ks {
		ks[i] = fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255)
	}
	r := rand.New(rand.NewPCG(1, 2))
	order := make([]uint32, 1<<22)
	for i := range order {
		order[i] = uint32(r.IntN(numKeys))
	}
	return ks, order
})

var base = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// startHot builds s, decides once for the key "hot" so that it exists, and
// starts the measurement: the hot-key benchmarks' common setup.
func startHot(b *testing.B, s subject) (allowFunc, func()) {
	allow, done := s.make(b)
	allow("hot", base)
	b.ReportAllocs()
	b.ResetTimer()
	return allow, done
}

// BenchmarkHotKey: one key, one goroutine.
func BenchmarkHotKey(b *testing.B) {
	for _, s := range subjects() {
		b.Run(s.name, func(b *testing.B) {
			allow, done := startHot(b, s)
			defer done()
			callgrindToggle()
			defer callgrindToggle()
			if !s.takesNow() {
				for range b.N {
					allow("hot", time.Time{})
				}
				return
			}
			for i := range b.N {
				allow("hot", base.Add(time.Duration(i)*250))
			}
		})
	}
}

// BenchmarkHotKeyParallel: one key, GOMAXPROCS goroutines.
func BenchmarkHotKeyParallel(b *testing.B) {
	for _, s := range subjects() {
		b.Run(s.name, func(b *testing.B) {
			allow, done := startHot(b, s)
			defer done()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if i++; s.takesNow() {
						allow("hot", base.Add(time.Duration(i)*250))
					} else {
						allow("hot", time.Time{})
					}
				}
			})
		})
	}
}

// BenchmarkParallelFloor: where the time of BenchmarkHotKeyParallel/portero-now
// goes, two goroutines (-cpu 2) on the same GCRA limiter. one-key is that
// benchmark (an eighth of the decisions admitted, each one a compare-and-swap
// that takes the slot's cache line from the other core, which then reads it
// back); refused is one key that admits nothing (a read-only line, shared by
// both cores); key-each gives each goroutine its own key (no line shared).
// shared-add and own-add are the machine's own: an atomic add on one word by
// both goroutines (the line moves on every add) or on a word each. A
// decision that admits must write its key's word, so one-key can be no
// cheaper than refused plus the line's moves on its admissions.
func BenchmarkParallelFloor(b *testing.B) {
	gcra := func(count int64, each bool) func(b *testing.B) {
		return func(b *testing.B) {
			s, err := memstore.New(memstore.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close(ctx)
			l, err := s.Limiter(portero.Rule{Name: "floor", Algorithm: portero.GCRA,
				Limit: portero.Limit{Count: count, Window: time.Second, Burst: burst}})
			if err != nil {
				b.Fatal(err)
			}
			var goroutines, admitted atomic.Int64
			for _, k := range []string{"hot", "hot-1"} {
				l.AllowN(ctx, k, base, 1)
			}
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				key := "hot"
				if each && goroutines.Add(1) == 2 {
					key = "hot-1"
				}
				i, n := 0, int64(0)
				for pb.Next() {
					i++
					if d, _ := l.AllowN(ctx, key, base.Add(time.Duration(i)*250), 1); d.Allowed {
						n++
					}
				}
				admitted.Add(n)
			})
			b.ReportMetric(float64(admitted.Load())/float64(b.N), "admitted/op")
		}
	}
	add := func(shared bool) func(b *testing.B) {
		return func(b *testing.B) {
			var words [16]atomic.Uint64 // two lines
			var goroutines atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				w := &words[0]
				if !shared && goroutines.Add(1) == 2 {
					w = &words[8]
				}
				for pb.Next() {
					w.Add(1)
				}
			})
		}
	}
	b.Run("one-key", gcra(perSecond, false))
	b.Run("refused", gcra(1, false))
	b.Run("key-each", gcra(perSecond, true))
	b.Run("shared-add", add(true))
	b.Run("own-add", add(false))
}

// BenchmarkRandomKeys: a million keys, all known to the limiter, picked at
// random; the clock is read on every decision: by the subject, or for the
// -now forms by the loop with time.Now.
func BenchmarkRandomKeys(b *testing.B) {
	ks, order := keys()
	for _, s := range subjects() {
		b.Run(s.name, func(b *testing.B) {
			allow, done := s.make(b)
			defer done()
			for _, k := range ks {
				allow(k, time.Now())
			}
			// The setup's garbage is collected before the clock starts:
			// a collection running during the loop (marking the million
			// keys) would slow whichever subject it falls on.
			runtime.GC()
			b.ReportAllocs()
			b.ResetTimer()
			callgrindToggle()
			defer callgrindToggle()
			if !s.takesNow() {
				for i := range b.N {
					allow(ks[order[i&(len(order)-1)]], time.Time{})
				}
				return
			}
			for i := range b.N {
				allow(ks[order[i&(len(order)-1)]], time.Now())
			}
		})
	}
}

// BenchmarkMemoryPerKey reports the live heap each key costs once a million
// keys are known (HeapAlloc after a GC, before and after), as B/key. The
// key strings themselves exist before and are not counted; a subject that
// copies them pays for the copy. Each iteration builds a fresh limiter.
func BenchmarkMemoryPerKey(b *testing.B) {
	ks, _ := keys()
	for _, s := range subjects() {
		if strings.HasSuffix(s.name, "-clock") || strings.HasSuffix(s.name, "-coarse") {
			continue // the same structure as the -now form
		}
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			var perKey float64
			for range b.N {
				var m0, m1 runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&m0)
				allow, done := s.make(b)
				now := time.Now()
				for _, k := range ks {
					allow(k, now)
				}
				runtime.GC()
				runtime.ReadMemStats(&m1)
				perKey = float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc)) / numKeys
				runtime.KeepAlive(allow)
				done()
			}
			b.ReportMetric(perKey, "B/key")
		})
	}
}

// BenchmarkAlgorithms: one hot key, one goroutine, for every algorithm of
// the memory store, with the instant passed in (now, AllowN, a quarter of
// a microsecond later each time) and with the store's clock (clock, Allow).
// scripts/bench-ir.sh counts its instructions per decision.
func BenchmarkAlgorithms(b *testing.B) {
	for _, a := range portero.Algorithms {
		for _, form := range []string{"now", "clock"} {
			b.Run(string(a)+"/"+form, func(b *testing.B) {
				s, err := memstore.New(memstore.Config{SweepInterval: -1}) // no goroutine to switch to
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close(ctx)
				l, err := s.Limiter(portero.Rule{Algorithm: a, Limit: portero.Limit{Count: perSecond, Window: time.Second, Burst: burst}})
				if err != nil {
					b.Fatal(err)
				}
				l.AllowN(ctx, "hot", base, 1)
				b.ReportAllocs()
				b.ResetTimer()
				callgrindToggle()
				defer callgrindToggle()
				if form == "clock" {
					for range b.N {
						l.Allow(ctx, "hot")
					}
					return
				}
				for i := range b.N {
					l.AllowN(ctx, "hot", base.Add(time.Duration(i)*250), 1)
				}
			})
		}
	}
}

// BenchmarkClock measures time.Now on this machine: the difference between
// the -now and -clock forms.
func BenchmarkClock(b *testing.B) {
	b.ReportAllocs()
	var sink int64
	for b.Loop() {
		sink += time.Now().UnixNano()
	}
	_ = sink
}
