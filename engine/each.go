package engine

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/portero-rl/portero"
)

// Counting says how the engine counts the hits of one request.
type Counting string

const (
	// AllOrNothing is Portero's counting, the default: the hits of a
	// request are decided together and, when one enforced hit refuses,
	// none is counted; a hit is admitted only when its whole cost fits.
	AllOrNothing Counting = "all-or-nothing"
	// CountEach is envoyproxy/ratelimit's counting: each fixed-window hit
	// adds its cost to a plain counter of its key and window, then compares
	// (INCRBY, then count > limit), whatever the others say, so a refused
	// request still counts and a check-only hit exactly at its limit passes;
	// hits of other algorithms are each decided alone. The counters are a
	// portero.Counter's (store/redisstore), or fixed windows of the store
	// with a count no request reaches (at most 10^9 per second).
	CountEach Counting = "each"
)

// Valid reports whether c is one of the countings, or empty (the default).
func (c Counting) Valid() bool { return c == "" || c == AllOrNothing || c == CountEach }

// OverLimitCache is envoyproxy/ratelimit's local cache under CountEach
// (its LOCAL_CACHE_SIZE_IN_BYTES; internal/rlscache): the counters known to
// be over their limit. A hit whose counter it holds is refused without
// asking the store and is not counted (no INCRBY, no EXPIRE: other
// instances' counts are not seen until it expires), and under
// StopIncrementWhenOver nothing else of that request is counted either. A
// counter that goes over its limit is remembered for its window's length.
// Its keys are a counter's key followed by its window's start in Unix
// seconds, so that an entry is never looked up after its window. It must
// be safe for concurrent use.
type OverLimitCache interface {
	// Over reports whether key is over its limit.
	Over(key string) bool
	// SetOver remembers key as over its limit for ttl.
	SetOver(key string, ttl time.Duration)
}

// decideEach is decide under CountEach.
func (e *Engine) decideEach(ctx context.Context, st portero.Store, now time.Time, v *Verdict) error {
	var ibuf [4]int
	counts, of := v.counts[:0], ibuf[:0] // the counted hits and their indexes in v.Results
	defer func() { v.counts = counts }()
	cached := false // a hit's counter is in the over-limit cache
	for i := range v.Results {
		res := &v.Results[i]
		r := res.Rule
		res.Counter, res.LocalCache = 0, false
		if r.Algorithm != portero.FixedWindow || r.Limit.IsCalendar() {
			if err := e.decideAlone(ctx, st, now, v, res); err != nil {
				return err
			}
			continue
		}
		if e.overCache != nil && e.overCache.Over(overKey(res.Key, now, r.Limit.Window)) {
			cached, res.LocalCache = true, true
			e.overLimit(res, now, r.Limit.Window, uint64(max(r.Limit.Count, 0)))
			continue
		}
		add := uint64(max(res.Cost, 0))
		if res.CheckOnly {
			add = 0
		}
		ttl := r.Limit.Window
		if e.jitter > 0 {
			ttl += rand.N(e.jitter)
		}
		counts = append(counts, portero.Count{Key: res.Key, Window: r.Limit.Window, Add: add, TTL: ttl})
		of = append(of, i)
	}
	if len(counts) > 0 {
		counter, share := counterOf(st)
		if e.stopWhenOver {
			if err := e.stopIncrement(ctx, counter, share, now, counts, of, v, cached); err != nil {
				return err
			}
		}
		if err := counter.Count(ctx, now, counts); err != nil {
			return err
		}
		// Only the store's own counters fill the cache: a failure
		// policy's are made up.
		remember := e.overCache != nil && st == e.store
		for j, i := range of {
			res := &v.Results[i]
			l := threshold(res.Rule, share)
			n := counts[j].Value
			res.Counter = n
			w := res.Rule.Limit.Window
			if n > l {
				e.overLimit(res, now, w, l)
				if remember {
					e.overCache.SetOver(overKey(res.Key, now, w), w)
				}
				continue
			}
			d := portero.Decision{Allowed: true, Limit: int64(l), Remaining: int64(l - n), ResetAfter: WindowRemainder(now, w)}
			switch {
			case res.CheckOnly:
				res.Outcome = CheckOnly
			case float64(n) >= e.near*float64(l):
				res.Outcome = NearLimit
			default:
				res.Outcome = Allowed
			}
			res.Decision = d
		}
	}
	e.verdict(v)
	return nil
}

// overLimit decides res, a counter over its limit l.
func (e *Engine) overLimit(res *Result, now time.Time, w time.Duration, l uint64) {
	d := portero.Decision{Limit: int64(l), ResetAfter: WindowRemainder(now, w)}
	d.RetryAfter = d.ResetAfter
	res.Outcome = Refused
	if res.Rule.Shadow {
		res.Outcome = ShadowRefused
	}
	res.Decision = d
}

// stopIncrement is envoyproxy/ratelimit's
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: when a hit's counter is in the
// over-limit cache, nothing is counted; otherwise every counter is read
// first, and when a hit would go over its limit only the hits that would
// go over are counted. It sets each count's Add.
func (e *Engine) stopIncrement(ctx context.Context, counter portero.Counter, share float64, now time.Time, counts []portero.Count, of []int, v *Verdict, cached bool) error {
	adds := make([]uint64, len(counts))
	for j := range counts {
		adds[j], counts[j].Add = counts[j].Add, 0
	}
	if cached {
		return nil
	}
	if err := counter.Count(ctx, now, counts); err != nil {
		return err
	}
	over := make([]bool, len(counts))
	any := false
	for j, i := range of {
		over[j] = counts[j].Value+adds[j] > threshold(v.Results[i].Rule, share)
		any = any || over[j]
	}
	for j := range counts {
		if !any || over[j] {
			counts[j].Add = adds[j]
		}
	}
	return nil
}

// overKey is the over-limit cache's key of a counter: its key and its
// window's start in Unix seconds at now, as the Redis store names it.
func overKey(key string, now time.Time, w time.Duration) string {
	ws := int64(w / time.Second)
	if ws <= 0 {
		return key + "0"
	}
	t := now.Unix()
	start := t - t%ws
	if t%ws < 0 {
		start -= ws
	}
	return key + strconv.FormatInt(start, 10)
}

// decideAlone decides a hit of a Portero algorithm under CountEach: on its
// own, admitted only when its cost fits.
func (e *Engine) decideAlone(ctx context.Context, st portero.Store, now time.Time, v *Verdict, res *Result) error {
	r := res.Rule
	if r.maxCost == 0 || res.Cost > r.maxCost {
		res.Outcome = CanNeverPass
		return nil
	}
	if res.CheckOnly {
		d, err := look(ctx, st, now, res, max(res.Cost, 1))
		if err != nil {
			return err
		}
		switch {
		case d.Allowed:
			res.Outcome = CheckOnly
		case r.Shadow:
			res.Outcome = ShadowRefused
		default:
			res.Outcome = Refused
		}
		res.Decision = d
		return nil
	}
	v.hits = append(v.hits[:0], portero.Hit{Rule: r.Rule, Key: res.Key, Cost: res.Cost, MaxDelay: res.MaxDelay})
	decs, err := st.AllowAll(ctx, now, v.hits)
	if err != nil {
		return err
	}
	if len(decs) != 1 {
		return fmt.Errorf("%w: the store returned %d decisions for 1 hit", portero.ErrStoreUnavailable, len(decs))
	}
	d := decs[0]
	switch {
	case !d.Allowed && r.Shadow:
		res.Outcome = ShadowRefused
	case !d.Allowed:
		res.Outcome = Refused
	case float64(d.Limit-d.Remaining) >= e.near*float64(d.Limit):
		res.Outcome = NearLimit
	default:
		res.Outcome = Allowed
	}
	res.Decision = d
	return nil
}

// threshold is the count above which a counted hit under r is over: the
// rule's count, scaled down to this instance's share under FailLocal.
func threshold(r *Rule, share float64) uint64 {
	if share < 1 && r.Limit.Count > 0 {
		return uint64(max(1, int64(math.Floor(float64(r.Limit.Count)*share))))
	}
	return uint64(max(r.Limit.Count, 0))
}

// counterOf returns st's counters (its own, the failure policies', or fixed
// windows of it) and the share of each limit they admit.
func counterOf(st portero.Store) (portero.Counter, float64) {
	switch s := st.(type) {
	case portero.Counter:
		return s, 1
	case *localStore:
		return storeCounter{s.mem}, s.share
	}
	return storeCounter{st}, 1
}

// storeCounter keeps plain counters in any portero.Store, as fixed windows
// under a rule per window length whose count no request reaches: every
// addition is admitted, and Remaining tells the count.
type storeCounter struct{ st portero.Store }

// counterCap is a counter rule's count: as high as the stores allow.
func counterCap(w time.Duration) int64 { return min(int64(w), 1<<50) }

func counterRule(w time.Duration) portero.Rule {
	return portero.Rule{Name: "portero.counter." + w.String(), Algorithm: portero.FixedWindow, Limit: portero.Limit{Count: counterCap(w), Window: w}}
}

func (c storeCounter) Count(ctx context.Context, now time.Time, counts []portero.Count) error {
	var hbuf [4]portero.Hit
	var ibuf [4]int
	hits, of := hbuf[:0], ibuf[:0]
	for i := range counts {
		cn := &counts[i]
		if cn.Add > 0 {
			hits = append(hits, portero.Hit{Rule: counterRule(cn.Window), Key: cn.Key, Cost: int64(min(cn.Add, uint64(counterCap(cn.Window))))})
			of = append(of, i)
			continue
		}
		if added(counts[:i], cn) {
			continue // read below, after the additions before it
		}
		// A read before any addition on its key does not see what this
		// call adds later (as INCRBY 0 in a pipeline).
		d, err := c.st.Peek(ctx, counterRule(cn.Window), cn.Key, now, 1)
		if err != nil {
			return err
		}
		cn.Value = uint64(counterCap(cn.Window) - max(d.Remaining, 0))
	}
	if len(hits) == 0 {
		return nil
	}
	decs, err := c.st.AllowAll(ctx, now, hits)
	if err != nil {
		return err
	}
	if len(decs) != len(hits) {
		return fmt.Errorf("%w: the store returned %d decisions for %d hits", portero.ErrStoreUnavailable, len(decs), len(hits))
	}
	if !allAllowed(decs) {
		// A counter at its cap: count each alone, filling those that
		// overflow so that they stay over any limit.
		if decs, err = c.oneByOne(ctx, now, hits); err != nil {
			return err
		}
	}
	for j, i := range of {
		counts[i].Value = uint64(counterCap(counts[i].Window) - decs[j].Remaining)
	}
	// Reads after an addition on their key see the last one.
	for i := range counts {
		cn := &counts[i]
		if cn.Add > 0 {
			continue
		}
		for k := i - 1; k >= 0; k-- {
			if p := &counts[k]; p.Add > 0 && p.Key == cn.Key && p.Window == cn.Window {
				cn.Value = p.Value
				break
			}
		}
	}
	return nil
}

// added reports whether one of counts adds to c's counter.
func added(counts []portero.Count, c *portero.Count) bool {
	for i := range counts {
		if counts[i].Add > 0 && counts[i].Key == c.Key && counts[i].Window == c.Window {
			return true
		}
	}
	return false
}

func allAllowed(decs []portero.Decision) bool {
	for _, d := range decs {
		if !d.Allowed {
			return false
		}
	}
	return true
}

// oneByOne counts hits one call each; a hit that does not fit takes what
// is left, so that its counter stands at its cap.
func (c storeCounter) oneByOne(ctx context.Context, now time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	out := make([]portero.Decision, len(hits))
	for i, h := range hits {
		decs, err := c.st.AllowAll(ctx, now, []portero.Hit{h})
		if err != nil {
			return nil, err
		}
		d := decs[0]
		if !d.Allowed && d.Remaining > 0 {
			h.Cost = d.Remaining
			if decs, err = c.st.AllowAll(ctx, now, []portero.Hit{h}); err != nil {
				return nil, err
			}
			d = decs[0]
		}
		d.Remaining = max(d.Remaining, 0)
		out[i] = d
	}
	return out, nil
}

// Count implements portero.Counter for the failure policies: FailAllow's
// counters are empty, FailDeny's full.
func (p policyStore) Count(_ context.Context, _ time.Time, counts []portero.Count) error {
	for i := range counts {
		counts[i].Value = 0
		if !p.allow {
			counts[i].Value = math.MaxUint64
		}
	}
	return nil
}

// WindowRemainder returns the time from now to the end of its
// epoch-aligned window of length w (0 for none): the reset of
// envoyproxy/ratelimit's counters.
func WindowRemainder(now time.Time, w time.Duration) time.Duration {
	if w <= 0 {
		return 0
	}
	ns := now.UnixNano() % int64(w)
	if ns < 0 {
		ns += int64(w)
	}
	return w - time.Duration(ns)
}
