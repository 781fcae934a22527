package redisstore

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

// Limits of what the scripts compute exactly with Lua's doubles.
const (
	// maxSpan bounds windows and bucket capacities (B·T) in ns: 2^52 ns,
	// about 52 days.
	maxSpan = 1 << 52
	// maxLogWindow bounds the sliding log's window: 2^50 ns, about 13 days,
	// so that offsets from the log's base stay below 2^51 between rebases.
	maxLogWindow = 1 << 50
	// maxCount bounds counts and capacities.
	maxCount = 1 << 50
	// minWindow keeps the index of a clock-aligned window below 2^53.
	minWindow = time.Microsecond
)

// compiled is a validated rule with what the script needs.
type compiled struct {
	rule   portero.Rule
	alg    portero.Algorithm // the script function: the rule's, or calendarAlg
	fp     string            // fingerprint of every field: a changed rule starts afresh
	args   [3]string
	cal    *calendar // a calendar quota's per-call parameters; nil otherwise
	limit  int64     // Decision.Limit and the largest cost
	window bool      // counted per window (L per W) rather than as a bucket
}

// p2 is the script's second parameter for hit h of rule c, whose
// parameters are a: for the leaky queue, which needs no B·T, the bound of
// its wait (portero.Hit.MaxDelay in ns, 0 for none).
func (c *compiled) p2(a *[3]string, h portero.Hit) string {
	if c.alg != portero.LeakyQueue {
		return a[1]
	}
	return strconv.FormatInt(min(max(int64(h.MaxDelay), 0), maxSpan), 10)
}

func compile(r portero.Rule) (*compiled, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	c := &compiled{rule: r, alg: r.Algorithm}
	l := r.Limit
	switch r.Algorithm {
	case portero.SlidingLog:
		if _, err := algorithm.NewSlidingLog(l); err != nil {
			return nil, fmt.Errorf("rule %q: %w", r.Name, err)
		}
		if l.Window > maxLogWindow {
			return nil, fmt.Errorf("rule %q: %w: redis store: sliding-log window %v: at most %v", r.Name, portero.ErrInvalidLimit, l.Window, time.Duration(maxLogWindow))
		}
	default:
		if _, err := algorithm.New(r.Algorithm, l); err != nil {
			return nil, fmt.Errorf("rule %q: %w", r.Name, err)
		}
	}
	switch {
	case l.IsCalendar():
		// Validated as fixed-window only; its boundaries are per call.
		if l.Count > maxCount {
			return nil, fmt.Errorf("rule %q: %w: redis store: count %d: at most %d", r.Name, portero.ErrInvalidLimit, l.Count, int64(maxCount))
		}
		c.window, c.limit, c.alg, c.cal = true, l.Count, calendarAlg, &calendar{limit: l}
	case r.Algorithm == portero.FixedWindow, r.Algorithm == portero.FixedWindowAnchored, r.Algorithm == portero.SlidingCounter, r.Algorithm == portero.SlidingLog:
		c.window = true
		if l.Window < minWindow || l.Window > maxSpan {
			return nil, fmt.Errorf("rule %q: %w: redis store: window %v: want %v to %v", r.Name, portero.ErrInvalidLimit, l.Window, minWindow, time.Duration(maxSpan))
		}
		if l.Count > maxCount {
			return nil, fmt.Errorf("rule %q: %w: redis store: count %d: at most %d", r.Name, portero.ErrInvalidLimit, l.Count, int64(maxCount))
		}
		c.limit = l.Count
		c.args = [3]string{strconv.FormatInt(int64(l.Window), 10), strconv.FormatInt(l.Count, 10), "0"}
	default:
		t := int64(l.Interval())
		b := l.Capacity()
		if b > maxCount || b > maxSpan/t {
			return nil, fmt.Errorf("rule %q: %w: redis store: burst %d at one per %v: at most %v of refill", r.Name, portero.ErrInvalidLimit, b, time.Duration(t), time.Duration(maxSpan))
		}
		c.limit = b
		c.args = [3]string{strconv.FormatInt(t, 10), strconv.FormatInt(b*t, 10), strconv.FormatInt(b, 10)}
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00%d\x00%d\x00%v", r.Name, r.Algorithm, l.Count, int64(l.Window), l.Burst, l.Rate)
	if l.IsCalendar() { // only then, so that other rules keep their keys
		fmt.Fprintf(h, "\x00%s\x00%s\x00%d", l.Period, l.Zone, int64(l.Offset))
	}
	c.fp = strconv.FormatUint(h.Sum64(), 36)
	return c, nil
}
