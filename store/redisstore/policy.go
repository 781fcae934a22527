package redisstore

import (
	"errors"

	"github.com/portero-rl/portero"
)

// unavailableCall accounts for a call that Redis could not decide and
// returns cause, the error the caller gets: no decision goes with it, so
// that the caller's failure policy answers.
func (s *Store) unavailableCall(hits []portero.Hit, cause error) error {
	if !errors.Is(cause, portero.ErrStoreUnavailable) {
		cause = &unavailableError{err: cause}
	}
	s.unavailableCalls.Add(1)
	s.errs.Add(1)
	if !s.degraded.Swap(true) {
		s.log.Warn("redisstore: redis unavailable: the callers' failure policies decide", "err", cause)
	}
	if s.cfg.OnUnavailable != nil {
		s.cfg.OnUnavailable(UnavailableCall{Hits: hits, Err: cause})
	}
	return cause
}
