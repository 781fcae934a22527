package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/store/storetest"
)

var internalPrefixes atomic.Int64

func newInternalStore(t *testing.T, url string) *Store {
	t.Helper()
	s, err := New(Config{URL: url, Clock: CallerClock, Timeout: 10 * time.Second,
		Prefix: fmt.Sprintf("i%d:", internalPrefixes.Add(1))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func functionList(t *testing.T, addr string) string {
	t.Helper()
	out, err := redistest.Do(addr, "FUNCTION", "LIST")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The drivers run as scripts by hash (EVALSHA), as on a server without
// functions, decide exactly as the functions do: the conformance suite.
func TestConformanceScriptsByHash(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T) portero.Store {
		s := newInternalStore(t, srv.URL())
		s.scripts.lib.off.Store(true)
		return s
	})
	if l := functionList(t, srv.Addr()); l != "" {
		t.Errorf("FUNCTION LIST after scripts by hash only = %q, want nothing loaded", l)
	}
}

// The store loads its library on first use, calls it, loads it again after
// the server lost it (FUNCTION FLUSH, as a restarted server without
// persistence would), and never replaces another version's library.
func TestLibraryLoadedAndReloaded(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	_, name := Library()
	if !strings.HasPrefix(name, "portero_") || len(name) != len("portero_")+12 {
		t.Errorf("Library() name = %q, want portero_ and 12 hex digits", name)
	}
	other := "#!lua name=portero_000000000000\nredis.register_function('portero_000000000000_one', function() return 1 end)"
	if _, err := redistest.Do(srv.Addr(), "FUNCTION", "LOAD", other); err != nil {
		t.Fatal(err)
	}
	s := newInternalStore(t, srv.URL())
	rule := portero.Rule{Name: "r", Algorithm: portero.GCRA, Limit: portero.PerSecond(2)}
	now := storetest.Base
	decide := func(want bool) {
		t.Helper()
		d, err := s.AllowAll(ctx, now, []portero.Hit{{Rule: rule, Key: "k", Cost: 1}})
		if err != nil || d[0].Allowed != want {
			t.Fatalf("AllowAll = %+v, %v; want allowed %v", d, err, want)
		}
	}
	decide(true)
	l := functionList(t, srv.Addr())
	if !strings.Contains(l, name) || !strings.Contains(l, "portero_000000000000") {
		t.Fatalf("FUNCTION LIST = %q, want %s beside the other version's library", l, name)
	}
	if _, err := redistest.Do(srv.Addr(), "FUNCTION", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	decide(true) // the state is still there: the second of a burst of 2
	decide(false)
	if l := functionList(t, srv.Addr()); !strings.Contains(l, name) {
		t.Errorf("FUNCTION LIST after FLUSH and a call = %q, want %s loaded again", l, name)
	}
	if s.scripts.lib.off.Load() {
		t.Error("the store fell back to scripts by hash on a server with functions")
	}
}

// A user whose ACL denies FUNCTION (so FUNCTION LOAD fails, as FCALL does
// on a server without functions), or FCALL, gets the same decisions from
// the scripts run by hash.
func TestNoFunctionPermission(t *testing.T) {
	for _, deny := range []string{"-function", "-fcall"} {
		t.Run(deny, func(t *testing.T) { testNoFunctionPermission(t, deny) })
	}
}

func testNoFunctionPermission(t *testing.T, deny string) {
	srv := redistest.Start(t)
	ctx := context.Background()
	if _, err := redistest.Do(srv.Addr(), "ACL", "SETUSER", "limited", "on", ">secret", "~*", "&*", "+@all", deny); err != nil {
		t.Fatal(err)
	}
	s := newInternalStore(t, "redis://limited:secret@"+srv.Addr()+"/0")
	rule := portero.Rule{Name: "r", Algorithm: portero.FixedWindow, Limit: portero.PerMinute(3)}
	now := storetest.Base
	for i := range 5 {
		d, err := s.AllowAll(ctx, now, []portero.Hit{{Rule: rule, Key: "k", Cost: 1}, {Rule: rule, Key: "j", Cost: 1}})
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if want := i < 3; d[0].Allowed != want || d[1].Allowed != want {
			t.Fatalf("call %d: %+v, want allowed %v", i, d, want)
		}
	}
	// The server's clock, whose common call has a shorter ARGV as a function.
	ss, err := New(Config{URL: "redis://limited:secret@" + srv.Addr() + "/0", Prefix: "server:", Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close(ctx)
	for _, a := range portero.Algorithms {
		r := portero.Rule{Name: "s", Algorithm: a, Limit: portero.Limit{Count: 2, Window: time.Hour}}
		for i := range 3 {
			d, err := ss.AllowAll(ctx, time.Time{}, []portero.Hit{{Rule: r, Key: "k", Cost: 1}})
			if err != nil || d[0].Allowed != (i < 2) || d[0].Remaining != max(0, int64(1-i)) {
				t.Fatalf("%s, server clock, call %d: %+v, %v; want allowed %v", a, i, d, err, i < 2)
			}
		}
	}
	if !s.scripts.lib.off.Load() || !ss.scripts.lib.off.Load() {
		t.Error("functions still on after FUNCTION LOAD or FCALL was denied")
	}
	if l := functionList(t, srv.Addr()); l != "" {
		t.Errorf("FUNCTION LIST = %q, want nothing loaded", l)
	}
}

// The one-hit call in its common form (server clock, counted, no TTL floor)
// goes to NAME_hit with only the arguments that vary; it decides as
// NAME_one does with the whole ARGV. Twin keys take the two paths in turn
// (NAME_one is forced by a TTL floor of 1 ms, which changes no decision)
// under limits so long that the microseconds between two calls change
// nothing but the waits, which must agree to within the test's duration.
func TestHitMatchesOne(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	s, err := New(Config{URL: srv.URL(), Timeout: 10 * time.Second, Prefix: "hit:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	start := time.Now()
	for _, a := range portero.Algorithms {
		if a == portero.SlidingLog {
			continue // its one-hit call is the multi-hit driver
		}
		rule := portero.Rule{Name: "hit", Algorithm: a, Limit: portero.Limit{Count: 5, Window: 1000 * time.Hour, Burst: 4}}
		c, err := s.compiled(rule)
		if err != nil {
			t.Fatal(err)
		}
		sc := s.scripts.hit[a]
		for i := range 7 {
			var got [2][]int64
			for j, floor := range []string{"0", "1"} {
				key := s.key(c, portero.Hit{Rule: rule, Key: fmt.Sprint("twin", j)})
				args := []string{"server", "0", "0", "1", floor, string(a), "1", c.args[0], c.args[1], c.args[2]}
				res, err := sc.Exec(ctx, s.conn.Load().client, []string{key}, args).AsIntSlice()
				if err != nil {
					t.Fatalf("%s call %d, TTL floor %s: %v", a, i, floor, err)
				}
				got[j] = res
			}
			lean, full := got[0], got[1]
			if len(lean) != len(full) || lean[0] != full[0] || lean[1] != full[1] || lean[2] != full[2] {
				t.Fatalf("%s call %d: NAME_hit replied %v, NAME_one %v", a, i, lean, full)
			}
			slack := int64(time.Since(start))
			for k := 3; k < 6; k++ { // the waits, in ns
				if d := lean[k] - full[k]; d > slack || d < -slack {
					t.Fatalf("%s call %d: NAME_hit replied %v, NAME_one %v (field %d differs by more than %v)", a, i, lean, full, k, time.Duration(slack))
				}
			}
		}
	}
}

// The sliding counter at the bounds of its whole-number arithmetic: a count
// near 2^32 and a window of 2^52 ns, where prev·elapsed and n·W pass 2^53
// and the script divides in pieces, stays exact against the Reference.
func TestSlidingCounterResetHugeLimits(t *testing.T) {
	srv := redistest.Start(t)
	s := newInternalStore(t, srv.URL())
	var trace []storetest.Trace
	for _, l := range []portero.Limit{
		{Count: 1<<32 - 1, Window: 1 << 52},
		{Count: 1<<32 - 1, Window: time.Hour},
		{Count: 3, Window: 1 << 52},
		{Count: 1 << 20, Window: 1500 * time.Millisecond},
	} {
		r := portero.Rule{Name: fmt.Sprint("huge", l.Count, l.Window), Algorithm: portero.SlidingCounter, Limit: l}
		at := time.Duration(0)
		for i := range 40 {
			at += time.Duration(i*i) * 37 * time.Millisecond
			trace = append(trace, storetest.Trace{At: at, Hits: []portero.Hit{{Rule: r, Key: "k", Cost: 1 + int64(i%3)}}})
		}
	}
	storetest.CompareTrace(t, s, storetest.NewReference(), trace)
}
