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
	Name string // the target of other limits' replaces; may be empty
	// FullKey is the node's name in envoyproxy/ratelimit's stats: the
	// domain and key or key_value per level, joined by ".".
	FullKey string
	// Unit and RequestsPerUnit are as written: zero when Unlimited, and a
	// look-back limit's unit is UnitUnknown.
	Unit            Unit
	RequestsPerUnit uint32
	Unlimited       bool     // OK without counting
	Replaces        []string // the limits this one suppresses in a request
	// DetailedMetric names this limit's metrics by the request's values.
	DetailedMetric bool
	// Rule is what the engine decides, named PolicyName; nil when
	// Unlimited. A RequestsPerUnit of 0 admits nothing.
	Rule     *engine.Rule
	Metadata map[string]any // the node's; nil for overrides
}

// LimitSpec is what NewLimit compiles: the rate_limit as written, with
// Portero's extension (rate_limit.portero) and the node's shadow_mode.
type LimitSpec struct {
	Name, FullKey     string
	Unit              Unit
	RequestsPerUnit   uint32
	Unlimited         bool
	Replaces          []string
	Algorithm         portero.Algorithm // empty means portero.FixedWindow
	Burst             int64
	Budget            time.Duration // served from leased budgets
	Shadow, QuotaMode bool
	// Calendar, when a calendar limit, is counted instead of
	// RequestsPerUnit per Unit; it must say the same count and period.
	Calendar portero.Limit
	// LookBack, when set, counts RequestsPerUnit over the last LookBack.
	LookBack time.Duration
	// Envoyproxy accepts what envoyproxy/ratelimit does and Portero's
	// rules do not: a count per second past the algorithms' (counted by
	// CountEach alone), a name that is no sf-string (percent-encoded).
	Envoyproxy bool
}

// NewLimit compiles s; its errors can stand in a configuration error.
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
	if err := announce(&r, s.Envoyproxy); err != nil {
		if s.Name == "" {
			return nil, fmt.Errorf("%w; give the rate_limit a name", err)
		}
		return nil, err
	}
	var err error
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

// announce sets r's header text; with encode, a name that is no sf-string
// is announced percent-encoded.
func announce(r *engine.Rule, encode bool) error {
	ann, err := header.Announce(r)
	if err != nil && encode {
		shown := *r
		shown.Name = percentEncode(r.Name)
		ann, err = header.Announce(&shown)
	}
	r.Announce = ann
	return err
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
// window named after the domain and the descriptor's keys alone
// ("edge.remote_address"), so that a new value is a new store key, bounded
// and expiring, never a new rule. A zero rpu admits nothing.
func OverrideLimit(domain string, entries []Entry, o Override) (*Limit, error) {
	if !o.Unit.Valid() {
		return nil, fmt.Errorf("limit override: invalid unit %d", int32(o.Unit))
	}
	name := domain + "." + Keys(entries)
	l := &Limit{FullKey: name, Unit: o.Unit, RequestsPerUnit: o.RequestsPerUnit}
	r := engine.Rule{Rule: portero.Rule{Name: name, Algorithm: portero.FixedWindow}}
	r.Limit.Window = o.Unit.Duration()
	r.Limit.Count = int64(o.RequestsPerUnit)
	if err := announce(&r, true); err != nil {
		return nil, fmt.Errorf("limit override: %w", err)
	}
	var err error
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
