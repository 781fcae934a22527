package retrysim

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/portero-rl/portero/client"
	"github.com/portero-rl/portero/internal/sim"
)

// Strategy is how the clients of the retry-storm experiment retry.
type Strategy string

// The strategies compared by [RunRetryStorm].
const (
	// Immediate resends a refused request at once, up to MaxAttempts−1
	// times, ignoring Retry-After: the naive client.
	Immediate Strategy = "immediate"
	// PerRequest backs off politely but each request on its own: it waits
	// what Retry-After says (full-jitter exponential backoff without it),
	// makes at most MaxAttempts attempts and gives up after MaxElapsed.
	// This is what most retry libraries do.
	PerRequest Strategy = "per-request"
	// Portero is package client's Transport: PerRequest plus the per-host
	// pacer shared by all requests — a Retry-After holds back every request
	// to the host, and RateLimit-Policy/RateLimit pace them to the announced
	// quota; waits for a Retry-After get the client's jitter after it; a
	// request that could not be sent within MaxElapsed fails at once,
	// unsent.
	Portero Strategy = "portero"
)

// Strategies lists the strategies in the order the results show them.
var Strategies = []Strategy{Immediate, PerRequest, Portero}

// StormConfig configures [RunRetryStorm]. Zero fields take the defaults in
// brackets.
type StormConfig struct {
	// Duration of the run [60 s].
	Duration time.Duration
	// Rate of new requests per second, evenly spaced [100].
	Rate float64
	// Healthy is the service's capacity in requests per second outside
	// the incident [200].
	Healthy float64
	// Incident is its capacity during the incident [10]; a negative value
	// means 0 (it refuses everything, and then the immediate client sends
	// exactly MaxAttempts·Rate).
	Incident float64
	// IncidentStart and IncidentEnd bound the incident [10 s, 40 s].
	IncidentStart, IncidentEnd time.Duration
	// MaxAttempts per request, the first included [4: three retries].
	MaxAttempts int
	// Base and Cap of the backoff used when there is no Retry-After
	// [0.5 s, 10 s].
	Base, Cap time.Duration
	// MaxElapsed is the polite clients' time budget per request [10 s].
	MaxElapsed time.Duration
	// RetryAfterJitter is what the Portero strategy adds after each
	// Retry-After, its own or the host's hold, as package client does: a
	// uniform draw from [0, RetryAfterJitter), never past the budget
	// [client.DefaultRetryAfterJitter, 1 s; negative: none].
	RetryAfterJitter time.Duration
	// Bucket is the width of the series' time buckets [1 s].
	Bucket time.Duration
	// Seed seeds the jitter.
	Seed uint64
}

func (c StormConfig) withDefaults() (StormConfig, error) {
	c.Duration = cmp.Or(c.Duration, 60*time.Second)
	c.IncidentStart = cmp.Or(c.IncidentStart, 10*time.Second)
	c.IncidentEnd = cmp.Or(c.IncidentEnd, 40*time.Second)
	c.Base = cmp.Or(c.Base, 500*time.Millisecond)
	c.Cap = cmp.Or(c.Cap, 10*time.Second)
	c.MaxElapsed = cmp.Or(c.MaxElapsed, 10*time.Second)
	c.Bucket = cmp.Or(c.Bucket, time.Second)
	c.RetryAfterJitter = max(0, cmp.Or(c.RetryAfterJitter, client.DefaultRetryAfterJitter))
	c.Rate = cmp.Or(c.Rate, 100)
	c.Healthy = cmp.Or(c.Healthy, 200)
	c.Incident = max(0, cmp.Or(c.Incident, 10)) // negative: it refuses everything
	c.MaxAttempts = cmp.Or(c.MaxAttempts, 4)
	switch {
	case c.Duration < 0, c.Bucket < 0, c.Base < 0, c.Cap < c.Base, c.MaxElapsed < 0, c.MaxAttempts < 0:
		return c, fmt.Errorf("retrysim: negative durations or attempts, or Cap below Base: %+v", c)
	case c.Rate < 0 || c.Rate > 1e5 || c.Healthy < 0 || math.IsNaN(c.Rate+c.Healthy+c.Incident):
		return c, fmt.Errorf("retrysim: Rate %v must be in (0, 1e5] and Healthy %v non-negative", c.Rate, c.Healthy)
	case c.IncidentStart < 0 || c.IncidentEnd < c.IncidentStart:
		return c, fmt.Errorf("retrysim: incident [%v, %v) is not an interval", c.IncidentStart, c.IncidentEnd)
	case c.Duration/c.Bucket > 1e5:
		return c, fmt.Errorf("retrysim: %v in buckets of %v is too many buckets", c.Duration, c.Bucket)
	}
	return c, nil
}

// StormSummary is one strategy's outcome.
type StormSummary struct {
	Strategy Strategy
	// Offered is the mean number of attempts per second that reached the
	// service during the incident; PeakOffered the most in one bucket,
	// per second, over the whole run.
	Offered, PeakOffered float64
	// Accepted is the mean number of attempts per second the service
	// accepted during the incident.
	Accepted float64
	// Amplification is Offered / Rate: attempts sent per new request.
	Amplification float64
	// Succeeded, Failed and Unsent count requests: succeeded at some
	// attempt; failed after their last attempt was refused; never sent
	// because the client saw they could not go within MaxElapsed.
	Succeeded, Failed, Unsent int
}

// StormResult is the outcome of [RunRetryStorm].
type StormResult struct {
	Config  StormConfig    // with defaults filled in
	Summary []StormSummary // one per strategy, in Strategies order
	// T holds the bucket start times in seconds; Offered[i][k] and
	// Accepted[i][k] are attempts per second in bucket k for Summary[i]'s
	// strategy; Capacity[k] is what the service could accept per second.
	T                 []float64
	Offered, Accepted [][]float64
	Capacity          []float64
}

// RunRetryStorm runs the retry-storm experiment for every strategy.
//
// The model: new requests arrive evenly at Rate per second. The service is a
// fixed-window limiter of 1 s windows whose limit is Healthy, or Incident
// while the incident lasts. It answers every request with
// RateLimit-Policy: "svc";q=<limit>;w=1 and RateLimit: "svc";r=<left>;t=<s>,
// and refuses with 429 and Retry-After: <seconds to the end of the window,
// rounded up>. Responses are instant. All requests come through one client
// (one process, as goroutines sharing one client.Transport would), so the
// Portero strategy's pacer sees every response; the other strategies ignore
// the rate-limit fields. The circuit breaker plays no part: 429 is not a
// breaker failure.
func RunRetryStorm(cfg StormConfig) (StormResult, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return StormResult{}, err
	}
	n := int((cfg.Duration + cfg.Bucket - 1) / cfg.Bucket)
	res := StormResult{Config: cfg, T: make([]float64, n), Capacity: make([]float64, n)}
	for k := range n {
		res.T[k] = (time.Duration(k) * cfg.Bucket).Seconds()
		res.Capacity[k] = cfg.capacity(time.Duration(k) * cfg.Bucket)
	}
	for _, s := range Strategies {
		sum, off, acc := runStorm(cfg, s, n)
		res.Summary = append(res.Summary, sum)
		res.Offered = append(res.Offered, off)
		res.Accepted = append(res.Accepted, acc)
	}
	return res, nil
}

func (c StormConfig) capacity(at time.Duration) float64 {
	if at >= c.IncidentStart && at < c.IncidentEnd {
		return c.Incident
	}
	return c.Healthy
}

// service is the fixed-window limiter the clients talk to.
type service struct {
	cfg    StormConfig
	window time.Duration // start of the current window
	used   int
}

// handle answers one attempt at t: whether it was accepted, the fields a
// client would read, and the Retry-After of a refusal.
func (s *service) handle(t time.Duration) (ok bool, pol []client.Policy, lim []client.Limit, retryAfter time.Duration) {
	if w := t.Truncate(time.Second); w != s.window {
		s.window, s.used = w, 0
	}
	q := int64(s.cfg.capacity(s.window))
	left := s.window + time.Second - t
	secs := (left + time.Second - 1) / time.Second
	ok = int64(s.used) < q
	if ok {
		s.used++
	}
	pol = []client.Policy{{Name: "svc", Quota: q, Unit: "requests", Window: time.Second}}
	lim = []client.Limit{{Name: "svc", Remaining: max(0, q-int64(s.used)), Window: secs * time.Second, HasWindow: true}}
	return ok, pol, lim, secs * time.Second
}

// storm is one strategy's run of the retry-storm experiment.
type storm struct {
	cfg      StormConfig
	strat    Strategy
	rng      *rand.Rand
	svc      service
	pacer    *client.Pacer
	q        sim.Events[attempt]
	arrivals []time.Duration // arrival time of request i
	sent     map[int]bool    // requests sent at least once
	sum      StormSummary
	// Attempts per bucket, and during the incident.
	offered, accepted     []float64
	inOffered, inAccepted int
}

func runStorm(cfg StormConfig, strat Strategy, buckets int) (StormSummary, []float64, []float64) {
	s := &storm{
		cfg: cfg, strat: strat, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed)),
		svc: service{cfg: cfg, window: -1}, pacer: client.NewPacer(), sent: map[int]bool{},
		sum: StormSummary{Strategy: strat}, offered: make([]float64, buckets), accepted: make([]float64, buckets),
	}
	interval := time.Duration(float64(time.Second) / cfg.Rate)
	for t := time.Duration(0); t < cfg.Duration; t += interval {
		s.q.Push(t, attempt{len(s.arrivals), 1})
		s.arrivals = append(s.arrivals, t)
	}
	// Each event is request e.req wanting to send attempt e.n.
	for s.q.Len() > 0 {
		now, e := s.q.Pop()
		if strat == Portero && s.heldBack(now, e) {
			continue
		}
		s.send(now, e)
	}
	scale := float64(time.Second) / float64(cfg.Bucket)
	for k := range s.offered {
		s.offered[k] *= scale
		s.accepted[k] *= scale
		s.sum.PeakOffered = math.Max(s.sum.PeakOffered, s.offered[k])
	}
	if d := (cfg.IncidentEnd - cfg.IncidentStart).Seconds(); d > 0 {
		s.sum.Offered = float64(s.inOffered) / d
		s.sum.Accepted = float64(s.inAccepted) / d
	}
	s.sum.Amplification = s.sum.Offered / cfg.Rate
	return s.sum, s.offered, s.accepted
}

func (s *storm) budget(i int) time.Duration { return s.arrivals[i] + s.cfg.MaxElapsed }

// jitter is what client.Transport adds after a server-given wait that
// starts at now and lasts wait: never past request i's budget.
func (s *storm) jitter(i int, now, wait time.Duration) time.Duration {
	return client.FullJitter(min(s.cfg.RetryAfterJitter, s.budget(i)-now-wait), s.rng.Float64())
}

// heldBack does what client.Transport does before an attempt: ask the
// pacer, and sleep (ask again later) or give up when the wait would not end
// within the budget. It reports whether the attempt was held back.
func (s *storm) heldBack(now time.Duration, e attempt) bool {
	at := sim.Epoch.Add(now)
	w := s.pacer.Take(at)
	switch {
	case w == 0:
		return false
	case now+w >= s.budget(e.req) && s.sent[e.req]:
		s.sum.Failed++
	case now+w >= s.budget(e.req):
		s.sum.Unsent++
	default:
		if s.pacer.HeldUntil().After(at) {
			w += s.jitter(e.req, now, w)
		}
		s.q.Push(now+w, e)
	}
	return true
}

// send sends attempt e at now, counts it and schedules its retry.
func (s *storm) send(now time.Duration, e attempt) {
	s.sent[e.req] = true
	ok, pol, lim, ra := s.svc.handle(now)
	if k := int(now / s.cfg.Bucket); k < len(s.offered) {
		s.offered[k]++
		if ok {
			s.accepted[k]++
		}
	}
	if now >= s.cfg.IncidentStart && now < s.cfg.IncidentEnd {
		s.inOffered++
		if ok {
			s.inAccepted++
		}
	}
	if s.strat == Portero {
		s.pacer.Observe(sim.Epoch.Add(now), pol, lim)
		if !ok {
			s.pacer.Block(sim.Epoch.Add(now), ra)
		}
	}
	switch {
	case ok:
		s.sum.Succeeded++
		return
	case e.n >= s.cfg.MaxAttempts:
		s.sum.Failed++
		return
	case s.strat == Immediate:
		s.q.Push(now, attempt{e.req, e.n + 1})
		return
	}
	// Polite: Retry-After (always sent here) or full-jitter backoff,
	// and (Portero) no wait that cannot end within the budget.
	wait := ra
	switch {
	case wait <= 0:
		wait = client.FullJitter(client.Backoff(e.n, s.cfg.Base, s.cfg.Cap), s.rng.Float64())
	case s.strat == Portero:
		wait += s.jitter(e.req, now, wait)
	}
	at := now + wait
	if s.strat == Portero {
		at += s.pacer.Delay(sim.Epoch.Add(at))
	}
	if at >= s.budget(e.req) {
		s.sum.Failed++
		return
	}
	s.q.Push(now+wait, attempt{e.req, e.n + 1})
}

// Series returns the chart's data: one named series per strategy's offered
// load plus the service's capacity, all in requests per second, against
// t (bucket start, seconds).
func (r StormResult) Series() (names []string, t []float64, values [][]float64) {
	for i, s := range r.Summary {
		names = append(names, string(s.Strategy)+" offered")
		values = append(values, r.Offered[i])
	}
	names = append(names, "capacity")
	values = append(values, r.Capacity)
	return names, r.T, values
}

// Lines returns the summary as human-readable lines.
func (r StormResult) Lines() []string {
	c := r.Config
	out := []string{fmt.Sprintf("retry storm: %v new requests/s; capacity %v/s, %v/s during the incident [%v, %v); %d attempts at most; polite budget %v",
		c.Rate, c.Healthy, c.Incident, c.IncidentStart, c.IncidentEnd, c.MaxAttempts, c.MaxElapsed)}
	for _, s := range r.Summary {
		out = append(out, fmt.Sprintf("%-12s incident: offered %6.1f/s (%.2f× demand), accepted %5.1f/s; peak %6.1f/s; requests ok %d, failed %d, unsent %d",
			s.Strategy, s.Offered, s.Amplification, s.Accepted, s.PeakOffered, s.Succeeded, s.Failed, s.Unsent))
	}
	return out
}

// Table returns the summary and one row per bucket: t_s, then
// <strategy>_offered and <strategy>_accepted per strategy, then capacity,
// all per second.
func (r StormResult) Table() sim.Table {
	t := sim.Table{Summary: r.Lines(), Header: []string{"t_s"}}
	for _, s := range r.Summary {
		t.Header = append(t.Header, string(s.Strategy)+"_offered", string(s.Strategy)+"_accepted")
	}
	t.Header = append(t.Header, "capacity")
	for k, ts := range r.T {
		row := []string{sim.Number(ts)}
		for i := range r.Summary {
			row = append(row, sim.Number(r.Offered[i][k]), sim.Number(r.Accepted[i][k]))
		}
		t.Rows = append(t.Rows, append(row, sim.Number(r.Capacity[k])))
	}
	return t
}

// Charts draws the offered load over time to path.
func (r StormResult) Charts(path string) ([]string, error) {
	return steps(path, "Retry storm: requests reaching the service", "requests per second", r)
}
