package sim

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/store/storetest"
)

// A request the rule can never admit is refused and says so, and the replay
// goes on deciding the rest as if it had not come.
func TestReplayCostNeverPasses(t *testing.T) {
	rule := portero.Rule{Name: "r", Algorithm: portero.GCRA, Limit: portero.Limit{Count: 2, Window: time.Second, Burst: 3}}
	trace := []Request{{At: 0, Key: "k", Cost: 1}, {At: 0, Key: "k", Cost: 4}, {At: 0, Key: "k", Cost: 2}, {At: 0, Key: "k", Cost: 1}}
	res, err := Replay(context.Background(), storetest.NewReference(), rule, trace)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		allowed bool
		outcome engine.Outcome
	}{{true, engine.Allowed}, {false, engine.CanNeverPass}, {true, engine.NearLimit}, {false, engine.Refused}}
	for i, w := range want {
		if res[i].Allowed != w.allowed || res[i].Outcome != w.outcome || res[i].NeverPasses() != (w.outcome == engine.CanNeverPass) {
			t.Errorf("request %d: %+v, want allowed %v, %s", i, res[i], w.allowed, w.outcome)
		}
	}
	if res[1].RetryAfter != 0 || res[1].Remaining != 2 {
		t.Errorf("cost 4 of 3: retry %v, remaining %d; want no retry and the 2 still available", res[1].RetryAfter, res[1].Remaining)
	}
}

type failing struct{ portero.Store }

func (failing) AllowAll(context.Context, time.Time, []portero.Hit) ([]portero.Decision, error) {
	return nil, portero.ErrStoreUnavailable
}

// A store failure stops the replay with an error: no failure policy makes
// up decisions in a simulation.
func TestReplayStoreFailure(t *testing.T) {
	rule := portero.Rule{Name: "r", Algorithm: portero.FixedWindow, Limit: portero.PerSecond(5)}
	_, err := Replay(context.Background(), failing{storetest.NewReference()}, rule, []Request{{Key: "k", Cost: 1}})
	if !errors.Is(err, portero.ErrStoreUnavailable) {
		t.Errorf("Replay over a failing store = %v, want ErrStoreUnavailable", err)
	}
}
