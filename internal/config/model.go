package config

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/clientip"
	"github.com/portero-rl/portero/internal/apikey"
	"github.com/portero-rl/portero/internal/plans"
	"github.com/portero-rl/portero/policy"
)

// The API-gateway model's sections (docs/plans.md): levels, usage plans and
// API keys (package plans), look-back rules, and address lists.

// Level is a stage (or host) or a route-and-method throttle; a method
// level in a Stage matches as the stage's and its own match together.
type Level struct {
	Name  string  `yaml:"name"`
	Stage string  `yaml:"stage,omitempty"`
	Match Match   `yaml:"match,omitempty"`
	Rate  float64 `yaml:"rate,omitempty"`
	Burst int64   `yaml:"burst,omitempty"`
}

// Levels are the shared throttles, applied in order before the plans.
type Levels struct {
	Global  plans.Throttle `yaml:"global,omitempty"`
	Stages  []Level        `yaml:"stages,omitempty"`
	Methods []Level        `yaml:"methods,omitempty"`
}

// Plan is a usage plan: a throttle per API key, a quota per API key, and
// the routes (and methods) it covers.
type Plan struct {
	Rate   float64 `yaml:"rate,omitempty"`
	Burst  int64   `yaml:"burst,omitempty"`
	Quota  string  `yaml:"quota,omitempty"`
	Routes []Match `yaml:"routes,omitempty"`
}

// APIKeys says where requests carry their key and which keys exist.
type APIKeys struct {
	Header string         `yaml:"header,omitempty"`
	File   string         `yaml:"file,omitempty"`
	Keys   []apikey.Entry `yaml:"keys,omitempty"`
}

// RateRule is a look-back rule per client, as an AWS WAF rate-based rule.
type RateRule struct {
	Name        string      `yaml:"name"`
	Limit       int64       `yaml:"limit"`
	Window      string      `yaml:"window,omitempty"`
	Aggregate   string      `yaml:"aggregate,omitempty"`
	ForwardedIP ForwardedIP `yaml:"forwarded_ip,omitempty"`
	Keys        []string    `yaml:"keys,omitempty"`
	ScopeDown   Match       `yaml:"scope_down,omitempty"`
	Action      string      `yaml:"action,omitempty"`
	Algorithm   string      `yaml:"algorithm,omitempty"`
}

// ForwardedIP is what a rule aggregated by forwarded IP does without a
// forwarded address: match (the connection's) or no_match.
type ForwardedIP struct {
	Fallback string `yaml:"fallback,omitempty"`
}

// Defaults and bounds of the model.
const (
	DefaultLimitsEndpoint = "/v1/limits"
	// MaxRateKeys is WAF's most custom aggregation keys.
	MaxRateKeys = 5
)

// addressLists reads address_lists into p.lists.
func (p *parser) addressLists(f *File) {
	p.lists = plans.AddressLists{}
	for _, name := range sortedKeys(f.AddressLists) {
		path := at("address_lists", name)
		bad, err := p.lists.Add(name, f.AddressLists[name])
		if err != nil {
			p.errorf(path, "%v", err)
		}
		for _, b := range bad {
			p.errorf(append(path, b.Index), "%v", b.Err)
		}
	}
}

// addresses resolves a match's addresses: list names and CIDRs.
func (p *parser) addresses(items []string, path []any) *clientip.AddrSet {
	if len(items) == 0 {
		return nil
	}
	set, bad, err := p.lists.Set(items, "address_lists")
	for _, b := range bad {
		p.errorf(append(path, b.Index), "%v", b.Err)
	}
	if err != nil {
		p.errorf(path, "%v", err)
		return nil
	}
	return set
}

// sortedKeys returns m's keys in order, for messages and a stable walk.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// gatewayModel reads the model's sections into c.Gateway and returns its
// rules put before the file's own; seen holds the file's rule names.
func (p *parser) gatewayModel(f *File, c *Config, rules []policy.Rule, seen map[string]int) []policy.Rule {
	m := &model{p: p, Compiler: plans.NewCompiler(), seen: seen}
	if t := f.Levels.Global; t != (plans.Throttle{}) {
		m.level(plans.Level{Rank: plans.Global, Rule: "global", Key: policy.MustParseKey("global"), Throttle: t, What: "levels.global"}, at("levels", "global"))
	}
	m.levels(f.Levels)
	m.plans(f.Plans)
	for _, o := range m.Bounds() {
		p.errorf(o.Level.Ref.([]any), "%s", o.Msg)
	}
	m.apiKeys(f)
	for i, rr := range f.RateRules {
		if r, ok := p.rateRule(rr, at("rate_rules", i), c); ok && m.name(r.Name, at("rate_rules", i, "name")) {
			m.RateRule(r)
		}
	}
	switch e := f.LimitsEndpoint; {
	case e == "":
		m.Model.LimitsPath = DefaultLimitsEndpoint
	case e == "off":
	case !strings.HasPrefix(e, "/") || strings.ContainsAny(e, "?# "):
		p.errorf(at("limits_endpoint"), "%q: want a path such as /v1/limits, or off", e)
	default:
		m.Model.LimitsPath = e
	}
	c.Gateway = m.Model
	return append(m.Rules, rules...)
}

// model reads the model's sections into a plans.Compiler.
type model struct {
	p *parser
	*plans.Compiler
	seen map[string]int // the rule names taken: the file's (index) and the model's (-1)
}

// name takes rule name n for the section at path, or says who has it.
func (m *model) name(n string, path []any) bool {
	if j, dup := m.seen[n]; dup {
		m.p.errorf(path, "compiles to rule %q, a name rules[%d] already uses", n, j)
		return false
	}
	m.seen[n] = -1
	return true
}

// level compiles the throttle l given at path.
func (m *model) level(l plans.Level, path []any) {
	if !m.name(l.Rule, path) {
		return
	}
	n := m.p.node(path...)
	l.At, l.Ref = fmt.Sprintf("%s:%d:%d", m.p.file, n.Line, n.Column), path
	if err := m.Level(l); err != nil {
		m.p.errorf(path, "%v", err)
	}
}

// levels reads levels.stages and levels.methods.
func (m *model) levels(ls Levels) {
	stages := map[string]Match{}
	for _, l := range ls.Stages {
		stages[l.Name] = l.Match
	}
	for k, list := range [][]Level{ls.Stages, ls.Methods} {
		section := [...]string{"stages", "methods"}[k]
		for i, l := range list {
			path := at("levels", section, i)
			if err := policy.ValidName(l.Name); err != nil {
				m.p.errorf(append(path, "name"), "%v", err)
				continue
			}
			if l.Stage != "" {
				sm, ok := stages[l.Stage]
				if k == 0 || !ok {
					m.p.errorf(append(path, "stage"), "%q: a method level names one of levels.stages (have %s)", l.Stage, strings.Join(sortedKeys(stages), ", "))
					continue
				}
				l.Match = within(l.Match, sm)
			}
			match := m.p.match(l.Match, append(path, "match"))
			m.level(plans.Level{Rank: plans.Stage + plans.Rank(k), Rule: [...]string{"stage/", "method/"}[k] + l.Name, Scope: []policy.Match{match},
				Match: match, Key: policy.MustParseKey("global"), Throttle: plans.Throttle{Rate: l.Rate, Burst: l.Burst},
				What: fmt.Sprintf("levels.%s[%d] (%s)", section, i, l.Name)}, path)
		}
	}
}

// plans reads the usage plans: each a throttle, a quota or both, per API
// key, over the routes it covers.
func (m *model) plans(ps map[string]Plan) {
	for _, pn := range sortedKeys(ps) {
		pl := ps[pn]
		path := at("plans", pn)
		if err := policy.ValidName(pn); err != nil {
			m.p.errorf(path, "%v", err)
			continue
		}
		compiled := &plans.Plan{Name: pn}
		for i, r := range pl.Routes {
			compiled.Routes = append(compiled.Routes, m.p.match(r, append(path, "routes", i)))
		}
		m.Model.Plans[pn] = compiled
		if pl.Rate == 0 && pl.Quota == "" {
			m.p.errorf(path, "a plan needs a throttle (rate, burst), a quota, or both")
			continue
		}
		if pl.Rate != 0 || pl.Burst != 0 {
			m.level(plans.Level{Rank: plans.PlanRank, Rule: "plan/" + pn, Scope: compiled.Routes, Match: plans.PlanMatch(pn), Key: plans.PlanKey,
				Throttle: plans.Throttle{Rate: pl.Rate, Burst: pl.Burst}, What: "plans." + pn}, path)
		}
		if pl.Quota != "" {
			qpath := append(path, "quota")
			// A quota is a calendar period: 500000/d is the calendar day
			// here, and 1000/24h an error (portero.ParseQuota).
			if l, err := portero.ParseQuota(pl.Quota); err != nil {
				m.p.errorf(qpath, "%s: %s", pl.Quota, limitMessage(err, pl.Quota))
			} else if rn := "plan/" + pn + "/quota"; m.name(rn, qpath) {
				m.Quota(rn, pn, l)
			}
		}
	}
}

// apiKeys reads api_keys and its file.
func (m *model) apiKeys(f *File) {
	p, g, ak := m.p, &m.Model, f.APIKeys
	if ak.Header == "" && ak.File == "" && len(ak.Keys) == 0 {
		if len(f.Plans) > 0 {
			p.errorf(at("plans"), "plans are chosen by API key: add api_keys (keys or a keys file)")
		}
		return
	}
	g.KeyHeader = ak.Header
	if g.KeyHeader == "" {
		g.KeyHeader = plans.DefaultKeyHeader
	} else if !clientip.ValidHeaderName(ak.Header) {
		p.errorf(at("api_keys", "header"), "%q: not a header name", ak.Header)
	}
	if len(f.Plans) == 0 {
		p.errorf(at("api_keys"), "API keys map to usage plans: define plans")
	}
	g.Keys = apikey.NewSet(len(ak.Keys))
	for i, k := range ak.Keys {
		if field, err := m.AddKey(k); err != nil {
			p.errorf(at("api_keys", "keys", i, field), "%v", err)
		}
	}
	if ak.File != "" {
		path := ak.File
		if !filepath.IsAbs(path) && p.file != DefaultName {
			path = filepath.Join(filepath.Dir(p.file), path)
		}
		if abs, err := filepath.Abs(path); err == nil {
			path = abs
		}
		g.KeysFile = path
		errs, err := apikey.ReadFile(path, m.AddKey)
		if err != nil {
			p.errorf(at("api_keys", "file"), "%v", err)
		}
		p.errs = append(p.errs, errs...)
	}
}

// rateRule compiles a look-back rule.
func (p *parser) rateRule(rr RateRule, path []any, c *Config) (policy.Rule, bool) {
	ok := true
	bad := func(field string, format string, args ...any) {
		p.errorf(append(path, field), format, args...)
		ok = false
	}
	r := policy.Rule{Name: rr.Name, Algorithm: portero.SlidingLog}
	if err := policy.ValidName(rr.Name); err != nil {
		bad("name", "%v", err)
	}
	window, err := policy.ParseLookBack(rr.Window)
	if err != nil {
		bad("window", "%v", err)
		window = policy.DefaultLookBack
	}
	if r.Limit, err = policy.LookBackLimit(rr.Limit, window); err != nil {
		bad("limit", "%v", err)
	}
	if rr.Algorithm != "" {
		a, err := portero.ParseAlgorithm(rr.Algorithm)
		if err != nil {
			bad("algorithm", "%v", err)
		}
		r.Algorithm = a
	}
	key := ""
	switch rr.Aggregate {
	case "", "ip":
		key = "ip"
	case "forwarded_ip":
		if len(c.ClientIP.TrustedProxies) == 0 {
			bad("aggregate", "forwarded_ip reads the client_ip header from trusted proxies only: set client_ip.trusted_proxies")
		}
		switch rr.ForwardedIP.Fallback {
		case "", "no_match": // without a forwarded address the rule does not apply
			key = "forwarded-ip"
		case "match": // without one, counted under the connection's address (what ip is then)
			key = "ip"
		default:
			p.errorf(append(path, "forwarded_ip", "fallback"), "%q: want match or no_match", rr.ForwardedIP.Fallback)
			ok = false
		}
	case "custom":
		if len(rr.Keys) == 0 || len(rr.Keys) > MaxRateKeys {
			bad("keys", "%d keys: want 1 to %d (ip, forwarded-ip, method, path, header:NAME, cookie:NAME, query:NAME)", len(rr.Keys), MaxRateKeys)
		}
		key = strings.Join(rr.Keys, "+")
	case "constant":
		if !matchGiven(rr.ScopeDown) {
			bad("scope_down", "required with aggregate constant: one counter for the requests the scope-down selects")
		}
		key = "global"
	default:
		bad("aggregate", "%q: want ip, forwarded_ip, custom or constant", rr.Aggregate)
	}
	if rr.Aggregate != "custom" && len(rr.Keys) > 0 {
		bad("keys", "only with aggregate: custom")
	}
	if rr.Aggregate != "forwarded_ip" && rr.ForwardedIP != (ForwardedIP{}) {
		bad("forwarded_ip", "only with aggregate: forwarded_ip")
	}
	if key != "" && ok {
		k, err := policy.ParseKey(key)
		if err != nil {
			bad("keys", "%v", err)
		} else {
			r.Key = k
		}
	}
	if matchGiven(rr.ScopeDown) {
		r.Match = p.match(rr.ScopeDown, append(path, "scope_down"))
	}
	switch rr.Action {
	case "", "block":
	case "count":
		r.Mode = policy.Shadow
	default:
		bad("action", "%q: want block (refuse with 429) or count (count and report, never refuse)", rr.Action)
	}
	return r, ok && p.checkRule(r, path)
}

// matchGiven reports whether m selects anything less than every request.
func matchGiven(m Match) bool {
	return len(m.Methods) > 0 || m.Path != "" || m.Host != "" || len(m.Headers) > 0 || len(m.Addresses) > 0 || len(m.NotAddresses) > 0
}

// within returns m narrowed to stage: the stage's host, and its path when m
// gives none, methods and headers likewise.
func within(m, stage Match) Match {
	if m.Host == "" {
		m.Host = stage.Host
	}
	if m.Path == "" {
		m.Path = stage.Path
	}
	if len(m.Methods) == 0 {
		m.Methods = stage.Methods
	}
	if len(stage.Headers) > 0 {
		h := maps.Clone(stage.Headers)
		maps.Copy(h, m.Headers)
		m.Headers = h
	}
	if len(m.Addresses) == 0 {
		m.Addresses = stage.Addresses
	}
	if len(m.NotAddresses) == 0 {
		m.NotAddresses = stage.NotAddresses
	}
	return m
}
