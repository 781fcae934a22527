package rlsstats

import (
	"errors"
	"math"
	"regexp"
	"strings"
	"time"

	gostats "github.com/lyft/gostats"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/engine"
)

// limitStats are one stat key's counters (envoyproxy/ratelimit's
// RateLimitStats; gostats sends no counter at 0).
type limitStats struct {
	totalHits, overLimit, nearLimit, withinLimit, shadowMode gostats.Counter
	overLocalCache                                           gostats.Counter
}

// limitKey is what a configured limit is counted under: its stats, or,
// when its key holds the request's values (detailed_metric,
// value_to_metric), dynamic and the stats of the plain key for when
// MaxKeys is reached.
type limitKey struct {
	plain   *limitStats
	dynamic bool
}

// Observer returns the descriptor.Observer of one door: grpc counts the
// calls too (ratelimit_server.ShouldRateLimit.total_requests and
// response_time, its gRPC interceptor's), which /json and Portero's HTTP
// API do not.
func (s *Stats) Observer(grpc bool) descriptor.Observer { return &observer{s: s, grpc: grpc} }

type observer struct {
	s    *Stats
	grpc bool
}

// Observe counts one call as envoyproxy/ratelimit's service and limiter
// do.
func (o *observer) Observe(req *descriptor.Request, p *descriptor.Plan, v *engine.Verdict, took time.Duration, err error) {
	s := o.s
	if o.grpc {
		s.server.totalRequests.Inc()
		s.server.responseTime.AddValue(float64(took.Milliseconds()))
	}
	cfg := s.opts.Limits()
	if err != nil {
		switch {
		case isRequestError(err), cfg == nil:
			// Its service errors: a request it refuses, no configuration.
			s.service.serviceError.Inc()
			return
		case !errors.Is(err, portero.ErrStoreUnavailable):
			return // the caller gave up, or the engine refused a hit it cannot count
		}
	}
	if cfg != nil && cfg.Domain(req.Domain) == nil {
		// Its config looks each descriptor up, counting each time.
		s.notFound(req.Domain).Add(uint64(len(req.Descriptors)))
		return
	}
	storeFailed := err != nil || v.Degraded != nil
	for d := range p.Descriptors {
		l := p.Descriptors[d].Limit
		if l == nil || l.Unlimited {
			continue
		}
		ls := s.statsOf(cfg, req, d, l)
		hits := hitsOf(req, d)
		ls.totalHits.Add(hits)
		if h := p.Descriptors[d].Hit; !storeFailed && h >= 0 && h < len(v.Results) && v.Results[h].Failure == "" {
			s.count(ls, l, &v.Results[h], hits)
		}
	}
	if storeFailed {
		s.service.redisError.Inc()
		return
	}
	if v.Shadowed { // SHADOW_MODE let a refused request through
		s.service.globalShadowMode.Inc()
	}
}

func isRequestError(err error) bool {
	var re *descriptor.RequestError
	return errors.As(err, &re)
}

// hitsOf is envoyproxy/ratelimit's hits addend of descriptor d: its own
// hits_addend when set (0 included), else the request's, 0 meaning 1.
func hitsOf(req *descriptor.Request, d int) uint64 {
	if h := req.Descriptors[d].Hits; h != nil {
		return *h
	}
	return uint64(max(req.Hits, 1))
}

// count splits hits into within, near and over the limit. Counted on a
// plain counter as envoyproxy/ratelimit counts (CountEach), the split is
// its limiter's, from the counter's value before and after the hits
// (src/limiter/base_limiter.go); otherwise the hits go whole to the
// engine's outcome.
func (s *Stats) count(ls *limitStats, l *descriptor.Limit, res *engine.Result, hits uint64) {
	r := l.Rule
	if res.LocalCache {
		// Refused by the over-limit cache: every hit over the limit.
		ls.overLimit.Add(hits)
		ls.overLocalCache.Add(hits)
		if res.Rule.Shadow {
			ls.shadowMode.Add(hits)
		}
		return
	}
	if s.opts.CountEach && r != nil && r.Algorithm == portero.FixedWindow && !r.Limit.IsCalendar() {
		limit := uint64(l.RequestsPerUnit)
		after := res.Counter
		before := after - hits // wraps as there when nothing was added
		near := uint64(math.Floor(float64(float32(limit) * s.near)))
		if after > limit {
			over := after - limit
			if before >= limit {
				over = hits
			} else {
				ls.nearLimit.Add(limit - max(near, before))
			}
			ls.overLimit.Add(over)
			if r.Shadow {
				ls.shadowMode.Add(over)
			}
			return
		}
		if after > near {
			if before >= near {
				ls.nearLimit.Add(hits)
			} else {
				ls.nearLimit.Add(after - near)
			}
		}
		ls.withinLimit.Add(hits)
		return
	}
	switch res.Outcome {
	case engine.Allowed, engine.CheckOnly:
		ls.withinLimit.Add(hits)
	case engine.NearLimit:
		ls.withinLimit.Add(hits)
		ls.nearLimit.Add(hits)
	case engine.Refused, engine.CanNeverPass:
		ls.overLimit.Add(hits)
	case engine.ShadowRefused:
		ls.overLimit.Add(hits)
		ls.shadowMode.Add(hits)
	}
}

// statsOf returns the counters descriptor d of req is counted under: its
// limit's key as envoyproxy/ratelimit's config names it for this request.
func (s *Stats) statsOf(cfg *descriptor.Config, req *descriptor.Request, d int, l *descriptor.Limit) *limitStats {
	entries := req.Descriptors[d].Entries
	if req.Descriptors[d].Override != nil {
		// Overrides are counted under the request's entries.
		return s.limitStats(req.Domain+"."+descriptor.Key(entries), l, true)
	}
	var k *limitKey
	if v, ok := s.byLimit.Load(l); ok {
		k = v.(*limitKey)
	} else {
		// The path to a limit is the same for every request it matches:
		// whether its key holds values is found once.
		k = &limitKey{plain: s.limitStats(l.FullKey, l, false), dynamic: l.DetailedMetric}
		for _, n := range nodePath(cfg.Domain(req.Domain), entries) {
			k.dynamic = k.dynamic || n != nil && n.ValueToMetric
		}
		s.byLimit.Store(l, k)
	}
	if !k.dynamic {
		return k.plain
	}
	dom := cfg.Domain(req.Domain)
	if dom == nil {
		return k.plain // the configuration changed under the call
	}
	if l.DetailedMetric {
		return s.limitStats(detailedKey(req.Domain, entries, dom.MatchEnvoyproxy(entries)), l, true)
	}
	return s.limitStats(valueToMetricKey(req.Domain, entries, nodePath(dom, entries), dom.MatchEnvoyproxy(entries)), l, true)
}

// nodePath returns the node each entry matched, level by level.
func nodePath(dom *descriptor.Domain, entries []descriptor.Entry) []*descriptor.Node {
	if dom == nil {
		return nil
	}
	path := make([]*descriptor.Node, len(entries))
	for i := range entries {
		path[i] = dom.MatchEnvoyproxy(entries[:i+1]).Node
	}
	return path
}

// detailedKey is envoyproxy/ratelimit's detailed_metric key: the domain
// and key_value per entry (the '_' even for an empty value), an entry
// matched by a shared wildcard giving its pattern instead, the other
// entries then key alone when their value is empty.
func detailedKey(domain string, entries []descriptor.Entry, m descriptor.Match) string {
	shared := false
	for i := range entries {
		if _, ok := m.Shared(i); ok {
			shared = true
		}
	}
	var b strings.Builder
	b.WriteString(domain)
	for i, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		if p, ok := m.Shared(i); ok {
			b.WriteString("_" + p)
		} else if !shared || e.Value != "" {
			b.WriteString("_" + e.Value)
		}
	}
	return b.String()
}

// valueToMetricKey is envoyproxy/ratelimit's key when a node on the path
// has value_to_metric: each level's key with the request's value where
// that node asks for it (and where it matched the value exactly), the
// pattern of a wildcard otherwise.
func valueToMetricKey(domain string, entries []descriptor.Entry, path []*descriptor.Node, m descriptor.Match) string {
	var b strings.Builder
	b.WriteString(domain)
	for i, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		n := path[i]
		if n == nil {
			continue
		}
		var v string
		switch {
		case n.AddressText != "" || strings.Contains(n.Value, "*"):
			if p, ok := m.Shared(i); ok {
				v = p
			} else if n.ValueToMetric {
				v = e.Value
			} else {
				v = strings.TrimPrefix(n.Composite(), e.Key+"_")
			}
		case n.Value != "" || n.ValueToMetric:
			v = e.Value
		}
		if v != "" {
			b.WriteString("_" + v)
		}
	}
	return b.String()
}

// limitStats returns the counters of key (sanitized here). A key made of
// the request's values (dynamic) beyond MaxKeys is counted under l's
// configured key instead.
func (s *Stats) limitStats(key string, l *descriptor.Limit, dynamic bool) *limitStats {
	key = sanitize(key)
	if v, ok := s.byName.Load(key); ok {
		return v.(*limitStats)
	}
	if dynamic && !s.admit() {
		return s.limitStats(l.FullKey, l, false)
	}
	sc := s.rateLimit
	ls := &limitStats{
		totalHits: sc.NewCounter(key + ".total_hits"), overLimit: sc.NewCounter(key + ".over_limit"),
		nearLimit: sc.NewCounter(key + ".near_limit"), withinLimit: sc.NewCounter(key + ".within_limit"),
		shadowMode: sc.NewCounter(key + ".shadow_mode"), overLocalCache: sc.NewCounter(key + ".over_limit_with_local_cache"),
	}
	v, loaded := s.byName.LoadOrStore(key, ls)
	if loaded && dynamic {
		s.nKeys.Add(-1)
	}
	return v.(*limitStats)
}

// notFound returns domain's domain_not_found counter, or one that
// counts nothing past MaxKeys.
func (s *Stats) notFound(domain string) gostats.Counter {
	if v, ok := s.notFounds.Load(domain); ok {
		return v.(gostats.Counter)
	}
	if !s.admit() {
		return nopCounter{}
	}
	v, loaded := s.notFounds.LoadOrStore(domain, s.rateLimit.NewCounter(sanitize(domain)+".domain_not_found"))
	if loaded {
		s.nKeys.Add(-1)
	}
	return v.(gostats.Counter)
}

// admit takes one of the MaxKeys places of the keys requests add.
func (s *Stats) admit() bool {
	if s.nKeys.Add(1) > int64(s.opts.MaxKeys) {
		s.nKeys.Add(-1)
		return false
	}
	return true
}

// nopCounter counts nothing.
type nopCounter struct{ gostats.Counter }

func (nopCounter) Add(uint64) {}

// ipv4 is envoyproxy/ratelimit's: the dots of an address in a stat name
// become '_', as ':' and '|' do.
var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

var statReplacer = strings.NewReplacer(":", "_", "|", "_")

// sanitize is envoyproxy/ratelimit's SanitizeStatName.
func sanitize(s string) string {
	s = statReplacer.Replace(s)
	if !strings.ContainsRune(s, '.') || !ipv4.MatchString(s) {
		return s
	}
	return ipv4.ReplaceAllStringFunc(s, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
}
