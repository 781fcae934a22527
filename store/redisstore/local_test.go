package redisstore

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/store/storetest"
)

// The FailLocal fallback at share 1 must decide exactly as
// storetest.Reference, which every store follows: same Allowed, Remaining,
// RetryAfter and ResetAfter, for every algorithm, with several hits per
// call on the same key (a sliding log's later hits see the units the
// earlier ones of the call would admit).
func TestLocalStoreMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	t0 := time.Unix(1_700_000_000, 0)
	for _, alg := range portero.Algorithms {
		rule := portero.Rule{Name: "local." + string(alg), Algorithm: alg, Limit: portero.Limit{Count: 5, Window: time.Second, Burst: 5}}
		ls, ref := newLocalStore(1), storetest.NewReference()
		now := t0
		for step := range 400 {
			now = now.Add(time.Duration(r.Int64N(int64(400 * time.Millisecond))))
			hits := make([]portero.Hit, 1+r.IntN(3))
			for i := range hits {
				hits[i] = portero.Hit{Rule: rule, Key: []string{"a", "b"}[r.IntN(2)], Cost: 1 + r.Int64N(2)}
			}
			want, err := ref.AllowAll(context.Background(), now, hits)
			if err != nil {
				t.Fatalf("%s step %d: reference: %v", alg, step, err)
			}
			got := ls.allowAll(now, hits)
			for i := range hits {
				if got[i] != want[i] {
					t.Fatalf("%s step %d hit %d %+v:\n local     %+v\n reference %+v", alg, step, i, hits[i], got[i], want[i])
				}
			}
		}
	}
}
