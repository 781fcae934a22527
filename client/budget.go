package client

import (
	"fmt"
	"sync"
)

// RetryBudget bounds the retries of many calls together, so that a failing
// or refusing server is not sent a multiple of its load by retries (a retry
// storm). It is gRPC's retry throttling
// (grpc-go's service config retryThrottling, gRPC's retry design A6), so
// that a client using Portero's interceptors and one using grpc-go's retry
// policy spend alike: it holds tokens, gRPC's maxTokens to start with; every
// failed attempt takes one, every successful one gives back tokenRatio, up
// to maxTokens; a retry may go only while more than half of maxTokens are
// left. Attempts refused by a rate limiter count as failures: a server that
// keeps saying "slow down" soon gets no retries at all, only first
// attempts. It is safe for concurrent use; the zero value is not: use
// NewRetryBudget.
type RetryBudget struct {
	mu         sync.Mutex
	tokens     float64
	max, ratio float64
}

// Defaults of NewRetryBudget's zero arguments.
const (
	DefaultBudgetTokens = 10
	DefaultBudgetRatio  = 0.1
)

// NewRetryBudget returns a full budget of maxTokens (0 means 10) that
// regains ratio (0 means 0.1) per successful attempt. maxTokens must be at
// most 1000 and ratio in (0, 1], as gRPC requires.
func NewRetryBudget(maxTokens int, ratio float64) (*RetryBudget, error) {
	if maxTokens == 0 {
		maxTokens = DefaultBudgetTokens
	}
	if ratio == 0 {
		ratio = DefaultBudgetRatio
	}
	if maxTokens < 0 || maxTokens > 1000 || ratio < 0 || ratio > 1 {
		return nil, fmt.Errorf("client: retry budget of %d tokens and ratio %v: want 1 to 1000 tokens and a ratio in (0, 1]", maxTokens, ratio)
	}
	return &RetryBudget{tokens: float64(maxTokens), max: float64(maxTokens), ratio: ratio}, nil
}

// Failed records a failed attempt and reports whether the budget still
// allows a retry of it.
func (b *RetryBudget) Failed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = max(b.tokens-1, 0)
	return b.tokens > b.max/2
}

// Succeeded records a successful attempt.
func (b *RetryBudget) Succeeded() {
	b.mu.Lock()
	b.tokens = min(b.tokens+b.ratio, b.max)
	b.mu.Unlock()
}

// Tokens returns the tokens left.
func (b *RetryBudget) Tokens() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tokens
}
