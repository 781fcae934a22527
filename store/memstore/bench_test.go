package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/store/memstore"
)

// BenchmarkAllowN measures one hot key with the instant passed in; the
// side-by-side comparison with other limiters lives in the bench module.
func BenchmarkAllowN(b *testing.B) {
	for _, a := range []portero.Algorithm{portero.GCRA, portero.TokenBucket, portero.FixedWindow, portero.SlidingCounter} {
		b.Run(string(a), func(b *testing.B) {
			s, err := memstore.New(memstore.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close(context.Background())
			l, err := s.Limiter(portero.Rule{Algorithm: a, Limit: portero.Limit{Count: 1_000_000, Window: time.Second, Burst: 1000}})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				l.AllowN(ctx, "hot", now.Add(time.Duration(i)*250), 1)
			}
		})
	}
}
