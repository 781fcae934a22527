package client

import (
	"errors"
	"time"

	"github.com/sony/gobreaker/v2"
)

// Breaker is the circuit breaker of one host or target
// (github.com/sony/gobreaker/v2): it opens after Failures consecutive failed
// calls, refuses calls for CoolDown, then lets one trial through. It counts
// calls, not attempts: a caller asks Allow once per call and reports the
// call's outcome, by its last attempt, once. The Transport keeps one per
// host; the gRPC interceptors of client/grpcclient one per target. It is
// safe for concurrent use.
type Breaker struct {
	cb *gobreaker.TwoStepCircuitBreaker[struct{}]
}

// Outcome is how a call ended, for its breaker.
type Outcome int

// The outcomes of a call.
const (
	// Succeeded: the host answered well enough (a 429 included: it is
	// healthy enough to say "slow down").
	Succeeded Outcome = iota + 1
	// Failed: counted towards opening the breaker.
	Failed
	// Excluded: the call says nothing about the host (nothing was sent, or
	// the caller gave up); not counted.
	Excluded
)

// NewBreaker returns the breaker of name (a host, a target), opening after
// failures consecutive failed calls for coolDown; onChange, when not nil, is
// called on every change of state, while the breaker is locked.
func NewBreaker(name string, failures int, coolDown time.Duration, onChange func(BreakerChange)) *Breaker {
	n := uint32(failures)
	return &Breaker{cb: gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        name,
		MaxRequests: 1,
		Timeout:     coolDown,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= n },
		IsExcluded:  func(err error) bool { return err == errExcluded },
		OnStateChange: func(name string, from, to gobreaker.State) {
			if onChange != nil {
				onChange(BreakerChange{Host: name, From: fromGobreaker(from), To: fromGobreaker(to)})
			}
		},
	})}
}

// Allow asks for one call. It returns an error wrapping gobreaker's
// ErrOpenState or ErrTooManyRequests when the breaker refuses it, and
// otherwise done, to be called once with the call's outcome.
func (b *Breaker) Allow() (done func(Outcome), err error) {
	d, err := b.cb.Allow()
	if err != nil {
		return nil, err
	}
	return func(o Outcome) {
		switch o {
		case Failed:
			d(errFailure)
		case Succeeded:
			d(nil)
		default:
			d(errExcluded)
		}
	}, nil
}

// State returns the breaker's state now.
func (b *Breaker) State() BreakerState { return fromGobreaker(b.cb.State()) }

// idle reports whether the breaker is closed with no failure counted: it
// holds nothing back and remembers nothing.
func (b *Breaker) idle() bool {
	return b.cb.State() == gobreaker.StateClosed && b.cb.Counts().ConsecutiveFailures == 0
}

var (
	errFailure  = errors.New("attempt failed")
	errExcluded = errors.New("attempt excluded")
)

func fromGobreaker(s gobreaker.State) BreakerState {
	switch s {
	case gobreaker.StateOpen:
		return BreakerOpen
	case gobreaker.StateHalfOpen:
		return BreakerHalfOpen
	}
	return BreakerClosed
}
