package config

import (
	"fmt"
	"maps"
	"math"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/clientip"
	"github.com/portero-rl/portero/internal/apikey"
	"github.com/portero-rl/portero/internal/config/fileerr"
	"github.com/portero-rl/portero/policy"
)

// The API-gateway model, as AWS API Gateway usage plans and AWS WAF
// rate-based rules describe an API (docs/plans.md): levels applied in order
// (global, stage or host, route and method, the client's plan), each
// bounded by the one above; usage plans (a throttle, a quota, the routes
// they cover) that API keys map to; look-back rules per client address;
// address lists. Each compiles into ordinary policy rules ahead of the
// file's own rules, decided by the one engine like any other.

// Throttle is a rate and a burst, the two knobs of a token bucket: Rate
// requests per second sustained, Burst requests at once (0 means the rate,
// rounded up: burst = rate is the honest start).
type Throttle struct {
	Rate  float64 `yaml:"rate,omitempty"`
	Burst int64   `yaml:"burst,omitempty"`
}

// Level is a stage (or host) or a route-and-method throttle. A method
// level may name the stage it belongs to (Stage): its match is then the
// stage's and its own together.
type Level struct {
	Name  string  `yaml:"name"`
	Stage string  `yaml:"stage,omitempty"`
	Match Match   `yaml:"match,omitempty"`
	Rate  float64 `yaml:"rate,omitempty"`
	Burst int64   `yaml:"burst,omitempty"`
}

// Levels are the shared throttles, applied in order before the plans.
type Levels struct {
	Global  Throttle `yaml:"global,omitempty"`
	Stages  []Level  `yaml:"stages,omitempty"`
	Methods []Level  `yaml:"methods,omitempty"`
}

// Plan is a usage plan: a throttle per API key, a quota per API key, and
// the routes (and methods) it covers.
type Plan struct {
	Rate   float64 `yaml:"rate,omitempty"`
	Burst  int64   `yaml:"burst,omitempty"`
	Quota  string  `yaml:"quota,omitempty"`
	Routes []Match `yaml:"routes,omitempty"`
}

// APIKey is one key, stored hashed.
type APIKey struct {
	ID     string `yaml:"id"`
	Plan   string `yaml:"plan"`
	SHA256 string `yaml:"sha256"`
}

// APIKeys says where requests carry their key and which keys exist.
type APIKeys struct {
	Header string   `yaml:"header,omitempty"`
	File   string   `yaml:"file,omitempty"`
	Keys   []APIKey `yaml:"keys,omitempty"`
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

// ForwardedIP is what a rule aggregated by forwarded IP does when the
// request has no forwarded address: match (count it under the
// connection's address) or no_match (the rule does not apply).
type ForwardedIP struct {
	Fallback string `yaml:"fallback,omitempty"`
}

// GatewayModel is the validated API-gateway model of a configuration.
type GatewayModel struct {
	// Keys maps hashed API keys to callers; nil without api_keys.
	Keys *apikey.Set
	// KeyHeader is the request header carrying the key (X-API-Key).
	KeyHeader string
	// KeysFile is the absolute path of api_keys.file, watched for
	// changes; empty for none.
	KeysFile string
	// Plans by name: the routes each covers (empty: every route).
	Plans map[string]*PlanConfig
	// Levels names the level of each rule the model compiled (global,
	// stage, method, plan, quota, rate-rule), by rule name.
	Levels map[string]string
	// LimitsPath is where GET answers the caller's limits (/v1/limits);
	// empty when off.
	LimitsPath string
}

// PlanConfig is a validated usage plan.
type PlanConfig struct {
	Name   string
	Routes []policy.Match
}

// Covers reports whether the plan covers req.
func (pc *PlanConfig) Covers(req *policy.Request) bool {
	if len(pc.Routes) == 0 {
		return true
	}
	for i := range pc.Routes {
		if pc.Routes[i].Matches(req) {
			return true
		}
	}
	return false
}

// Defaults of the model.
const (
	DefaultKeyHeader      = "X-API-Key"
	DefaultLimitsEndpoint = "/v1/limits"
	// DefaultRateWindow is WAF's default evaluation window.
	DefaultRateWindow = policy.DefaultLookBack
	// MinRateLimit is WAF's smallest limit per window.
	MinRateLimit = policy.MinLookBackLimit
	// MaxRateKeys is WAF's most custom aggregation keys.
	MaxRateKeys = 5
)

// Identity names under which the gateway passes the caller a key
// identifies to the rules.
const (
	IdentityAPIKey = "api_key"
	IdentityPlan   = "plan"
)

// addressLists reads address_lists into p.lists.
func (p *parser) addressLists(f *File) {
	p.lists = map[string][]netip.Prefix{}
	names := sortedKeys(f.AddressLists)
	for _, name := range names {
		path := at("address_lists", name)
		if err := policy.ValidName(name); err != nil {
			p.errorf(path, "%v", err)
			continue
		}
		var out []netip.Prefix
		for i, s := range f.AddressLists[name] {
			pfx, err := clientip.ParsePrefixes([]string{s})
			if err != nil {
				p.errorf(append(path, i), "%v", err)
				continue
			}
			out = append(out, pfx...)
		}
		p.lists[name] = out
	}
}

// addresses resolves a match's addresses: list names and CIDRs.
func (p *parser) addresses(items []string, path []any) *clientip.AddrSet {
	if len(items) == 0 {
		return nil
	}
	var all []netip.Prefix
	for i, s := range items {
		if l, ok := p.lists[s]; ok {
			all = append(all, l...)
			continue
		}
		pfx, err := clientip.ParsePrefixes([]string{s})
		if err != nil {
			have := strings.Join(sortedKeys(p.lists), ", ")
			if have == "" {
				have = "none under address_lists"
			}
			p.errorf(append(path, i), "%q: neither an address list (have %s) nor an address or CIDR", s, have)
			continue
		}
		all = append(all, pfx...)
	}
	set, err := clientip.NewAddrSet(all)
	if err != nil {
		p.errorf(path, "%v", err)
		return nil
	}
	return set
}

// sortedKeys returns m's keys in order, for messages and a stable walk.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// level is one throttle of the order, for the check that no lower level
// promises more than the level above it.
type level struct {
	rank  int // 0 global, 1 stage, 2 method, 3 plan
	what  string
	path  []any
	match []policy.Match // empty: everything
	rate  float64
	burst int64
}

// contains reports whether every request o applies to, l applies to as
// well: then o lies under l, and must not promise more.
func (l *level) contains(o *level) bool {
	if len(l.match) == 0 {
		return true
	}
	if len(o.match) == 0 {
		return false
	}
	for j := range o.match {
		in := false
		for i := range l.match {
			if l.match[i].Contains(&o.match[j]) {
				in = true
				break
			}
		}
		if !in {
			return false
		}
	}
	return true
}

// throttleLimit is a token bucket of rate per second and burst (0: the
// rate rounded up).
func throttleLimit(rate float64, burst int64) (portero.Limit, int64, error) {
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

// gatewayModel compiles the model into rules put before the file's own,
// and fills c.Gateway. seen holds the file's rule names.
func (p *parser) gatewayModel(f *File, c *Config, rules []policy.Rule, seen map[string]int) []policy.Rule {
	g := &c.Gateway
	g.Levels = map[string]string{}
	g.Plans = map[string]*PlanConfig{}
	var out []policy.Rule
	var levels []*level
	name := func(n string, path []any) bool {
		if j, dup := seen[n]; dup {
			p.errorf(path, "compiles to rule %q, a name rules[%d] already uses", n, j)
			return false
		}
		seen[n] = -1
		return true
	}
	add := func(rank int, label, rname string, path []any, m []policy.Match, match policy.Match, key string, rate float64, burst int64) {
		lim, b, err := throttleLimit(rate, burst)
		if err != nil {
			p.errorf(path, "%v", err)
			return
		}
		if !name(rname, path) {
			return
		}
		levels = append(levels, &level{rank: rank, what: label, path: path, match: m, rate: rate, burst: b})
		out = append(out, policy.Rule{Name: rname, Match: match, Key: policy.MustParseKey(key), Algorithm: portero.TokenBucket, Limit: lim})
		g.Levels[rname] = [...]string{"global", "stage", "method", "plan"}[rank]
	}

	// levels
	if t := f.Levels.Global; t != (Throttle{}) {
		add(0, "levels.global", "global", at("levels", "global"), nil, policy.Match{}, "global", t.Rate, t.Burst)
	}
	stages := map[string]Match{}
	for _, l := range f.Levels.Stages {
		stages[l.Name] = l.Match
	}
	for k, list := range [][]Level{f.Levels.Stages, f.Levels.Methods} {
		section := [...]string{"stages", "methods"}[k]
		for i, l := range list {
			path := at("levels", section, i)
			if err := policy.ValidName(l.Name); err != nil {
				p.errorf(append(path, "name"), "%v", err)
				continue
			}
			if l.Stage != "" {
				sm, ok := stages[l.Stage]
				if k == 0 || !ok {
					p.errorf(append(path, "stage"), "%q: a method level names one of levels.stages (have %s)", l.Stage, strings.Join(sortedKeys(stages), ", "))
					continue
				}
				l.Match = within(l.Match, sm)
			}
			m := p.match(l.Match, append(path, "match"))
			label := fmt.Sprintf("levels.%s[%d] (%s)", section, i, l.Name)
			add(k+1, label, [...]string{"stage/", "method/"}[k]+l.Name, path, []policy.Match{m}, m, "global", l.Rate, l.Burst)
		}
	}

	// plans
	for _, pn := range sortedKeys(f.Plans) {
		pl := f.Plans[pn]
		path := at("plans", pn)
		if err := policy.ValidName(pn); err != nil {
			p.errorf(path, "%v", err)
			continue
		}
		pc := &PlanConfig{Name: pn}
		for i, m := range pl.Routes {
			pc.Routes = append(pc.Routes, p.match(m, append(path, "routes", i)))
		}
		g.Plans[pn] = pc
		match := policy.Match{Identity: map[string]string{IdentityPlan: pn}}
		key := "identity:" + IdentityAPIKey
		if pl.Rate == 0 && pl.Quota == "" {
			p.errorf(path, "a plan needs a throttle (rate, burst), a quota, or both")
			continue
		}
		if pl.Rate != 0 || pl.Burst != 0 {
			add(3, "plans."+pn, "plan/"+pn, path, pc.Routes, match, key, pl.Rate, pl.Burst)
		}
		if pl.Quota != "" {
			qpath := append(path, "quota")
			// A quota is a calendar period: 500000/d is the calendar day
			// here, and 1000/24h an error (portero.ParseQuota).
			if l, err := portero.ParseQuota(pl.Quota); err != nil {
				p.errorf(qpath, "%s: %s", pl.Quota, limitMessage(err, pl.Quota))
			} else if rn := "plan/" + pn + "/quota"; name(rn, qpath) {
				out = append(out, policy.Rule{Name: rn, Match: match, Key: policy.MustParseKey(key), Algorithm: portero.FixedWindow, Limit: l})
				g.Levels[rn] = "quota"
			}
		}
	}
	p.checkLevels(levels)
	p.apiKeys(f, c)

	// rate rules
	for i, rr := range f.RateRules {
		if r, ok := p.rateRule(rr, at("rate_rules", i), c); ok && name(r.Name, at("rate_rules", i, "name")) {
			out = append(out, r)
			g.Levels[r.Name] = "rate-rule"
		}
	}

	// GET /v1/limits
	switch e := f.LimitsEndpoint; {
	case e == "":
		g.LimitsPath = DefaultLimitsEndpoint
	case e == "off":
	case !strings.HasPrefix(e, "/") || strings.ContainsAny(e, "?# "):
		p.errorf(at("limits_endpoint"), "%q: want a path such as /v1/limits, or off", e)
	default:
		g.LimitsPath = e
	}
	return append(out, rules...)
}

// checkLevels refuses a lower level that promises more than a level above
// it whose scope it shares: the seed's "each level is bounded by the one
// above".
func (p *parser) checkLevels(levels []*level) {
	for _, lo := range levels {
		for _, hi := range levels {
			if hi.rank >= lo.rank || !hi.contains(lo) {
				continue
			}
			n := p.node(hi.path...)
			where := fileerr.Format(p.file, n.Line, n.Column, "", "")
			where = strings.TrimSuffix(strings.TrimSuffix(where, " "), ":")
			if lo.rate > hi.rate {
				p.errorf(lo.path, "rate %s/s is more than %s allows (%s/s, %s): a lower level must not promise more than the level above it",
					num(lo.rate), hi.what, num(hi.rate), where)
			}
			if lo.burst > hi.burst {
				p.errorf(lo.path, "burst %d is more than %s allows (%d, %s): a lower level must not promise more than the level above it",
					lo.burst, hi.what, hi.burst, where)
			}
		}
	}
}

func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// apiKeys reads api_keys and its file.
func (p *parser) apiKeys(f *File, c *Config) {
	g := &c.Gateway
	ak := f.APIKeys
	if ak.Header == "" && ak.File == "" && len(ak.Keys) == 0 {
		if len(f.Plans) > 0 {
			p.errorf(at("plans"), "plans are chosen by API key: add api_keys (keys or a keys file)")
		}
		return
	}
	g.KeyHeader = ak.Header
	if g.KeyHeader == "" {
		g.KeyHeader = DefaultKeyHeader
	} else if !clientip.ValidHeaderName(ak.Header) {
		p.errorf(at("api_keys", "header"), "%q: not a header name", ak.Header)
	}
	if len(f.Plans) == 0 {
		p.errorf(at("api_keys"), "API keys map to usage plans: define plans")
	}
	set := apikey.NewSet(len(ak.Keys))
	ids := map[string]string{}
	for i, k := range ak.Keys {
		if field, err := addKey(set, ids, g.Plans, k); err != nil {
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
		errs, err := readKeysFile(path, func(k APIKey) (string, error) { return addKey(set, ids, g.Plans, k) })
		if err != nil {
			p.errorf(at("api_keys", "file"), "%v", err)
		}
		p.errs = append(p.errs, errs...)
	}
	g.Keys = set
}

// addKey checks k and adds it to set, or returns the field it is wrong in
// and why; ids maps each ID to its plan (one caller, one plan). What set
// keeps of it is its ID and the plan's own name, so that a million keys of
// a few plans hold a few plan names.
func addKey(set *apikey.Set, ids map[string]string, plans map[string]*PlanConfig, k APIKey) (field string, err error) {
	if err := policy.ValidName(k.ID); err != nil {
		return "id", err
	}
	pc, ok := plans[k.Plan]
	if !ok {
		return "plan", fmt.Errorf("%q: no such plan (have %s)", k.Plan, strings.Join(sortedKeys(plans), ", "))
	}
	if prev, ok := ids[k.ID]; ok && prev != pc.Name {
		return "plan", fmt.Errorf("key %s is in plan %s elsewhere: one caller, one plan", k.ID, prev)
	}
	h, err := apikey.ParseHash(k.SHA256)
	if err != nil {
		return "sha256", err
	}
	if err := set.Add(h, apikey.Key{ID: k.ID, Plan: pc.Name}); err != nil {
		return "sha256", err
	}
	ids[k.ID] = pc.Name
	return "", nil
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
		window = DefaultRateWindow
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
	if ok {
		if _, err := policy.New([]policy.Rule{r}, policy.Options{}); err != nil {
			_, msg, _ := strings.Cut(err.Error(), "): ")
			p.errorf(path, "%s", msg)
			ok = false
		}
	}
	return r, ok
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
		h := map[string]string{}
		for k, v := range stage.Headers {
			h[k] = v
		}
		for k, v := range m.Headers {
			h[k] = v
		}
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
