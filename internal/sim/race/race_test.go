package race

import (
	"context"
	"testing"
	"time"

	"github.com/portero-rl/portero/internal/redistest"
)

func TestRace(t *testing.T) {
	srv := redistest.Start(t)
	res, err := Run(context.Background(), Config{Addr: srv.Addr(), Instances: 2, Requests: 400, Limit: 50, Window: time.Minute, Rounds: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 6 {
		t.Fatalf("%d results, want 2 per round for 3 rounds", len(res))
	}
	for _, r := range res {
		switch r.Mode {
		case Atomic:
			if r.Admitted != 50 {
				t.Errorf("round %d: the atomic store admitted %d, want exactly 50", r.Round, r.Admitted)
			}
		case Naive:
			if r.Admitted < 50 || r.Admitted > 400 {
				t.Errorf("round %d: naive admitted %d, want between 50 and 400", r.Round, r.Admitted)
			}
			t.Logf("round %d: naive admitted %d", r.Round, r.Admitted)
		default:
			t.Errorf("unknown mode %q", r.Mode)
		}
	}
}

func TestRaceBadConfig(t *testing.T) {
	if _, err := Run(context.Background(), Config{}); err == nil {
		t.Error("Run without an address succeeded")
	}
	if _, err := Run(context.Background(), Config{Addr: "127.0.0.1:1", Instances: -1}); err == nil {
		t.Error("Run with -1 instances succeeded")
	}
}

func TestRunInstances(t *testing.T) {
	res, err := RunInstances(context.Background(), 3, 10, time.Minute, 100)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if want := int64(10 * (i + 1)); r.Admitted != want {
			t.Errorf("%d instances with local memory admitted %d, want %d (N×L)", r.Instances, r.Admitted, want)
		}
	}
	if _, err := RunInstances(context.Background(), 0, 10, time.Minute, 100); err == nil {
		t.Error("0 instances accepted")
	}
}
