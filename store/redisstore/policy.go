package redisstore

import (
	"errors"

	"github.com/portero-rl/portero"
)

// unavailableCall accounts for a call that Redis could not decide and
// returns cause, the error the caller gets: no decision goes with it, so
// that the caller's failure policy answers. The node it failed on has
// noted it already (node.failed).
func (s *Store) unavailableCall(hits []portero.Hit, cause error) error {
	cause = asUnavailable(cause)
	s.unavailableCalls.Add(1)
	s.errs.Add(1)
	if s.cfg.OnUnavailable != nil {
		s.cfg.OnUnavailable(UnavailableCall{Hits: hits, Err: cause})
	}
	return cause
}

// asUnavailable is err marked as Redis's unavailability, unless it is
// already.
func asUnavailable(err error) error {
	if errors.Is(err, portero.ErrStoreUnavailable) {
		return err
	}
	return &unavailableError{err: err}
}
