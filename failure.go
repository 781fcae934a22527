package portero

import (
	"fmt"
	"strings"
)

// FailurePolicy says what happens to a request when the store cannot
// decide it (Redis down, a timeout, an open circuit breaker). It is one
// vocabulary for the whole project: the same name means the same thing in
// the library (package engine), at every door (the middleware, the gateway,
// the Envoy rate limit service, the HTTP check API), in the YAML field
// store.on_error and in every command-line flag that takes a policy.
//
// A store never applies a policy itself: it either decides or returns an
// error. The engine applies the policy to the hits the store could not
// decide, and its verdict says which hits the policy decided, so that no
// door announces quota figures it does not have.
//
// The zero value means FailAllow wherever a policy is given: the engine
// decides it (engine.Options.OnError), for every door.
type FailurePolicy string

// The failure policies.
const (
	// FailAllow lets the request pass, uncounted: a broken limiter does not
	// take the service down with it.
	FailAllow FailurePolicy = "allow"
	// FailDeny refuses the request. It is the service's failure, not the
	// client's: the middleware and the gateway answer 503
	// (temporary-reduced-capacity), not 429; /v1/auth its proxy's deny
	// status; the Envoy door OVER_LIMIT.
	FailDeny FailurePolicy = "deny"
	// FailLocal decides in this instance's memory with a share of each
	// limit (engine.Options.LocalShare) while the store fails: approximate,
	// but bounded by instances × share × limit.
	FailLocal FailurePolicy = "local"
	// FailError reports the failure to the door's caller instead of
	// deciding: gRPC UNAVAILABLE for Envoy (whose failure_mode_deny then
	// decides), 503 for the check API. Only doors that have a caller to
	// report to accept it; the middleware does not.
	FailError FailurePolicy = "error"
)

// FailurePolicies lists the policies in a stable order.
var FailurePolicies = []FailurePolicy{FailAllow, FailDeny, FailLocal, FailError}

// ParseFailurePolicy returns the policy with the given name (allow, deny,
// local or error). The old spellings (open, closed, fail-open, fail-closed)
// are refused with the name that replaced them, so that an old flag or file
// is corrected rather than silently read.
func ParseFailurePolicy(name string) (FailurePolicy, error) {
	for _, p := range FailurePolicies {
		if string(p) == name {
			return p, nil
		}
	}
	switch strings.ToLower(name) {
	case "open", "fail-open", "fail_open", "failopen":
		return "", fmt.Errorf("failure policy %q: now spelled allow", name)
	case "closed", "fail-closed", "fail_closed", "failclosed":
		return "", fmt.Errorf("failure policy %q: now spelled deny", name)
	}
	return "", fmt.Errorf("failure policy %q: want allow, deny, local or error", name)
}

// String returns the policy's name.
func (p FailurePolicy) String() string { return string(p) }

// Valid reports whether p is one of the four policies.
func (p FailurePolicy) Valid() bool {
	switch p {
	case FailAllow, FailDeny, FailLocal, FailError:
		return true
	}
	return false
}
