package dashboard

import (
	"sort"
	"sync"
	"time"
)

// RefusedMinutes is how far back a Refused list counts.
const RefusedMinutes = 15

// refusedMaxKeys bounds the distinct keys counted per minute: beyond it a
// refusal is dropped, so that a flood of new keys cannot grow the memory.
const refusedMaxKeys = 10000

// Refused counts the keys refused per minute over the last
// RefusedMinutes, for the dashboard and `portero serve`'s /api/refused.
// The zero value is ready and safe for concurrent use.
type Refused struct {
	mu      sync.Mutex
	buckets [RefusedMinutes]refusedMinute
}

type refusedMinute struct {
	minute int64
	counts map[Key]int64 // by Key with Count 0
}

// Add counts one refusal of key by rule (a shadow rule's when shadow) at
// now.
func (rf *Refused) Add(rule, key string, shadow bool, now time.Time) {
	minute := now.Unix() / 60
	rf.mu.Lock()
	defer rf.mu.Unlock()
	b := &rf.buckets[minute%RefusedMinutes]
	if b.minute != minute || b.counts == nil {
		*b = refusedMinute{minute: minute, counts: map[Key]int64{}}
	}
	k := Key{Rule: rule, Key: key, Shadow: shadow}
	if _, ok := b.counts[k]; ok || len(b.counts) < refusedMaxKeys {
		b.counts[k]++
	}
}

// Top returns the n keys refused most in the last minutes (1 to
// RefusedMinutes) before now, most first.
func (rf *Refused) Top(now time.Time, minutes, n int) []Key {
	minutes = min(max(minutes, 1), RefusedMinutes)
	cur := now.Unix() / 60
	sum := map[Key]int64{}
	rf.mu.Lock()
	for i := range rf.buckets {
		b := &rf.buckets[i]
		if b.counts != nil && b.minute > cur-int64(minutes) && b.minute <= cur {
			for k, c := range b.counts {
				sum[k] += c
			}
		}
	}
	rf.mu.Unlock()
	out := make([]Key, 0, len(sum))
	for k, c := range sum {
		k.Count = c
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		if out[i].Rule != out[j].Rule {
			return out[i].Rule < out[j].Rule
		}
		return out[i].Key < out[j].Key
	})
	return out[:min(len(out), n)]
}
