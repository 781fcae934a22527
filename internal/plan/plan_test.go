package plan_test

import (
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/plan"
)

func rat(s string) *big.Rat {
	r, err := plan.ParseQuantity(s)
	if err != nil {
		panic(err)
	}
	return r
}

func margin(s string) *big.Rat {
	r, err := plan.ParseMargin(s)
	if err != nil {
		panic(err)
	}
	return r
}

// The worked example and its neighbours, by hand:
// 1000 writes/s × (1 − 30%) = 700; ÷ 2 = 350 requests/s; burst = rate;
// 350 × 0.2 s = 70 in flight; the bottleneck absorbs 1000 ÷ 2 = 500 at once.
func TestSize(t *testing.T) {
	tests := []struct {
		name                               string
		in                                 plan.Input
		target                             string
		rate, burst, maxBurst, concurrency int64
		warnings                           []string
	}{
		{"the worked example", plan.Input{Capacity: rat("1000"), Margin: margin("30%"), UnitsPerRequest: rat("2"), Latency: 200 * time.Millisecond},
			"700", 350, 350, 500, 70, nil},
		{"a margin as a fraction", plan.Input{Capacity: rat("1000"), Margin: margin("0.3"), UnitsPerRequest: rat("2"), Latency: 200 * time.Millisecond},
			"700", 350, 350, 500, 70, nil},
		{"the double by inertia", plan.Input{Capacity: rat("1000"), Margin: margin("30%"), UnitsPerRequest: rat("2"), Latency: 200 * time.Millisecond, Burst: 700},
			"700", 350, 700, 500, 70, []string{"burst 700 × 2 units per request = 1400 units at once, more than the 1000 units the bottleneck does in a second: the burst alone overloads it; keep it at most 500"}},
		{"a burst the bottleneck absorbs", plan.Input{Capacity: rat("1000"), Margin: margin("30%"), UnitsPerRequest: rat("2"), Latency: 200 * time.Millisecond, Burst: 500},
			"700", 350, 500, 500, 70, nil},
		// 120 req/s × 0.5 s = 60 in flight: the other Little's law example.
		{"Little's law, 0.5 s", plan.Input{Capacity: rat("120"), Margin: margin("0%"), UnitsPerRequest: rat("1"), Latency: 500 * time.Millisecond},
			"120", 120, 120, 120, 60, []string{"margin 0%: peaks and retries go straight to the bottleneck"}},
		// 1000 × 0.75 / 3 = 250; 250 × 0.123 = 30.75 → 31 (round up: slots).
		{"fractions round safely", plan.Input{Capacity: rat("1,000"), Margin: margin("25%"), UnitsPerRequest: rat("3"), Latency: 123 * time.Millisecond},
			"750", 250, 250, 333, 31, nil},
		// 333.33… requests/s → 333 (round down: never above the target).
		{"rate rounds down", plan.Input{Capacity: rat("1000"), Margin: margin("0%"), UnitsPerRequest: rat("3"), Latency: time.Second},
			"1000", 333, 333, 333, 333, []string{"margin 0%: peaks and retries go straight to the bottleneck"}},
		{"half units", plan.Input{Capacity: rat("10"), Margin: margin("10%"), UnitsPerRequest: rat("0.5"), Latency: 2 * time.Second},
			"9", 18, 18, 20, 36, nil},
	}
	for _, tt := range tests {
		p, err := plan.Size(tt.in)
		if err != nil {
			t.Errorf("%s: Size = %v", tt.name, err)
			continue
		}
		if got := plan.Decimal(p.Target, 6); got != tt.target || p.Rate != tt.rate || p.Burst != tt.burst || p.MaxBurst != tt.maxBurst || p.Concurrency != tt.concurrency {
			t.Errorf("%s: Size = target %s rate %d burst %d max %d concurrency %d, want %s %d %d %d %d",
				tt.name, got, p.Rate, p.Burst, p.MaxBurst, p.Concurrency, tt.target, tt.rate, tt.burst, tt.maxBurst, tt.concurrency)
		}
		if strings.Join(p.Warnings, "\n") != strings.Join(tt.warnings, "\n") {
			t.Errorf("%s: warnings %q, want %q", tt.name, p.Warnings, tt.warnings)
		}
	}
}

func TestSizeErrors(t *testing.T) {
	good := plan.Input{Capacity: rat("1000"), Margin: margin("30%"), UnitsPerRequest: rat("2"), Latency: 200 * time.Millisecond}
	for _, tt := range []struct {
		mod     func(*plan.Input)
		mention string
	}{
		{func(in *plan.Input) { in.Capacity = rat("0") }, "capacity"},
		{func(in *plan.Input) { in.Capacity = nil }, "capacity"},
		{func(in *plan.Input) { in.Margin = margin("100%") }, "margin"},
		{func(in *plan.Input) { in.Margin = big.NewRat(-1, 10) }, "margin"},
		{func(in *plan.Input) { in.UnitsPerRequest = rat("0") }, "units per request"},
		{func(in *plan.Input) { in.Latency = 0 }, "latency"},
		{func(in *plan.Input) { in.Burst = -1 }, "burst"},
		{func(in *plan.Input) { in.Capacity = rat("5"); in.UnitsPerRequest = rat("10") }, "less than one a second"},
		{func(in *plan.Input) { in.Capacity = rat("1e30") }, "too large"},
	} {
		in := good
		tt.mod(&in)
		if _, err := plan.Size(in); err == nil || !strings.Contains(err.Error(), tt.mention) {
			t.Errorf("Size(%+v) = %v, want an error mentioning %q", in, err, tt.mention)
		}
	}
}

// A daily quota: 500,000 per day at a steady 10/s runs out after 50,000 s
// (13.9 h); the quota lasts the day at 500,000 / 86,400 = 5.787/s.
func TestQuota(t *testing.T) {
	for _, tt := range []struct {
		quota            portero.Limit
		rate             string
		seconds, sustain string
		period           time.Duration
		lasts            bool
	}{
		{portero.PerDay(500000), "10/s", "50000", "5.787037", 24 * time.Hour, false},
		{portero.PerDay(500000).WithZone("Europe/Madrid"), "10/s", "50000", "5.787037", 24 * time.Hour, false},
		{portero.PerMonth(100000), "100/min", "60000", "0.03858", 30 * 24 * time.Hour, false},
		{portero.PerWeek(10), "1/h", "36000", "0.000017", 7 * 24 * time.Hour, false},
		{portero.PerHour(1000), "1/2s rate 0.25", "4000", "0.277778", time.Hour, true},
	} {
		q, err := plan.Quota(tt.quota, portero.MustParseLimit(tt.rate))
		if err != nil {
			t.Errorf("Quota(%v, %s) = %v", tt.quota, tt.rate, err)
			continue
		}
		if got, sus := plan.Decimal(q.Seconds, 6), plan.Decimal(q.Sustainable, 6); got != tt.seconds || sus != tt.sustain || q.Period != tt.period || q.Lasts != tt.lasts {
			t.Errorf("Quota(%v, %s) = %s s, sustainable %s/s, period %v, lasts %v; want %s, %s, %v, %v", tt.quota, tt.rate, got, sus, q.Period, q.Lasts, tt.seconds, tt.sustain, tt.period, tt.lasts)
		}
	}
	if _, err := plan.Quota(portero.PerDay(10), portero.PerDay(1)); err == nil || !strings.Contains(err.Error(), "not a rate") {
		t.Errorf("a calendar rate: %v, want an error", err)
	}
}

func TestParse(t *testing.T) {
	for in, want := range map[string]string{"1000": "1000", "1,000": "1000", "1_000": "1000", "2.5": "2.5", "1e3": "1000", " 7 ": "7"} {
		if r, err := plan.ParseQuantity(in); err != nil || plan.Decimal(r, 6) != want {
			t.Errorf("ParseQuantity(%q) = %v, %v; want %s", in, r, err, want)
		}
	}
	for _, in := range []string{"", "x", "-1", "1/2", "NaN", "inf"} {
		if r, err := plan.ParseQuantity(in); err == nil {
			t.Errorf("ParseQuantity(%q) = %v, want an error", in, r)
		}
	}
	for in, want := range map[string]string{"30%": "0.3", "0.3": "0.3", "0%": "0", "12.5%": "0.125"} {
		if r, err := plan.ParseMargin(in); err != nil || plan.Decimal(r, 6) != want {
			t.Errorf("ParseMargin(%q) = %v, %v; want %s", in, r, err, want)
		}
	}
	if _, err := plan.ParseMargin("thirty"); err == nil {
		t.Error("ParseMargin(thirty) = nil error")
	}
}

func FuzzParseMargin(f *testing.F) {
	for _, s := range []string{"30%", "0.3", "1e-2", "%", "1,0%", "-5%"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := plan.ParseMargin(s)
		if err == nil && r.Sign() < 0 {
			t.Fatalf("ParseMargin(%q) = %v, negative", s, r)
		}
	})
}

func Example() {
	// A partition writes 1,000 items/s; keep 30% in reserve; each
	// request writes 2 items and takes 200 ms.
	p, err := plan.Size(plan.Input{
		Capacity:        big.NewRat(1000, 1),
		Margin:          big.NewRat(30, 100),
		UnitsPerRequest: big.NewRat(2, 1),
		Latency:         200 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("rate", p.Rate, "burst", p.Burst, "concurrency", p.Concurrency)
	q, err := plan.Quota(portero.PerDay(500000), portero.PerSecond(10))
	if err != nil {
		panic(err)
	}
	fmt.Println("500000/day at 10/s runs out after", plan.Decimal(q.Seconds, 0), "s,", plan.Decimal(new(big.Rat).Quo(q.Seconds, big.NewRat(3600, 1)), 1), "h")
	// Output:
	// rate 350 burst 350 concurrency 70
	// 500000/day at 10/s runs out after 50000 s, 13.9 h
}
