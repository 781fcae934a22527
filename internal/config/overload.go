package config

import (
	"strings"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/overload"
	"github.com/portero-rl/portero/policy"
)

// The overload controls beside the rate limits (docs/overload.md): per rule
// a concurrency limit (with a queue to wait for its slots), a priority for
// load shedding, and a shape for a leaky-queue rule; for the whole service
// the overload section, an overload.Gate.

// Concurrency is a rule's concurrency limit: at most Max requests in
// flight per key, each holding a lease of TTL (renewed while it runs).
type Concurrency struct {
	Max int    `yaml:"max,omitempty"`
	TTL string `yaml:"ttl,omitempty"`
}

// Queue is a bounded queue with deadlines: for a rule, the requests its
// concurrency limit refuses waiting for a slot of their key; for the
// overload section, the requests waiting for a slot of the service.
type Queue struct {
	Size    int    `yaml:"size,omitempty"`
	Timeout string `yaml:"timeout,omitempty"`
	Order   string `yaml:"order,omitempty"`
}

// Shape is how a leaky-queue rule holds what it admits: the first Delay
// places pass at once, and no request is held longer than MaxDelay.
type Shape struct {
	Delay    int64  `yaml:"delay,omitempty"`
	MaxDelay string `yaml:"max_delay,omitempty"`
}

// Overload is the overload section: load shedding for the whole service.
type Overload struct {
	MaxInFlight      int      `yaml:"max_in_flight,omitempty"`
	Reserve          *Reserve `yaml:"reserve,omitempty"`
	Queue            *Queue   `yaml:"queue,omitempty"`
	Shedding         string   `yaml:"shedding,omitempty"`
	Tenant           string   `yaml:"tenant,omitempty"`
	Deadline         string   `yaml:"deadline,omitempty"`
	ServiceTime      string   `yaml:"service_time,omitempty"`
	QueueDelayTarget string   `yaml:"queue_delay_target,omitempty"`
	LatencyTarget    string   `yaml:"latency_target,omitempty"`
	RetryAfter       string   `yaml:"retry_after,omitempty"`
}

// Reserve holds slots back for the more important classes.
type Reserve struct {
	Critical int `yaml:"critical,omitempty"`
	Default  int `yaml:"default,omitempty"`
}

// OverloadConfig is a validated overload section.
type OverloadConfig struct {
	// Gate is the configuration of the service's overload.Gate.
	Gate overload.Config
	// Tenant names a request's tenant for fair shedding; zero when not
	// Fair.
	Tenant policy.Key
	// Deadline is how long clients wait for an answer: a request's
	// deadline is its arrival plus Deadline (httplimit.ShedConfig.Timeout);
	// 0 means only its context's.
	Deadline time.Duration
}

// PriorityRule gives the requests a rule's match selects its priority.
type PriorityRule struct {
	Rule     string
	Match    policy.Match
	Priority overload.Priority
}

// ruleKind is what a rule is, by the sections it has.
type ruleKind int

const (
	rateLimited  ruleKind = iota // a limit
	concurrency                  // a concurrency section instead of a limit
	priorityOnly                 // only a priority: no key, nothing counted
)

// overloadSections reads rule r's concurrency, queue, shape and priority
// into pr and c, reports what is wrong with them, and says what kind of
// rule r is and whether its sections are sound.
func (p *parser) overloadSections(c *Config, r Rule, pr *policy.Rule, path []any) (kind ruleKind, ok bool) {
	ok = true
	bad := func(field []any, format string, args ...any) {
		p.errorf(field, format, args...)
		ok = false
	}
	kind = rateLimited
	switch {
	case r.Concurrency != nil:
		kind = concurrency
	case r.Priority != "" && r.Limit == "" && r.Key == "" && r.Algorithm == "" && r.Cost == "" && r.Queue == nil && r.Shape == nil &&
		len(r.CountResponses) == 0 && r.Reserve == 0:
		kind = priorityOnly
	}
	if r.Priority != "" {
		pp := append(path, "priority")
		prio, err := overload.ParsePriority(r.Priority)
		switch {
		case err != nil:
			bad(pp, "%q: want critical, default or sheddable", r.Priority)
		case c.File.Overload == nil && c.File.Server.MaxInFlight <= 0:
			bad(pp, "a priority is for load shedding, which is off: add an overload section (overload.max_in_flight)")
		default:
			c.Priorities = append(c.Priorities, PriorityRule{Rule: r.Name, Match: pr.Match, Priority: prio})
		}
	}
	if kind == concurrency {
		cp := append(path, "concurrency")
		for _, f := range []struct {
			given bool
			name  string
		}{{r.Limit != "", "limit"}, {r.Algorithm != "", "algorithm"}, {r.Cost != "", "cost"}} {
			if f.given {
				bad(append(path, f.name), "a concurrency rule counts requests in flight and takes no %s: make a second rule for the rate", f.name)
			}
		}
		if r.Concurrency.Max <= 0 {
			bad(append(cp, "max"), "%d: want the most requests in flight per key, at least 1", r.Concurrency.Max)
		}
		before := p.problems
		ttl := p.duration(r.Concurrency.TTL, 0, append(cp, "ttl"))
		if p.problems == before && r.Concurrency.TTL != "" && (ttl < portero.MinLeaseTTL || ttl > 24*time.Hour) {
			bad(append(cp, "ttl"), "%v: want a lease lifetime from %v to 24h (default %v)", ttl, portero.MinLeaseTTL, portero.DefaultLeaseTTL)
		}
		pr.Concurrency = portero.ConcurrencyRule{Max: int64(r.Concurrency.Max), TTL: ttl}
	}
	if r.Queue != nil {
		qp := append(path, "queue")
		if kind != concurrency {
			bad(qp, "a queue waits for a concurrency slot: give the rule a concurrency section (a rate rule waits by shaping: algorithm leaky-queue and a shape)")
		} else if q, qok := p.queue(*r.Queue, qp, true); !qok {
			ok = false
		} else {
			if c.Queues == nil {
				c.Queues = map[string]overload.Queue{}
			}
			c.Queues[r.Name] = q
		}
	}
	if r.Shape != nil {
		sp := append(path, "shape")
		before := p.problems
		if r.Algorithm != string(portero.LeakyQueue) {
			bad(sp, "only a leaky-queue rule shapes (algorithm: leaky-queue); other algorithms refuse what they do not admit")
		}
		if r.Shape.Delay < 0 {
			bad(append(sp, "delay"), "%d: want how many places pass at once, zero or more", r.Shape.Delay)
		}
		maxDelay := p.duration(r.Shape.MaxDelay, 0, append(sp, "max_delay"))
		if p.problems == before && ok {
			if c.Shapes == nil {
				c.Shapes = map[string]overload.Shape{}
			}
			c.Shapes[r.Name] = overload.Shape{Delay: r.Shape.Delay, MaxDelay: maxDelay}
		}
	}
	for _, f := range []string{"concurrency", "queue", "shape", "priority"} {
		if p.reported(fieldName(append(path, f))) {
			ok = false // the walker found it malformed
		}
	}
	return kind, ok
}

// shapeHolds warns of a shape whose delay lets every place of the rule's
// queue pass at once: then it holds nothing.
func (p *parser) shapeHolds(r Rule, l portero.Limit, path []any) {
	if r.Shape == nil || r.Shape.Delay < l.Capacity() {
		return
	}
	p.warnf(append(path, "shape", "delay"), "%d: the queue has %d places and every one passes at once, so nothing is held (nginx's nodelay); want less than %d to shape",
		r.Shape.Delay, l.Capacity(), l.Capacity())
}

// queue reads a queue section; a rule's needs a timeout (its longest wait),
// the service's may leave it to the requests' deadlines.
func (p *parser) queue(q Queue, path []any, rule bool) (overload.Queue, bool) {
	before := p.problems
	out := overload.Queue{Size: q.Size, Timeout: p.duration(q.Timeout, 0, append(path, "timeout"))}
	if q.Size < 1 {
		p.errorf(append(path, "size"), "%d: want how many requests may wait, at least 1", q.Size)
	}
	if rule && q.Timeout == "" {
		p.errorf(append(path, "timeout"), "required: the longest a request waits for a slot, such as 2s")
	} else if rule && out.Timeout == 0 && p.problems == before {
		p.errorf(append(path, "timeout"), "0s: want the longest a request waits, more than zero")
	}
	if q.Order != "" {
		o, err := overload.ParseOrder(q.Order)
		if err != nil {
			p.errorf(append(path, "order"), "%q: want fifo (wine: keep the oldest) or lifo (milk: keep the newest)", q.Order)
		}
		out.Order = o
	}
	return out, p.problems == before
}

// overload reads the overload section and server.max_in_flight, which is
// its max_in_flight alone: one in-flight cap, the Gate's.
func (p *parser) overload(f *File, c *Config) {
	if n := f.Server.MaxInFlight; n != 0 {
		switch {
		case n < 0:
			p.errorf(at("server", "max_in_flight"), "%d: must not be negative (0 means no cap)", n)
		case f.Overload != nil:
			p.errorf(at("server", "max_in_flight"), "give overload.max_in_flight, not both (server.max_in_flight is its short form)")
		default:
			c.Overload = &OverloadConfig{Gate: overload.Config{MaxInFlight: n}}
			return
		}
	}
	o := f.Overload
	if o == nil {
		return
	}
	before := p.problems
	sec := func(field ...any) []any { return append(at("overload"), field...) }
	g := overload.Config{MaxInFlight: o.MaxInFlight}
	if o.MaxInFlight < 1 {
		p.errorf(sec("max_in_flight"), "%d: want the requests the service runs at once, at least 1 (required)", o.MaxInFlight)
	}
	if rs := o.Reserve; rs != nil {
		for _, v := range []struct {
			n    int
			name string
		}{{rs.Critical, "critical"}, {rs.Default, "default"}} {
			if v.n < 0 {
				p.errorf(sec("reserve", v.name), "%d: must not be negative", v.n)
			}
		}
		g.Reserve = overload.Reserve{Critical: rs.Critical, Default: rs.Default}
		if rs.Critical >= 0 && rs.Default >= 0 && o.MaxInFlight >= 1 && rs.Critical+rs.Default >= o.MaxInFlight {
			p.errorf(sec("reserve"), "%d critical + %d default leave no slot of the %d for sheddable work", rs.Critical, rs.Default, o.MaxInFlight)
		}
	}
	if o.Queue != nil {
		q, _ := p.queue(*o.Queue, sec("queue"), false)
		g.QueueSize, g.MaxWait, g.Order = q.Size, q.Timeout, q.Order
	}
	if o.Shedding != "" {
		sh, err := overload.ParseShedding(o.Shedding)
		if err != nil {
			p.errorf(sec("shedding"), "%q: want by-order (the queue's order decides), fair (by tenant) or random", o.Shedding)
		}
		g.Shedding = sh
		if sh != overload.ByOrder && o.Queue == nil {
			p.errorf(sec("shedding"), "%s shedding chooses among waiters: give the section a queue", sh)
		}
	}
	oc := &OverloadConfig{}
	switch {
	case o.Tenant != "" && g.Shedding != overload.Fair:
		p.errorf(sec("tenant"), "is the key of fair shedding: set shedding: fair too")
	case o.Tenant == "" && g.Shedding == overload.Fair:
		p.errorf(sec("tenant"), "required with shedding: fair: the key that names a request's tenant, such as header:X-Tenant")
	case o.Tenant != "":
		k, err := policy.ParseKey(o.Tenant)
		if err != nil {
			p.errorf(sec("tenant"), "%s", strings.TrimPrefix(err.Error(), "key "))
		}
		oc.Tenant = k
	}
	oc.Deadline = p.duration(o.Deadline, 0, sec("deadline"))
	if o.Queue != nil && g.MaxWait == 0 && oc.Deadline == 0 {
		p.warnf(sec("queue"), "neither queue.timeout nor deadline is set: a request waits for a slot until one frees or its client gives up, however long the service takes")
	}
	g.ServiceTime = p.duration(o.ServiceTime, 0, sec("service_time"))
	g.QueueDelayTarget = p.duration(o.QueueDelayTarget, 0, sec("queue_delay_target"))
	g.LatencyTarget = p.duration(o.LatencyTarget, 0, sec("latency_target"))
	g.RetryAfter = p.duration(o.RetryAfter, 0, sec("retry_after"))
	if p.problems > before {
		return
	}
	// What only the whole can tell: the Gate's own checks.
	if _, err := overload.New(g); err != nil {
		p.errorf(at("overload"), "%s", strings.TrimPrefix(err.Error(), "overload: "))
		return
	}
	oc.Gate = g
	c.Overload = oc
}
