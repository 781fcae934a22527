package config_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/sim/overloadsim"
	"github.com/portero-rl/portero/overload"
)

const overloadBase = `upstreams: {d: {type: demo}}
routes: [{upstream: d}]
`

// Every overload control in one file: per rule a concurrency limit with its queue,
// a shape, priorities (one rule with only a priority); for the service the
// overload section.
func TestNeighboursConfig(t *testing.T) {
	src := overloadBase + `identity: {tenant_header: X-Tenant}
rules:
  - name: checkout
    match: {methods: [POST], path: /checkout}
    priority: critical
  - name: exports
    match: {path: /export/**}
    key: header:X-API-Key
    concurrency: {max: 2, ttl: 30s}
    queue: {size: 10, timeout: 2s, order: lifo}
    priority: sheddable
  - name: service
    key: global
    concurrency: {max: 400}
  - name: smooth
    key: ip
    algorithm: leaky-queue
    limit: 2/s burst 5
    shape: {delay: 2, max_delay: 1s}
overload:
  max_in_flight: 100
  reserve: {critical: 10, default: 20}
  queue: {size: 50, timeout: 500ms, order: milk}
  shedding: fair
  tenant: tenant
  deadline: 2s
  service_time: 50ms
  queue_delay_target: 100ms
  latency_target: 1s
  retry_after: 2s
`
	c, err := config.Parse("n.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	o := c.Overload
	want := overload.Config{MaxInFlight: 100, Reserve: overload.Reserve{Critical: 10, Default: 20}, QueueSize: 50, MaxWait: 500 * time.Millisecond,
		Order: overload.LIFO, Shedding: overload.Fair, ServiceTime: 50 * time.Millisecond, QueueDelayTarget: 100 * time.Millisecond,
		LatencyTarget: time.Second, RetryAfter: 2 * time.Second}
	if o == nil || o.Gate != want || o.Deadline != 2*time.Second || o.Tenant.String() != "tenant" {
		t.Fatalf("Overload = %+v, want gate %+v, deadline 2s, tenant key", o, want)
	}
	if got := fmt.Sprint(c.Priorities[0].Rule, " ", c.Priorities[0].Priority, " ", c.Priorities[1].Rule, " ", c.Priorities[1].Priority); got != "checkout critical exports sheddable" || len(c.Priorities) != 2 {
		t.Errorf("Priorities = %+v", c.Priorities)
	}
	if q := c.Queues["exports"]; q != (overload.Queue{Size: 10, Timeout: 2 * time.Second, Order: overload.LIFO}) || len(c.Queues) != 1 {
		t.Errorf("Queues = %+v", c.Queues)
	}
	if sh := c.Shapes["smooth"]; sh != (overload.Shape{Delay: 2, MaxDelay: time.Second}) || len(c.Shapes) != 1 {
		t.Errorf("Shapes = %+v", c.Shapes)
	}
	// The priority-only rule is no rule of the policy: it counts nothing.
	if n := len(c.Policy.Rules()); n != 3 || c.Policy.Rule("checkout") != nil {
		t.Fatalf("policy has %d rules (checkout %v), want exports, service, smooth", n, c.Policy.Rule("checkout"))
	}
	ex := c.Policy.Rule("exports")
	if ex.Concurrency != (portero.ConcurrencyRule{Name: "exports", Max: 2, TTL: 30 * time.Second}) || ex.Engine().Service {
		t.Errorf("exports = %+v, service %v: want a client's concurrency limit of 2, TTL 30s", ex.Concurrency, ex.Engine().Service)
	}
	if sv := c.Policy.Rule("service").Engine(); !sv.Service || sv.Concurrency.Max != 400 {
		t.Errorf("service = %+v, want the service's own limit of 400", sv.Concurrency)
	}
}

// server.max_in_flight is overload.max_in_flight alone: the one in-flight
// cap is the Gate.
func TestMaxInFlightIsAGate(t *testing.T) {
	c, err := config.Parse("m.yaml", []byte("server: {max_in_flight: 7}\n"+overloadBase))
	if err != nil {
		t.Fatal(err)
	}
	if c.Overload == nil || c.Overload.Gate != (overload.Config{MaxInFlight: 7}) {
		t.Errorf("Overload = %+v, want a Gate of 7 and nothing else", c.Overload)
	}
	if c, err := config.Parse("m.yaml", []byte(overloadBase)); err != nil || c.Overload != nil {
		t.Errorf("without either: %+v, %v; want no Gate", c.Overload, err)
	}
}

// Every error of the overload sections at once, each with its line,
// column and field.
func TestNeighboursErrorsAtOnce(t *testing.T) {
	src := `server: {max_in_flight: 5}
upstreams: {d: {type: demo}}
routes: [{upstream: d}]
rules:
  - name: exports
    key: header:X-API-Key
    limit: 10/min
    concurrency: {max: 0, ttl: 1us}
    queue: {size: 0, order: sideways}
  - name: rate-queue
    key: ip
    limit: 1/s
    queue: {size: 2, timeout: 1s}
    shape: {delay: -1}
  - name: checkout
    match: {path: /checkout}
    priority: urgent
  - name: c2
    key: ip
    concurrency: {max: 2, ttl: 48h}
    cost: "3"
    algorithm: gcra
overload:
  max_in_flight: 0
  reserve: {critical: -1, default: 2}
  queue: {size: 0, timeout: soon, order: milk}
  shedding: fair
  deadline: -2s
  latency_target: 1x
`
	want := []string{
		`bad.yaml:1:25: server.max_in_flight: give overload.max_in_flight, not both (server.max_in_flight is its short form)`,
		`bad.yaml:7:12: rules[0].limit: a concurrency rule counts requests in flight and takes no limit: make a second rule for the rate`,
		`bad.yaml:8:24: rules[0].concurrency.max: 0: want the most requests in flight per key, at least 1`,
		`bad.yaml:8:32: rules[0].concurrency.ttl: 1µs: want a lease lifetime from 1ms to 24h (default 10s)`,
		`bad.yaml:9:12: rules[0].queue.timeout: required: the longest a request waits for a slot, such as 2s`,
		`bad.yaml:9:19: rules[0].queue.size: 0: want how many requests may wait, at least 1`,
		`bad.yaml:9:29: rules[0].queue.order: "sideways": want fifo (wine: keep the oldest) or lifo (milk: keep the newest)`,
		`bad.yaml:13:12: rules[1].queue: a queue waits for a concurrency slot: give the rule a concurrency section (a rate rule waits by shaping: algorithm leaky-queue and a shape)`,
		`bad.yaml:14:12: rules[1].shape: only a leaky-queue rule shapes (algorithm: leaky-queue); other algorithms refuse what they do not admit`,
		`bad.yaml:14:20: rules[1].shape.delay: -1: want how many places pass at once, zero or more`,
		`bad.yaml:17:15: rules[2].priority: "urgent": want critical, default or sheddable`,
		`bad.yaml:20:32: rules[3].concurrency.ttl: 48h0m0s: want a lease lifetime from 1ms to 24h (default 10s)`,
		`bad.yaml:21:11: rules[3].cost: a concurrency rule counts requests in flight and takes no cost: make a second rule for the rate`,
		`bad.yaml:22:16: rules[3].algorithm: a concurrency rule counts requests in flight and takes no algorithm: make a second rule for the rate`,
		`bad.yaml:24:3: overload.tenant: required with shedding: fair: the key that names a request's tenant, such as header:X-Tenant`,
		`bad.yaml:24:18: overload.max_in_flight: 0: want the requests the service runs at once, at least 1 (required)`,
		`bad.yaml:25:23: overload.reserve.critical: -1: must not be negative`,
		`bad.yaml:26:17: overload.queue.size: 0: want how many requests may wait, at least 1`,
		`bad.yaml:26:29: overload.queue.timeout: "soon": want a duration such as 5s or 1m30s`,
		`bad.yaml:28:13: overload.deadline: "-2s": want a duration such as 5s or 1m30s`,
		`bad.yaml:29:19: overload.latency_target: "1x": want a duration such as 5s or 1m30s`,
	}
	_, err := config.Parse("bad.yaml", []byte(src))
	if err == nil {
		t.Fatal("Parse = nil error")
	}
	if got := strings.Split(err.Error(), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Parse errors:\n%s\nwant:\n%s", err, strings.Join(want, "\n"))
	}
}

// One problem per file: the error, at its place.
func TestNeighboursErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"priority without shedding", "rules: [{name: a, priority: critical}]\n",
			`x.yaml:3:29: rules[0].priority: a priority is for load shedding, which is off: add an overload section (overload.max_in_flight)`},
		{"tenant without fair", "overload: {max_in_flight: 2, tenant: ip}\n",
			`x.yaml:3:38: overload.tenant: is the key of fair shedding: set shedding: fair too`},
		{"fair without a queue", "overload: {max_in_flight: 2, shedding: fair, tenant: ip}\n",
			`x.yaml:3:40: overload.shedding: fair shedding chooses among waiters: give the section a queue`},
		{"bad tenant key", "overload: {max_in_flight: 2, shedding: fair, tenant: 'bogus:x', queue: {size: 1}}\n",
			`x.yaml:3:54: overload.tenant: `},
		{"reserve leaves nothing", "overload: {max_in_flight: 4, reserve: {critical: 2, default: 2}}\n",
			`x.yaml:3:39: overload.reserve: 2 critical + 2 default leave no slot of the 4 for sheddable work`},
		{"unknown shedding", "overload: {max_in_flight: 2, shedding: nice}\n",
			`x.yaml:3:40: overload.shedding: "nice": want by-order (the queue's order decides), fair (by tenant) or random`},
		{"no max", "overload: {reserve: {critical: 1}}\n",
			`x.yaml:3:11: overload.max_in_flight: 0: want the requests the service runs at once, at least 1 (required)`},
		{"negative short form", "server: {max_in_flight: -1}\n",
			`x.yaml:3:25: server.max_in_flight: -1: must not be negative (0 means no cap)`},
		{"empty concurrency", "rules: [{name: a, key: ip, concurrency: {}}]\n",
			`x.yaml:3:41: rules[0].concurrency.max: 0: want the most requests in flight per key, at least 1`},
		{"concurrency is a mapping", "rules: [{name: a, key: ip, concurrency: 3}]\n",
			`x.yaml:3:41: rules[0].concurrency: want a mapping of fields (max, ttl), found "3"`},
		{"typo in concurrency", "rules: [{name: a, key: ip, concurrency: {max: 1, tll: 5s}}]\n",
			`x.yaml:3:50: rules[0].concurrency.tll: unknown field; did you mean ttl?`},
		{"concurrency without key", "rules: [{name: a, concurrency: {max: 1}}]\n",
			`x.yaml:3:9: rules[0].key: required`},
		{"queue timeout 0", "rules: [{name: a, key: ip, concurrency: {max: 1}, queue: {size: 1, timeout: 0s}}]\n",
			`x.yaml:3:77: rules[0].queue.timeout: 0s: want the longest a request waits, more than zero`},
		{"shape max_delay", "rules: [{name: a, key: ip, algorithm: leaky-queue, limit: 1/s, shape: {max_delay: later}}]\n",
			`x.yaml:3:83: rules[0].shape.max_delay: "later": want a duration`},
		{"limit or concurrency", "rules: [{name: a, key: ip}]\n",
			`x.yaml:3:9: rules[0].limit: required, such as 100/min or 10/s burst 20 (or a concurrency section)`},
	} {
		_, err := config.Parse("x.yaml", []byte(overloadBase+tc.src))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: Parse = %v\nwant one error starting %q", tc.name, err, tc.want)
		}
	}
}

// TestOverloadDocYAML parses every YAML block of docs/overload.md and
// docs/configuration.md (adding a demo route to those without one), so
// that no example there is invalid, and checks the blocks that say they
// are a simulation's settings against that simulation's constants.
func TestOverloadDocYAML(t *testing.T) {
	sims := map[string]overload.Config{
		"# sim overload bounded-deadline": {MaxInFlight: overloadsim.OverloadWorkers, QueueSize: overloadsim.OverloadQueue},
		"# sim noisy-neighbour fair":      {MaxInFlight: overloadsim.NoisyWorkers, QueueSize: overloadsim.NoisyQueue, Shedding: overload.Fair},
	}
	deadlines := map[string]time.Duration{"# sim overload bounded-deadline": overloadsim.OverloadPatience, "# sim noisy-neighbour fair": overloadsim.NoisyPatience}
	found := 0
	for _, doc := range []string{"../../docs/overload.md", "../../docs/configuration.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		blocks := strings.Split(string(b), "```yaml\n")[1:]
		if len(blocks) == 0 {
			t.Fatalf("%s: no YAML block", doc)
		}
		for i, blk := range blocks {
			src, _, _ := strings.Cut(blk, "```")
			full := src
			if !strings.Contains(src, "routes:") {
				full += overloadBase
			}
			c, err := config.ParseWith(fmt.Sprintf("%s block %d", doc, i), []byte(full), config.Options{AllowUnsetEnv: true})
			if err != nil {
				t.Errorf("%s, YAML block %d does not load:\n%v\n%s", doc, i, err, src)
				continue
			}
			first, _, _ := strings.Cut(src, "\n")
			if want, ok := sims[first]; ok {
				found++
				if o := c.Overload; o == nil || o.Gate != want || o.Deadline != deadlines[first] {
					t.Errorf("%s: %q is %+v; the simulation runs %+v, deadline %v", doc, first, o, want, deadlines[first])
				}
			}
		}
	}
	if found != len(sims) {
		t.Errorf("found %d of the %d blocks that give a simulation's settings", found, len(sims))
	}
}
