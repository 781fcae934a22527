package descriptor

import (
	"fmt"
	"strings"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/engine/header"
)

// Limit is the rate_limit of a configuration node, compiled.
type Limit struct {
	// Name is the rate_limit's name, the target of other limits' replaces;
	// empty when not given.
	Name string
	// FullKey is envoyproxy/ratelimit's name for the node, as in its stats:
	// the domain and, for every level, key or key_value, joined by ".".
	FullKey string
	// Unit and RequestsPerUnit are the limit as written; both zero when
	// Unlimited. A look-back limit (LimitSpec.LookBack) has the unit
	// UnitUnknown: Envoy's units have no 5 minutes.
	Unit            Unit
	RequestsPerUnit uint32
	// Unlimited answers OK without counting.
	Unlimited bool
	// Replaces names the limits this one suppresses when both match
	// descriptors of one request.
	Replaces []string
	// DetailedMetric is the node's detailed_metric: metrics name this
	// limit's decisions by the request's values too (as
	// envoyproxy/ratelimit's per-value stats), not by its keys alone.
	DetailedMetric bool
	// Rule is what the engine decides: PolicyName as the rule's name, the
	// algorithm (portero.FixedWindow, envoyproxy/ratelimit's clock-aligned
	// window, unless the portero extension chose another), Count =
	// RequestsPerUnit per Unit, shadow when the node is in shadow mode, and
	// the rule's header text. A RequestsPerUnit of 0 is a rule that admits
	// nothing. Nil when Unlimited.
	Rule *engine.Rule
	// Metadata is the metadata of the node the limit belongs to (see
	// Node.Metadata); nil when none, and for overrides.
	Metadata map[string]any
}

// LimitSpec is what NewLimit compiles: the rate_limit as written, with
// Portero's extension (rate_limit.portero) and the node's shadow_mode.
type LimitSpec struct {
	Name, FullKey   string
	Unit            Unit
	RequestsPerUnit uint32
	Unlimited       bool
	Replaces        []string
	// Algorithm is the extension's algorithm; empty means
	// portero.FixedWindow.
	Algorithm portero.Algorithm
	// Burst is the extension's burst, for the buckets, GCRA and the queue.
	Burst int64
	// Budget is the extension's budget: the rule is served from leased
	// budgets (portero.Rule.Budget).
	Budget time.Duration
	// Shadow is the node's shadow_mode, QuotaMode its quota_mode.
	Shadow, QuotaMode bool
	// Calendar, when it is a calendar limit (portero.Limit.IsCalendar),
	// is what the engine counts instead of RequestsPerUnit per Unit: a
	// quota per calendar day, week or month in a time zone, with an
	// offset (the extension's calendar: true). Its Count is
	// RequestsPerUnit and its period the Unit (day, week or month), so
	// that Envoy is told the limit as written.
	Calendar portero.Limit
	// LookBack, when set, is the window of a look-back limit (the
	// extension's look_back, policy.LookBackLimit): RequestsPerUnit over
	// the last LookBack, whatever the Unit (UnitUnknown then).
	LookBack time.Duration
	// Envoyproxy accepts what envoyproxy/ratelimit accepts and Portero's
	// own rules do not: a count per second above what Portero's algorithms
	// count (the rule is then for the engine's CountEach alone), a name
	// that cannot be an sf-string (announced percent-encoded).
	Envoyproxy bool
}

// NewLimit compiles s. Errors say what is wrong in words a configuration
// error can carry: an unknown unit, an invalid limit, or a name that cannot
// appear in a RateLimit header.
func NewLimit(s LimitSpec) (*Limit, error) {
	l := &Limit{Name: s.Name, FullKey: s.FullKey, Unit: s.Unit, RequestsPerUnit: s.RequestsPerUnit, Unlimited: s.Unlimited, Replaces: s.Replaces}
	if s.Unlimited {
		return l, nil
	}
	if !s.Unit.Valid() && s.LookBack == 0 {
		return nil, fmt.Errorf("invalid unit %d", int32(s.Unit))
	}
	alg := s.Algorithm
	if alg == "" {
		alg = portero.FixedWindow
	}
	r := engine.Rule{Rule: portero.Rule{Name: l.PolicyName(), Algorithm: alg, Budget: s.Budget}, Shadow: s.Shadow, QuotaMode: s.QuotaMode}
	r.Limit.Window = s.Unit.Duration()
	switch {
	case s.Calendar.IsCalendar():
		if s.Calendar.Count != int64(s.RequestsPerUnit) || s.Unit.Duration() != s.Calendar.Period.Nominal() {
			return nil, fmt.Errorf("calendar quota %v is not %d per %s", s.Calendar, s.RequestsPerUnit, s.Unit)
		}
		r.Limit = s.Calendar
	case s.LookBack > 0:
		l.Unit = UnitUnknown
		r.Limit = portero.Limit{Count: int64(s.RequestsPerUnit), Window: s.LookBack, Burst: s.Burst}
	case s.RequestsPerUnit > 0:
		r.Limit.Count, r.Limit.Burst = int64(s.RequestsPerUnit), s.Burst
	}
	ann, err := header.Announce(&r)
	if err != nil && s.Envoyproxy {
		shown := r
		shown.Name = percentEncode(r.Name)
		ann, err = header.Announce(&shown)
	}
	if err != nil {
		if s.Name == "" {
			return nil, fmt.Errorf("%w; give the rate_limit a name", err)
		}
		return nil, err
	}
	r.Announce = ann
	if l.Rule, err = engine.NewRule(r); err != nil {
		if !s.Envoyproxy || alg != portero.FixedWindow {
			return nil, err
		}
		if l.Rule, err = engine.NewCountingRule(r); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// PolicyName returns the name used in RateLimit headers, decisions and the
// store: Name when given, otherwise FullKey.
func (l *Limit) PolicyName() string {
	if l.Name != "" {
		return l.Name
	}
	return l.FullKey
}

// Blocked reports whether the limit admits nothing (requests_per_unit 0).
func (l *Limit) Blocked() bool { return !l.Unlimited && l.RequestsPerUnit == 0 }

// Override is the limit Envoy may attach to a descriptor, used instead of
// the configuration (a fixed window of RequestsPerUnit per Unit).
type Override struct {
	RequestsPerUnit uint32
	Unit            Unit
}

// OverrideLimit returns the limit of a descriptor's override: a fixed
// window of rpu per unit, named after the domain and the descriptor's keys
// without their values ("edge.remote_address"): the values are store keys
// under the rule (see StoreKey), so that a client sending a new value each
// time adds a key, bounded and expiring like any key, and not a rule. A
// name holding bytes an sf-string cannot carry (keys come from the
// request) is announced with those bytes, and '%', percent-encoded. A zero
// rpu is a limit that admits nothing. It reports an error for an unknown
// unit.
func OverrideLimit(domain string, entries []Entry, o Override) (*Limit, error) {
	if !o.Unit.Valid() {
		return nil, fmt.Errorf("limit override: invalid unit %d", int32(o.Unit))
	}
	name := domain + "." + Keys(entries)
	l := &Limit{FullKey: name, Unit: o.Unit, RequestsPerUnit: o.RequestsPerUnit}
	r := engine.Rule{Rule: portero.Rule{Name: name, Algorithm: portero.FixedWindow}}
	r.Limit.Window = o.Unit.Duration()
	r.Limit.Count = int64(o.RequestsPerUnit)
	ann, err := header.Announce(&r)
	if err != nil {
		shown := r
		shown.Name = percentEncode(name)
		if ann, err = header.Announce(&shown); err != nil {
			return nil, fmt.Errorf("limit override: %w", err)
		}
	}
	r.Announce = ann
	if l.Rule, err = engine.NewRule(r); err != nil {
		return nil, fmt.Errorf("limit override: %w", err)
	}
	return l, nil
}

// percentEncode replaces '%' and every byte outside printable ASCII with
// %XX.
func percentEncode(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '%' {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
