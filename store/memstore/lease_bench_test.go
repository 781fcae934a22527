package memstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/store/memstore"
)

// BenchmarkLease is one request's lease: Acquire and Release, on 1024 keys
// (per client) or on one key (the service's limit, one shard).
func BenchmarkLease(b *testing.B) {
	for _, keys := range []int{1024, 1} {
		b.Run("keys="+strconv.Itoa(keys), func(b *testing.B) {
			s, err := memstore.New(memstore.Config{SweepInterval: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close(context.Background())
			rule := portero.ConcurrencyRule{Name: "b", Max: 1 << 20}
			names := make([]string, keys)
			for i := range names {
				names[i] = "k" + strconv.Itoa(i)
			}
			ctx, now := context.Background(), time.Now()
			var n atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := int(n.Add(1)) * 7919
				for pb.Next() {
					i++
					l, d, err := s.Acquire(ctx, now, rule, names[i%keys])
					if err != nil || !d.Allowed {
						b.Fatal(d, err)
					}
					l.Release(ctx)
				}
			})
		})
	}
}
