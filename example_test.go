package portero_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/store/memstore"
)

// ExampleWaitN makes a producer wait for its turn instead of being refused,
// and shows the early answer when the turn would come after the deadline:
// a token bucket of 1 a minute has nothing for 59 s after its one token.
func ExampleWaitN() {
	store, err := memstore.New(memstore.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close(context.Background())
	lim, err := store.Limiter(portero.Rule{Name: "export", Algorithm: portero.TokenBucket, Limit: portero.PerMinute(1)})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := portero.WaitN(ctx, lim, "tenant-a", 1, store.Now)
	fmt.Println(d.Allowed, err)
	_, err = portero.WaitN(ctx, lim, "tenant-a", 1, store.Now)
	fmt.Println(errors.Is(err, context.DeadlineExceeded), ctx.Err()) // at once, not after 10 s
	// Output:
	// true <nil>
	// true <nil>
}
