package client_test

import (
	"testing"

	"github.com/portero-rl/portero/client"
)

// TestRetryBudget: gRPC's retry throttling arithmetic. With 10 tokens, the
// fifth failure in a row leaves 5, no longer more than half: no retry; ten
// successes at 0.1 each give one token back, which allows a retry again.
func TestRetryBudget(t *testing.T) {
	b, err := client.NewRetryBudget(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 4; i++ {
		if !b.Failed() {
			t.Fatalf("failure %d refused a retry with %v tokens left", i, b.Tokens())
		}
	}
	if b.Failed() {
		t.Fatalf("failure 5 allowed a retry with %v tokens left, want none at half", b.Tokens())
	}
	for range 11 {
		b.Succeeded()
	}
	if !b.Failed() {
		t.Errorf("after 11 successes (%v tokens before the failure) a retry was refused", b.Tokens()+1)
	}
	for range 100 {
		b.Succeeded()
	}
	if got := b.Tokens(); got != 10 {
		t.Errorf("tokens after many successes = %v, want the maximum 10", got)
	}
	for _, bad := range [][2]float64{{-1, 0.1}, {1001, 0.1}, {10, 1.5}, {10, -0.1}} {
		if _, err := client.NewRetryBudget(int(bad[0]), bad[1]); err == nil {
			t.Errorf("NewRetryBudget(%v, %v) accepted", bad[0], bad[1])
		}
	}
}
