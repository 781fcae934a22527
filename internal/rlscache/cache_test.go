package rlscache

import (
	"testing"
	"time"
)

// TestCacheExpiresOnItsClock: an entry is over until its TTL has passed on
// the clock given, not the wall clock; a key never set is not.
func TestCacheExpiresOnItsClock(t *testing.T) {
	now := time.Unix(1_772_445_605, 0)
	c := New(1<<20, func() time.Time { return now })
	c.SetOver("d_k_v_1772445600", time.Minute)
	if !c.Over("d_k_v_1772445600") || c.Over("d_k_w_1772445600") {
		t.Fatal("a key set is over, another is not")
	}
	now = now.Add(59 * time.Second)
	if !c.Over("d_k_v_1772445600") {
		t.Error("59 s into a TTL of a minute: no longer over")
	}
	now = now.Add(time.Second)
	if c.Over("d_k_v_1772445600") {
		t.Error("a minute later: still over")
	}
}
