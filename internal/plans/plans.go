// Package plans compiles the API-gateway model into policy rules, as AWS
// API Gateway's usage plans describe an API (docs/plans.md): levels of
// throttles (global, stage, method, the caller's plan), each bounded by
// the one above, plans with a calendar quota, and the API keys that map
// callers to plans. It also holds the address lists both configuration
// formats may name (AddressLists).
package plans

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/clientip"
	"github.com/portero-rl/portero/internal/apikey"
	"github.com/portero-rl/portero/policy"
)

// Identity names under which the gateway passes a key's caller to the
// rules (identity:NAME).
const (
	IdentityAPIKey = "api_key"
	IdentityPlan   = "plan"
)

// DefaultKeyHeader is the request header that carries an API key when the
// configuration names none.
const DefaultKeyHeader = "X-API-Key"

// Model is the compiled API-gateway model of a configuration.
type Model struct {
	Keys      *apikey.Set // hashed API keys to callers; nil without keys
	KeyHeader string
	KeysFile  string // absolute, watched for changes; empty for none
	Plans     map[string]*Plan
	// Levels names the level of each rule compiled (global, stage,
	// method, plan, quota, rate-rule), by rule name.
	Levels map[string]string
	// LimitsPath is where GET answers the caller's limits; empty when off.
	LimitsPath string
}

// Plan is a usage plan: its name and the routes it covers.
type Plan struct {
	Name   string
	Routes []policy.Match // empty: every route
}

// Covers reports whether the plan covers req.
func (pl *Plan) Covers(req *policy.Request) bool {
	if len(pl.Routes) == 0 {
		return true
	}
	for i := range pl.Routes {
		if pl.Routes[i].Matches(req) {
			return true
		}
	}
	return false
}

// Throttle is a token bucket's two knobs: Rate requests per second, Burst
// at once (0 means the rate, rounded up).
type Throttle struct {
	Rate  float64 `yaml:"rate,omitempty"`
	Burst int64   `yaml:"burst,omitempty"`
}

// Limit returns t's token bucket and its burst.
func (t Throttle) Limit() (portero.Limit, int64, error) {
	rate, burst := t.Rate, t.Burst
	if !(rate > 0) || math.IsInf(rate, 0) {
		return portero.Limit{}, 0, fmt.Errorf("rate %v: want a positive number of requests per second", rate)
	}
	if burst < 0 {
		return portero.Limit{}, 0, fmt.Errorf("burst %d: must not be negative (0 means the rate)", burst)
	}
	if burst == 0 {
		burst = max(1, int64(math.Ceil(rate)))
	}
	l := portero.Limit{Count: burst, Window: time.Second, Burst: burst, Rate: rate}
	if rate == math.Trunc(rate) && rate <= float64(math.MaxInt32) {
		l = portero.Limit{Count: int64(rate), Window: time.Second, Burst: burst}
		if burst == l.Count {
			l.Burst = 0
		}
	}
	return l, burst, l.Validate()
}

// Rank is a level's place in the order; each is bounded by those above.
type Rank int

const (
	Global Rank = iota
	Stage
	Method
	PlanRank // a usage plan's throttle
)

func (r Rank) String() string { return [...]string{"global", "stage", "method", "plan"}[r] }

// Level is one throttle of the order, as a configuration gives it.
type Level struct {
	Rank Rank
	Rule string // its rule's name: global, stage/NAME, method/NAME, plan/NAME
	// Scope holds the requests it throttles (empty: all), for the bound of
	// the levels below; Match and Key are its rule's.
	Scope []policy.Match
	Match policy.Match
	Key   policy.Key
	Throttle
	// What and At name it in errors ("levels.stages[0] (prod)",
	// "portero.yaml:8:7"); Ref is the reader's handle to it.
	What, At string
	Ref      any
}

// Compiler builds a Model and its rules, in the order given.
type Compiler struct {
	Model  Model
	Rules  []policy.Rule
	levels []*throttled
	ids    map[string]string // each caller's plan, while keys are added
}

// throttled is a level with its burst as counted.
type throttled struct {
	Level
	burst int64
}

// NewCompiler returns a compiler of an empty model.
func NewCompiler() *Compiler {
	return &Compiler{Model: Model{Plans: map[string]*Plan{}, Levels: map[string]string{}}, ids: map[string]string{}}
}

func (c *Compiler) add(r policy.Rule, level string) {
	c.Rules = append(c.Rules, r)
	c.Model.Levels[r.Name] = level
}

// Level compiles l into a token-bucket rule, or says why its throttle is
// no limit.
func (c *Compiler) Level(l Level) error {
	lim, burst, err := l.Throttle.Limit()
	if err != nil {
		return err
	}
	c.levels = append(c.levels, &throttled{l, burst})
	c.add(policy.Rule{Name: l.Rule, Match: l.Match, Key: l.Key, Algorithm: portero.TokenBucket, Limit: lim}, l.Rank.String())
	return nil
}

// PlanMatch selects the callers whose API key is in plan; PlanKey counts
// each caller apart, by its key's ID.
func PlanMatch(plan string) policy.Match {
	return policy.Match{Identity: map[string]string{IdentityPlan: plan}}
}

// PlanKey counts each caller of a plan apart, by its key's ID.
var PlanKey = policy.MustParseKey("identity:" + IdentityAPIKey)

// Quota compiles a plan's quota, a calendar period (portero.ParseQuota),
// into a fixed-window rule named rule.
func (c *Compiler) Quota(rule, plan string, quota portero.Limit) {
	c.add(policy.Rule{Name: rule, Match: PlanMatch(plan), Key: PlanKey, Algorithm: portero.FixedWindow, Limit: quota}, "quota")
}

// RateRule adds a look-back rule, compiled by the configuration's reader.
func (c *Compiler) RateRule(r policy.Rule) { c.add(r, "rate-rule") }

// Overpromise is a level that promises more than a level above it whose
// scope contains its own: Msg says what, naming both.
type Overpromise struct {
	Level *Level
	Msg   string
}

// Bounds returns what each level promises beyond the levels above it.
func (c *Compiler) Bounds() []Overpromise {
	var out []Overpromise
	for _, lo := range c.levels {
		for _, hi := range c.levels {
			if hi.Rank >= lo.Rank || !contains(hi.Scope, lo.Scope) {
				continue
			}
			if lo.Rate > hi.Rate {
				out = append(out, Overpromise{&lo.Level, fmt.Sprintf("rate %s/s is more than %s allows (%s/s, %s): a lower level must not promise more than the level above it",
					num(lo.Rate), hi.What, num(hi.Rate), hi.At)})
			}
			if lo.burst > hi.burst {
				out = append(out, Overpromise{&lo.Level, fmt.Sprintf("burst %d is more than %s allows (%d, %s): a lower level must not promise more than the level above it",
					lo.burst, hi.What, hi.burst, hi.At)})
			}
		}
	}
	return out
}

func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// contains reports whether every request scope o applies to, scope s
// applies to as well (an empty scope applies to every request).
func contains(s, o []policy.Match) bool {
	if len(s) == 0 {
		return true
	}
	if len(o) == 0 {
		return false
	}
	for j := range o {
		if !slices.ContainsFunc(s, func(m policy.Match) bool { return m.Contains(&o[j]) }) {
			return false
		}
	}
	return true
}

// AddKey checks key e against the model's plans and adds it to
// Model.Keys, or returns the field it is wrong in and why. One caller has
// one plan. What the set keeps is the key's ID and its plan's own name, so
// that a million keys of a few plans hold a few plan names.
func (c *Compiler) AddKey(e apikey.Entry) (field string, err error) {
	if err := policy.ValidName(e.ID); err != nil {
		return "id", err
	}
	pl, ok := c.Model.Plans[e.Plan]
	if !ok {
		return "plan", fmt.Errorf("%q: no such plan (have %s)", e.Plan, strings.Join(slices.Sorted(maps.Keys(c.Model.Plans)), ", "))
	}
	if prev, ok := c.ids[e.ID]; ok && prev != pl.Name {
		return "plan", fmt.Errorf("key %s is in plan %s elsewhere: one caller, one plan", e.ID, prev)
	}
	h, err := apikey.ParseHash(e.SHA256)
	if err != nil {
		return "sha256", err
	}
	if err := c.Model.Keys.Add(h, apikey.Key{ID: e.ID, Plan: pl.Name}); err != nil {
		return "sha256", err
	}
	c.ids[e.ID] = pl.Name
	return "", nil
}

// AddressLists are the named lists of addresses and CIDRs a file gives
// (address_lists): a match may name a list where it gives addresses.
type AddressLists map[string][]netip.Prefix

// BadItem is an item of a list that is wrong: its index, and why.
type BadItem struct {
	Index int
	Err   error
}

// Add reads the list name of items, and returns its items that are no
// address or CIDR; err says that name is no name.
func (l AddressLists) Add(name string, items []string) (bad []BadItem, err error) {
	if err := policy.ValidName(name); err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for i, s := range items {
		pfx, err := clientip.ParsePrefixes([]string{s})
		if err != nil {
			bad = append(bad, BadItem{i, err})
			continue
		}
		out = append(out, pfx...)
	}
	l[name] = out
	return bad, nil
}

// Set returns the addresses items name, each a list, an address or a
// CIDR, and the items that are none of these; section is where the file
// gives its lists, for the message.
func (l AddressLists) Set(items []string, section string) (*clientip.AddrSet, []BadItem, error) {
	var all []netip.Prefix
	var bad []BadItem
	for i, s := range items {
		if list, ok := l[s]; ok {
			all = append(all, list...)
			continue
		}
		pfx, err := clientip.ParsePrefixes([]string{s})
		if err != nil {
			have := cmp.Or(strings.Join(slices.Sorted(maps.Keys(l)), ", "), "none under "+section)
			bad = append(bad, BadItem{i, fmt.Errorf("%q: neither an address list (have %s) nor an address or CIDR", s, have)})
			continue
		}
		all = append(all, pfx...)
	}
	set, err := clientip.NewAddrSet(all)
	return set, bad, err
}
