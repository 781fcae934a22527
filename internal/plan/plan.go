// Package plan is `portero plan`'s arithmetic: a limit computed backwards
// from the narrowest resource behind Portero, as on pencil and paper.
//
//  1. The bottleneck sustains C units per second (a partition's 1,000
//     writes/s).
//  2. Keep a margin m for peaks and retries: C·(1 − m) units/s (700).
//  3. Each request costs u units: the rate is C·(1 − m)/u requests/s (350),
//     rounded down to whole requests.
//  4. The burst, what arrives at once, defaults to the rate ("an honest
//     starting point"); a burst whose units exceed what the bottleneck does
//     in a second, B·u > C, overloads it by itself, and is warned about.
//  5. Little's law: requests in flight = rate × mean latency (350/s ×
//     200 ms = 70), rounded up: the concurrency the service behind must hold.
//
// Quota answers the other question: a client that keeps within its rate r
// spends a quota of Q per period after Q/r seconds (500,000 per day at 10/s:
// 50,000 s, 13.9 h), so a quota is a limit of its own.
//
// Every figure is an exact rational (math/big), so that 30% of 1,000 is
// 300 and not 299.99999999999994, and rounding happens once, in the safe
// direction.
package plan

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/portero-rl/portero"
)

// Input is what the sizing starts from.
type Input struct {
	// Capacity is what the narrowest resource sustains in units per
	// second (writes, queries, tokens), UnitsPerRequest what one request
	// costs of them: both positive. Margin is the share of Capacity kept
	// for peaks and retries, in [0, 1).
	Capacity, UnitsPerRequest, Margin *big.Rat
	// Latency is the mean time a request spends in the service.
	Latency time.Duration
	// Burst is the chosen burst (bucket capacity) in requests; 0 means the
	// rate.
	Burst int64
}

// Plan is the result.
type Plan struct {
	// Target is Capacity·(1 − Margin), the units per second Portero may
	// let through.
	Target *big.Rat
	// Rate is Target/UnitsPerRequest requests per second, rounded down;
	// Burst what may arrive at once (Input.Burst, or Rate); MaxBurst the
	// most requests whose units the bottleneck does in one second.
	Rate, Burst, MaxBurst int64
	// Concurrency is Rate × Latency (Little's law), rounded up: the
	// requests in flight at the planned rate.
	Concurrency int64
	// Warnings say what in the plan will hurt, one sentence each.
	Warnings []string
}

// Size computes the plan, or says which input is unusable.
func Size(in Input) (Plan, error) {
	one := big.NewRat(1, 1)
	switch {
	case in.Capacity == nil || in.Capacity.Sign() <= 0:
		return Plan{}, errors.New("capacity: must be positive (units per second the narrowest resource sustains)")
	case in.Margin == nil || in.Margin.Sign() < 0 || in.Margin.Cmp(one) >= 0:
		return Plan{}, errors.New("margin: want at least 0% and less than 100%")
	case in.UnitsPerRequest == nil || in.UnitsPerRequest.Sign() <= 0:
		return Plan{}, errors.New("units per request: must be positive")
	case in.Latency <= 0:
		return Plan{}, errors.New("latency: must be positive (the mean time a request takes)")
	case in.Burst < 0:
		return Plan{}, errors.New("burst: must not be negative")
	}
	var p Plan
	p.Target = new(big.Rat).Mul(in.Capacity, new(big.Rat).Sub(one, in.Margin))
	rate := new(big.Rat).Quo(p.Target, in.UnitsPerRequest)
	r, ok := floor(rate)
	if !ok {
		return Plan{}, fmt.Errorf("rate %s requests/s: too large", Decimal(rate, 3))
	}
	if r < 1 {
		return Plan{}, fmt.Errorf("rate: %s units/s ÷ %s units per request = %s requests/s, less than one a second: measure the capacity over a longer span or in smaller units",
			Decimal(p.Target, 3), Decimal(in.UnitsPerRequest, 3), Decimal(rate, 3))
	}
	p.Rate = r
	p.Burst = in.Burst
	if p.Burst == 0 {
		p.Burst = p.Rate
	}
	p.MaxBurst, _ = floor(new(big.Rat).Quo(in.Capacity, in.UnitsPerRequest))
	inFlight := new(big.Rat).Mul(big.NewRat(p.Rate, 1), big.NewRat(int64(in.Latency), int64(time.Second)))
	c, ok := ceil(inFlight)
	if !ok {
		return Plan{}, fmt.Errorf("concurrency %s: too large", Decimal(inFlight, 3))
	}
	p.Concurrency = c
	if units := new(big.Rat).Mul(big.NewRat(p.Burst, 1), in.UnitsPerRequest); units.Cmp(in.Capacity) > 0 {
		p.Warnings = append(p.Warnings, fmt.Sprintf(
			"burst %d × %s units per request = %s units at once, more than the %s units the bottleneck does in a second: the burst alone overloads it; keep it at most %d",
			p.Burst, Decimal(in.UnitsPerRequest, 3), Decimal(units, 3), Decimal(in.Capacity, 3), p.MaxBurst))
	}
	if in.Margin.Sign() == 0 {
		p.Warnings = append(p.Warnings, "margin 0%: peaks and retries go straight to the bottleneck")
	}
	return p, nil
}

// QuotaRun is how long a quota lasts at a steady rate.
type QuotaRun struct {
	// Quota is the quota per period and Period its length (a calendar
	// period's nominal length: 24 h, 7 or 30 days).
	Quota  int64
	Period time.Duration
	// Rate is the steady requests (units) per second; Seconds is
	// Quota/Rate, when the quota is spent from the start of the period;
	// Sustainable is Quota/Period, the rate at which it lasts the period.
	Rate, Seconds, Sustainable *big.Rat
	// Lasts reports whether the quota lasts the whole period.
	Lasts bool
}

// Quota computes when quota is spent by a client at rate (both as
// portero.Limit: a calendar quota or one over a window, and a rate given
// as COUNT/WINDOW or with "rate R").
func Quota(quota, rate portero.Limit) (QuotaRun, error) {
	if err := quota.Validate(); err != nil {
		return QuotaRun{}, fmt.Errorf("quota: %w", err)
	}
	if err := rate.Validate(); err != nil {
		return QuotaRun{}, fmt.Errorf("rate: %w", err)
	}
	if rate.IsCalendar() {
		return QuotaRun{}, fmt.Errorf("rate %s: a calendar quota, not a rate: give one such as 10/s", rate)
	}
	q := QuotaRun{Quota: quota.Count, Period: quota.Window}
	if quota.IsCalendar() {
		q.Period = quota.Period.Nominal()
	}
	if rate.Rate > 0 {
		q.Rate, _ = new(big.Rat).SetString(strconv.FormatFloat(rate.Rate, 'g', -1, 64))
	} else {
		q.Rate = big.NewRat(rate.Count*int64(time.Second), int64(rate.Window))
	}
	period := big.NewRat(int64(q.Period), int64(time.Second))
	q.Seconds = new(big.Rat).Quo(big.NewRat(q.Quota, 1), q.Rate)
	q.Lasts = q.Seconds.Cmp(period) >= 0
	q.Sustainable = new(big.Rat).Quo(big.NewRat(q.Quota, 1), period)
	return q, nil
}

// ParseQuantity reads a positive or zero decimal such as "1000", "2.5" or
// "1e3" exactly; "_" and "," may group digits ("1,000").
func ParseQuantity(s string) (*big.Rat, error) {
	t := strings.NewReplacer("_", "", ",", "").Replace(strings.TrimSpace(s))
	r, ok := new(big.Rat).SetString(t)
	if !ok || strings.ContainsAny(t, "/") || r.Sign() < 0 {
		return nil, fmt.Errorf("%q: want a number such as 1000 or 2.5", s)
	}
	return r, nil
}

// ParseMargin reads a margin as a percentage ("30%") or a fraction
// ("0.3"), exactly.
func ParseMargin(s string) (*big.Rat, error) {
	t := strings.TrimSpace(s)
	pct := strings.HasSuffix(t, "%")
	r, err := ParseQuantity(strings.TrimSuffix(t, "%"))
	if err != nil {
		return nil, fmt.Errorf("%q: want a percentage such as 30%% or a fraction such as 0.3", s)
	}
	if pct {
		r.Quo(r, big.NewRat(100, 1))
	}
	return r, nil
}

// Decimal formats r with at most prec decimals, without trailing zeros:
// 700, 0.3, 13.9 (prec 1 of 13.888…), rounding half away from zero.
func Decimal(r *big.Rat, prec int) string {
	s := r.FloatString(prec)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	if s == "-0" {
		s = "0"
	}
	return s
}

// Float returns r as the nearest float64, for JSON.
func Float(r *big.Rat) float64 {
	f, _ := r.Float64()
	return f
}

func floor(r *big.Rat) (int64, bool) {
	q := new(big.Int).Quo(r.Num(), r.Denom()) // truncates: r ≥ 0 here
	if !q.IsInt64() || q.Int64() > math.MaxInt64/2 {
		return 0, false
	}
	return q.Int64(), true
}

func ceil(r *big.Rat) (int64, bool) {
	n, ok := floor(r)
	if ok && !r.IsInt() {
		n++
	}
	return n, ok
}
