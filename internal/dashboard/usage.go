package dashboard

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// UsageEntry is one key's use of its rule's limit, as its latest decision
// told it.
type UsageEntry struct {
	Rule  string `json:"rule"`
	Key   string `json:"key"`
	Used  int64  `json:"used"`
	Limit int64  `json:"limit"`
	// At is when it was seen; Reset when the key's limit is whole again
	// (for a quota, the end of its period).
	At    time.Time `json:"at"`
	Reset time.Time `json:"reset"`
}

// DefaultUsageKeys is the number of keys a Usage tracker keeps per rule.
const DefaultUsageKeys = 5

// Usage keeps, per rule, the few keys closest to their limit, for the
// dashboard's "closest to their limits" and "quotas spent". Observe is
// called on every decision and is cheap: one atomic load for a key below
// the rule's current few, a lock (never waited for) otherwise. Memory is
// bounded by the rules and keys per rule. It is safe for concurrent use.
type Usage struct {
	keys  int
	rules atomic.Pointer[[]*RuleUsage]
}

// NewUsage returns a tracker keeping keys per rule (0 means
// DefaultUsageKeys).
func NewUsage(keys int) *Usage {
	if keys <= 0 {
		keys = DefaultUsageKeys
	}
	u := &Usage{keys: keys}
	u.rules.Store(&[]*RuleUsage{})
	return u
}

// SetRules prepares the trackers of a configuration's rules, by index;
// a rule whose name was tracked before keeps its keys.
func (u *Usage) SetRules(names []string) {
	old := map[string]*RuleUsage{}
	for _, r := range *u.rules.Load() {
		old[r.name] = r
	}
	rs := make([]*RuleUsage, len(names))
	for i, n := range names {
		if r := old[n]; r != nil {
			rs[i] = r
			continue
		}
		rs[i] = &RuleUsage{name: n, keys: make([]UsageEntry, 0, u.keys), max: u.keys}
	}
	u.rules.Store(&rs)
}

// Rule returns the tracker of the rule at index i (of the names given to
// SetRules), or nil.
func (u *Usage) Rule(i int) *RuleUsage {
	rs := *u.rules.Load()
	if i < 0 || i >= len(rs) {
		return nil
	}
	return rs[i]
}

// Top returns the tracked keys whose limit is not whole again yet at now,
// the closest to their limit first.
func (u *Usage) Top(now time.Time) []UsageEntry {
	var out []UsageEntry
	for _, r := range *u.rules.Load() {
		out = r.appendLive(out, now)
	}
	sortUsage(out)
	return out
}

// RuleUsage tracks one rule's keys.
type RuleUsage struct {
	name string
	mu   sync.Mutex
	keys []UsageEntry
	max  int
	// floor is the share of its limit (in millionths) that the least of
	// the kept keys used, when they are max: a key below it is not kept.
	floor atomic.Int64
}

// Wants reports whether Observe would keep a key that has used used of
// limit: a caller can skip reading the clock when it would not. One atomic
// load.
func (r *RuleUsage) Wants(used, limit int64) bool {
	return r != nil && limit > 0 && used > 0 && int64(float64(used)*1e6/float64(limit)) >= r.floor.Load()
}

// Observe records that key has used used of limit at now, and will be
// whole again after reset.
func (r *RuleUsage) Observe(key string, used, limit int64, reset time.Duration, now time.Time) {
	if r == nil || limit <= 0 || used <= 0 {
		return
	}
	share := int64(float64(used) * 1e6 / float64(limit))
	if share < r.floor.Load() {
		return
	}
	if !r.mu.TryLock() {
		return // another request is updating: this one is not needed
	}
	defer r.mu.Unlock()
	e := UsageEntry{Rule: r.name, Key: key, Used: used, Limit: limit, At: now, Reset: now.Add(reset)}
	least := -1
	for i := range r.keys {
		k := &r.keys[i]
		if k.Key == key || !k.Reset.After(now) {
			*k = e
			r.setFloor()
			return
		}
		if least < 0 || float64(k.Used)*float64(r.keys[least].Limit) < float64(r.keys[least].Used)*float64(k.Limit) {
			least = i
		}
	}
	if len(r.keys) < r.max {
		r.keys = append(r.keys, e)
	} else if l := r.keys[least]; float64(used)*float64(l.Limit) > float64(l.Used)*float64(limit) {
		r.keys[least] = e
	}
	r.setFloor()
}

func (r *RuleUsage) setFloor() {
	if len(r.keys) < r.max {
		r.floor.Store(0)
		return
	}
	f := int64(1 << 62)
	for _, k := range r.keys {
		f = min(f, int64(float64(k.Used)*1e6/float64(k.Limit)))
	}
	r.floor.Store(f)
}

func (r *RuleUsage) appendLive(out []UsageEntry, now time.Time) []UsageEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	live := r.keys[:0]
	for _, k := range r.keys {
		if k.Reset.After(now) {
			live = append(live, k)
		}
	}
	r.keys = live
	r.setFloor()
	return append(out, live...)
}

// sortUsage orders entries by the share of their limit used, most first.
func sortUsage(us []UsageEntry) {
	sort.SliceStable(us, func(i, j int) bool {
		a, b := us[i], us[j]
		return float64(a.Used)*float64(b.Limit) > float64(b.Used)*float64(a.Limit)
	})
}
