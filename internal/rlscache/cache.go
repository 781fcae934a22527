// Package rlscache is envoyproxy/ratelimit's local cache
// (LOCAL_CACHE_SIZE_IN_BYTES): the counters known to be over their limit
// in their current window, which engine.CountEach then refuses without
// asking the store or counting them (engine.OverLimitCache).
//
// It is coocood/freecache, the library envoyproxy/ratelimit uses, so that a
// size in bytes holds the same entries as there: 256 segments of ring
// buffers (at least 512 KiB in all), an entry costing its key and a
// 24-byte header, the oldest entries overwritten when a segment is full.
// Entries live one window from the refusal that wrote them, measured on
// the clock the decisions use.
package rlscache

import (
	"time"

	"github.com/coocood/freecache"
)

// Cache is the local cache; safe for concurrent use.
type Cache struct{ fc *freecache.Cache }

// New returns a cache of size bytes whose entries expire on now's clock
// (time.Now when nil).
func New(size int, now func() time.Time) *Cache {
	if now == nil {
		now = time.Now
	}
	return &Cache{fc: freecache.NewCacheCustomTimer(size, clock(now))}
}

// clock is freecache's Timer on a decision clock: whole Unix seconds.
type clock func() time.Time

func (c clock) Now() uint32 { return uint32(c().Unix()) }

// Over reports whether key is cached as over its limit.
func (c *Cache) Over(key string) bool {
	_, err := c.fc.Get([]byte(key))
	return err == nil
}

// SetOver caches key as over its limit for ttl (whole seconds, at least
// one), as envoyproxy/ratelimit caches a key for its unit's length.
func (c *Cache) SetOver(key string, ttl time.Duration) {
	// An entry larger than a segment's ring buffer is not kept: that key
	// is asked in the store every time, as there.
	_ = c.fc.Set([]byte(key), nil, int(max(ttl/time.Second, 1)))
}
