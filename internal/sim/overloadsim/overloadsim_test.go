package overloadsim

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/sim"
	"github.com/portero-rl/portero/store/memstore"
)

func csvOf(t *testing.T, r interface{ Table() sim.Table }) string {
	t.Helper()
	var b bytes.Buffer
	if err := r.Table().Write(&b, "csv"); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestOverload pins the figures docs/overload.md quotes. Over the last
// minute every mode answers 100 per second, the capacity, but the unbounded
// queue answers nobody in time: a request arriving at t waits behind
// 50·t unanswered ones, t/2 s, so from t = 3.8 s on every answer comes after
// the client's 2 s; by the last minute its answers are about 40 s late. The
// bounded queue with deadlines answers everyone it keeps in time, its p99
// just under 2 s (the deadline minus the run time is when a waiter leaves);
// milk answers the newest first, its p99 one run time and a little.
func TestOverload(t *testing.T) {
	res, err := RunOverload()
	if err != nil {
		t.Fatal(err)
	}
	want := `mode,offered_per_s,capacity_per_s,throughput_per_s,goodput_per_s,goodput_ratio,p99_latency_s
unbounded-fifo,150,100,100.00,0.00,0.000,39.833
bounded-deadline,150,100,100.00,100.00,1.000,1.993
lifo,150,100,100.00,100.00,1.000,0.107
`
	if got := csvOf(t, res); got != want {
		t.Errorf("overload table =\n%s\nwant\n%s", got, want)
	}
	for _, r := range res.Rows {
		if r.Mode != "unbounded-fifo" && r.Goodput < 0.9*r.Capacity {
			t.Errorf("%s: goodput %v, want at least 90%% of %v", r.Mode, r.Goodput, r.Capacity)
		}
	}
	// The unbounded queue's goodput per second: full at first, nothing
	// after a few seconds, while its throughput stays at capacity.
	good, all := res.Goodput[0], res.Throughput[0]
	if good[1] != 100 || all[100] != 100 {
		t.Errorf("unbounded-fifo second 1 goodput %v, second 100 throughput %v; want 100 and 100", good[1], all[100])
	}
	for s := 6; s < len(good); s++ {
		if good[s] != 0 {
			t.Fatalf("unbounded-fifo: %v answers in time in second %d, want none after 6 s (arrivals after 3.8 s wait more than 1.9 s)", good[s], s)
		}
	}
}

// TestOverloadLearnsDeadlines: the bounded queue's waiters are dropped at
// their deadline minus the run time the Gate measured, and those it would
// drop before their turn are refused at the door; none of its answers is
// late, and it refuses what it cannot serve: 50 per second.
func TestOverloadLearnsDeadlines(t *testing.T) {
	g, err := OverloadGate("bounded-deadline")
	if err != nil {
		t.Fatal(err)
	}
	var jobs []*Job
	for _, at := range every(OverloadOffered, 1500, 0) { // 10 s
		jobs = append(jobs, &Job{At: at})
		jobs[len(jobs)-1].Req.Deadline = sim.Epoch.Add(at + OverloadPatience)
	}
	serve(g, jobs, OverloadRun, 0)
	late, refused := 0, 0
	for _, j := range jobs {
		if j.Done && j.Latency() > OverloadPatience {
			late++
		}
		if j.Refused != 0 {
			refused++
		}
	}
	if late != 0 {
		t.Errorf("%d answers after the deadline", late)
	}
	// 1500 offered in 10 s; served: at most 100/s for 10 s plus the
	// backlog answered after the arrivals stop.
	if s := g.Stats(); s.RunTime != OverloadRun || refused < 1500-1000-OverloadQueue {
		t.Errorf("RunTime %v, refused %d; want %v and at least %d", s.RunTime, refused, OverloadRun, 1500-1000-OverloadQueue)
	}
}

// TestNoisy pins the noisy-neighbour figures: random shedding takes about
// half of everyone's requests, small tenants included; fair shedding serves
// every small tenant's request and takes the whole excess from the large
// one (100/s capacity − 60/s small = 40/s of its 140/s: 2,400 of 8,400, plus
// the 100 of the queue answered after the end).
func TestNoisy(t *testing.T) {
	res, err := RunNoisy()
	if err != nil {
		t.Fatal(err)
	}
	want := `policy,tenant_class,offered,served,served_ratio
random,small,3600,1850,0.514
random,large,8400,4250,0.506
fair,small,3600,3600,1.000
fair,large,8400,2500,0.298
`
	if got := csvOf(t, res); got != want {
		t.Errorf("noisy-neighbour table =\n%s\nwant\n%s", got, want)
	}
	for _, r := range res.Rows {
		switch {
		case r.Policy == "random" && r.Class == "small" && (r.Ratio < 0.4 || r.Ratio > 0.6):
			t.Errorf("random: small tenants kept %v, want about half", r.Ratio)
		case r.Policy == "fair" && r.Class == "small" && r.Ratio < 0.99:
			t.Errorf("fair: small tenants kept %v, want at least 0.99", r.Ratio)
		}
	}
}

func memOpen() (portero.Store, error) { return memstore.New(memstore.Config{SweepInterval: -1}) }

// TestLittle pins the Little's law figures: the concurrency limit admits
// C/S = 30/S per second with 30 always in flight; the rate limit admits
// 120 per second whatever S, and in flight L = λ·S = 120·S grows from 30 to
// 60.
func TestLittle(t *testing.T) {
	res, err := RunLittle(t.Context(), memOpen)
	if err != nil {
		t.Fatal(err)
	}
	want := `limiter,service_time_s,admitted_per_s,in_flight
concurrency,0.25,120.00,30.00
concurrency,0.3,100.00,30.00
concurrency,0.4,75.00,30.00
concurrency,0.5,60.00,30.00
rate,0.25,120.00,30.00
rate,0.3,120.00,36.00
rate,0.4,120.00,48.00
rate,0.5,120.00,60.00
`
	if got := csvOf(t, res); got != want {
		t.Errorf("little table =\n%s\nwant\n%s", got, want)
	}
	for _, r := range res.Rows {
		s := r.ServiceTime.Seconds()
		wantAdmitted, wantInFlight := LittleConcurrency/s, float64(LittleConcurrency)
		if r.Limiter == "rate" {
			wantAdmitted, wantInFlight = LittleRate, LittleRate*s
		}
		if d := r.Admitted - wantAdmitted; d < -0.01 || d > 0.01 {
			t.Errorf("%s at S=%v admitted %v, want %v", r.Limiter, r.ServiceTime, r.Admitted, wantAdmitted)
		}
		if d := r.InFlight - wantInFlight; d < -0.01 || d > 0.01 {
			t.Errorf("%s at S=%v in flight %v, want %v", r.Limiter, r.ServiceTime, r.InFlight, wantInFlight)
		}
	}
}

// TestCharts: every experiment draws its charts, the same bytes on every
// run (so the committed charts in docs/ can be checked against a fresh
// drawing).
func TestCharts(t *testing.T) {
	ov, err := RunOverload()
	if err != nil {
		t.Fatal(err)
	}
	no, err := RunNoisy()
	if err != nil {
		t.Fatal(err)
	}
	li, err := RunLittle(t.Context(), memOpen)
	if err != nil {
		t.Fatal(err)
	}
	draw := func(dir string) []string {
		var files []string
		for _, f := range []func() ([]string, error){
			func() ([]string, error) { return ov.Charts(filepath.Join(dir, "overload.svg")) },
			func() ([]string, error) { return no.Charts(filepath.Join(dir, "noisy.svg")) },
			func() ([]string, error) { return li.Charts(filepath.Join(dir, "little.svg")) },
		} {
			fs, err := f()
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, fs...)
		}
		return files
	}
	a, b := draw(t.TempDir()), draw(t.TempDir())
	if len(a) != 4 {
		t.Fatalf("wrote %v, want 4 files", a)
	}
	for i := range a {
		x, err := os.ReadFile(a[i])
		if err != nil {
			t.Fatal(err)
		}
		y, _ := os.ReadFile(b[i])
		if !bytes.HasPrefix(x, []byte("<?xml")) || !strings.Contains(string(x), "<svg") {
			t.Errorf("%s is not an SVG file", a[i])
		}
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs between two drawings", filepath.Base(a[i]))
		}
	}
}

// TestPercentile checks the nearest rank on a small case.
func TestPercentile(t *testing.T) {
	ds := make([]time.Duration, 100)
	for i := range ds {
		ds[i] = time.Duration(100-i) * time.Millisecond
	}
	if got := percentile(ds, 0.99); got != 99*time.Millisecond {
		t.Errorf("p99 of 1..100 ms = %v, want 99ms", got)
	}
	if got := percentile(ds[:1], 0.99); got != 100*time.Millisecond {
		t.Errorf("p99 of one = %v", got)
	}
	if percentile(nil, 0.5) != 0 {
		t.Error("p50 of none is not 0")
	}
}
