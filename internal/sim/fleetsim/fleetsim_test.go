package fleetsim

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero"
)

// TestFleetBounds runs the three modes at 10, 100 and 1,000 instances:
// every stated bound holds (exact and leased never over a key's limit in
// a window, exact never early, leased early by at most what was
// stranded); exact spends every contended window whole, leased calls the
// shared store less than once per decision, and local, each instance
// alone, goes over the limit.
func TestFleetBounds(t *testing.T) {
	res, err := Run(context.Background(), Config{Instances: []int{10, 100, 1000}})
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Check(); err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 9 {
		t.Fatalf("%d rows, want 3 modes × 3 sizes", len(res.Rows))
	}
	for _, r := range res.Rows {
		t.Logf("%s %d: worst %d of %d, %d early, %.3f calls/decision", r.Mode, r.Instances, r.WorstWindow, r.Limit, r.EarlyRefusals, float64(r.StoreCalls)/float64(r.Requests))
		switch r.Mode {
		case "exact":
			if r.WorstWindow != r.Limit || r.StoreCalls != uint64(r.Requests) {
				t.Errorf("exact at %d: worst window %d of %d, %d calls for %d requests; want the limit spent, a call per request", r.Instances, r.WorstWindow, r.Limit, r.StoreCalls, r.Requests)
			}
		case "leased":
			if r.WorstWindow > r.Limit || r.WorstWindow < r.Limit*3/4 || r.StoreCalls*3 > uint64(r.Requests)*2 {
				t.Errorf("leased at %d: worst window %d of %d, %d calls for %d requests; want at most the limit, most of it spent, under 2/3 of a call per request", r.Instances, r.WorstWindow, r.Limit, r.StoreCalls, r.Requests)
			}
		case "local":
			if r.WorstWindow <= r.Limit || r.StoreCalls != 0 {
				t.Errorf("local at %d: worst window %d of %d, %d store calls; want over the limit, no shared store", r.Instances, r.WorstWindow, r.Limit, r.StoreCalls)
			}
		}
	}
}

// TestFleetBoundsBroken: the checks see a window over its limit, a
// leased window refused early beyond what was stranded and an exact
// early refusal, and Check names them all.
func TestFleetBoundsBroken(t *testing.T) {
	f := &fleet{mode: "leased", hot: portero.Rule{Limit: portero.Limit{Count: 10, Window: time.Second}}, cold: portero.Rule{Limit: portero.Limit{Count: 2, Window: time.Second}},
		hotIn: []int64{11, 5, 10}, hotRefused: []int64{0, 3, 1}, stranded: []uint64{0, 2, 0}, coldIn: [][]int64{{1, 3}}}
	got := f.bounds()
	want := []string{"window 0: the hot key admitted 11, limit 10", "window 1: the hot key admitted 5 and 2 units were stranded", "cold key 0 admitted 3"}
	if len(got) != len(want) {
		t.Fatalf("bounds = %q, want %d problems", got, len(want))
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("bounds[%d] = %q, want %q", i, got[i], want[i])
		}
	}
	f.mode, f.early = "exact", 1
	if got := f.bounds(); len(got) != 3 || !strings.Contains(got[2], "1 early refusals") {
		t.Errorf("exact with an early refusal: %q", got)
	}
	res := &Result{Rows: []Row{{Mode: "leased", Instances: 4, Broken: []string{"x"}}, {Mode: "exact", Instances: 4}}}
	if err := res.Check(); err == nil || !strings.Contains(err.Error(), "leased, 4 instances: x") {
		t.Errorf("Check = %v, want the broken bound named", err)
	}
}

// TestFleetConfig: a fleet size or rate out of range is an error that
// says which.
func TestFleetConfig(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Instances: []int{0}}, "0 instances"},
		{Config{Instances: []int{10001}}, "10001 instances"},
		{Config{Rate: -1}, "rate -1"},
		{Config{Windows: 1}, "1 windows"},
		{Config{Budget: 2 * time.Minute}, "budget 2m0s"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %q", c.cfg, err, c.want)
		}
	}
}

// TestFleetBucketBounds runs a GCRA hot key at 10 and 500 instances: the
// exact fleet admits at most B + r·τ in any interval τ, the leased one
// B + r·(τ + T), and the checks see an admission stream that breaks it.
func TestFleetBucketBounds(t *testing.T) {
	res, err := Run(context.Background(), Config{Instances: []int{10, 500}, Algorithm: portero.GCRA})
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Check(); err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Rows {
		t.Logf("%s %d: worst window %d (rate %d a window), %d refused, %d early", r.Mode, r.Instances, r.WorstWindow, r.Limit, r.Refused, r.EarlyRefusals)
	}
	rule := portero.Rule{Algorithm: portero.GCRA, Limit: portero.Limit{Count: 10, Window: time.Second}, Budget: 50 * time.Millisecond}
	f := &fleet{mode: "leased", hot: rule, cfg: Config{Window: time.Second, Windows: 2}}
	for range 40 { // over B + r(τ+T) + 1 at every τ: 14, 23 and 33
		f.admits = append(f.admits, 10*time.Millisecond)
	}
	if got := f.bucketBounds(); len(got) != 3 || !strings.Contains(got[0], "τ = 100ms: the hot key admitted 40") {
		t.Errorf("40 admissions at one instant on B = 10: %q, want every τ broken", got)
	}
}
