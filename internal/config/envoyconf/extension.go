package envoyconf

import (
	"fmt"
	"math"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/clientip"
	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/internal/config/yamlwalk"
	"github.com/portero-rl/portero/internal/plans"
	"github.com/portero-rl/portero/policy"
)

// Portero's extension of envoyproxy/ratelimit's format is the key portero,
// which envoyproxy/ratelimit refuses (so no file it accepts reads
// differently), in three places:
//
//   - the file: portero: {address_lists: {NAME: [CIDR, ...]}};
//   - a descriptor: portero: {addresses: [...], not_addresses: [...]},
//     matching by address in place of a value (descriptor.Node.Addresses);
//   - a rate_limit: portero: {algorithm, burst, calendar, tz, offset,
//     look_back, budget}.

// extension is a rate_limit's portero, as read.
type extension struct {
	alg                portero.Algorithm // empty: the default
	burst              int64
	burstNode          *yaml.Node
	calendar           *yaml.Node // calendar: true
	tz, offset         string
	tzNode, offsetNode *yaml.Node
	lookBack           *yaml.Node
	lookBackText       string
	budget             string // leased budgets: a duration
	budgetNode         *yaml.Node
}

// strictUnknown reports an unknown key inside the extension, in both modes.
func (p *parser) strictUnknown(kn *yaml.Node, field, k, known string) {
	p.errorf(kn, join(field, k), "unknown field (Portero's extension has %s)", known)
}

// extension reads rate_limit.portero.
func (p *parser) extension(n *yaml.Node, field string) extension {
	var x extension
	p.fields(n, field, func(k string, kn, v *yaml.Node) {
		f := join(field, k)
		switch k {
		case "algorithm":
			s := p.str(v, f)
			if s == "" {
				return
			}
			a, err := portero.ParseAlgorithm(s)
			if err != nil {
				p.errorf(v, f, "%v", err)
				return
			}
			if a == portero.LeakyQueue { // an RLS answer cannot delay
				p.errorf(v, f, "leaky-queue delays requests, which an Envoy rate limit service cannot do (it answers at once); use leaky-meter or gcra for the same admissions without the delay")
				return
			}
			x.alg = a
		case "burst":
			x.burst, x.burstNode = int64(p.uint(v, f, math.MaxUint32)), v
		case "calendar":
			if p.boolean(v, f) {
				x.calendar = v
			}
		case "tz":
			x.tz, x.tzNode = p.str(v, f), v
		case "offset":
			x.offset, x.offsetNode = p.str(v, f), v
		case "look_back":
			x.lookBackText, x.lookBack = p.str(v, f), v
		case "budget":
			x.budget, x.budgetNode = p.str(v, f), v
		default:
			p.strictUnknown(kn, field, k, "algorithm, burst, calendar, tz, offset, look_back and budget")
		}
	})
	if x.calendar == nil {
		for _, o := range []struct {
			n    *yaml.Node
			name string
		}{{x.tzNode, "tz"}, {x.offsetNode, "offset"}} {
			if o.n != nil {
				p.errorf(o.n, join(field, o.name), "%s is for a calendar quota: add calendar: true (with unit day, week or month)", o.name)
			}
		}
	}
	if x.calendar != nil && x.lookBack != nil {
		p.errorf(x.lookBack, join(field, "look_back"), "a limit is a calendar quota (calendar: true) or a look-back window, not both")
	}
	return x
}

// calendar makes r a calendar quota, read by portero.ParseQuota:
// requests_per_unit per calendar day, week or month, in tz, by offset.
func (p *parser) calendar(r *descriptor.LimitSpec, x *extension, unitNode, rpuNode, n *yaml.Node, field string) {
	ext := join(field, "portero")
	var period portero.Period
	switch r.Unit {
	case descriptor.Day:
		period = portero.Daily
	case descriptor.Week:
		period = portero.Weekly
	case descriptor.Month:
		period = portero.Monthly
	default:
		p.errorf(unitNode, join(field, "unit"), "%s: a calendar quota is per day, week or month (calendar: true)", r.Unit)
		return
	}
	if x.alg != portero.FixedWindow {
		p.errorf(x.calendar, join(ext, "calendar"), "a calendar quota is counted by fixed-window on the calendar, not %s", x.alg)
		return
	}
	if r.RequestsPerUnit == 0 {
		at := rpuNode
		if at == nil {
			at = n
		}
		p.errorf(at, join(field, "requests_per_unit"), "a calendar quota needs a positive requests_per_unit (0 refuses everything: drop calendar)")
		return
	}
	// Each part alone first, one word, so that an error names its field.
	base := "1/" + string(period)
	for _, o := range []struct {
		v    string
		n    *yaml.Node
		name string
	}{{x.tz, x.tzNode, "tz"}, {x.offset, x.offsetNode, "offset"}} {
		if o.n == nil {
			continue
		}
		if o.v == "" || len(strings.Fields(o.v)) != 1 {
			p.errorf(o.n, join(ext, o.name), "%q: want one word, such as %s", o.v, map[string]string{"tz": "Europe/Madrid", "offset": "6h"}[o.name])
			return
		}
		if _, err := portero.ParseQuota(base + " " + o.name + " " + o.v); err != nil {
			p.errorf(o.n, join(ext, o.name), "%s", quotaMessage(err))
			return
		}
	}
	q := fmt.Sprintf("%d/%s", r.RequestsPerUnit, period)
	if x.offset != "" {
		q += " offset " + x.offset
	}
	if x.tz != "" {
		q += " tz " + x.tz
	}
	l, err := portero.ParseQuota(q)
	if err != nil {
		p.errorf(x.calendar, join(ext, "calendar"), "%s", quotaMessage(err))
		return
	}
	r.Calendar = l
}

// quotaMessage is a ParseQuota error without the composed text it quotes
// and the "invalid limit" the field's error already says.
func quotaMessage(err error) string {
	msg := err.Error()
	for range 2 { // either comes first
		msg = strings.TrimPrefix(msg, portero.ErrInvalidLimit.Error()+": ")
		if i := strings.Index(msg, "\": "); strings.HasPrefix(msg, "\"") && i > 0 {
			msg = msg[i+3:]
		}
	}
	return msg
}

// lookBack makes r a look-back limit, checked as rate_rules are:
// requests_per_unit over the last look_back.
func (p *parser) lookBack(r *descriptor.LimitSpec, x *extension, unitNode, rpuNode, n *yaml.Node, field string) {
	if unitNode != nil {
		p.errorf(unitNode, join(field, "unit"), "look_back is the window: leave unit out (requests_per_unit requests over the last look_back)")
		return
	}
	w, err := policy.ParseLookBack(x.lookBackText)
	if err != nil {
		p.errorf(x.lookBack, join(field, "portero.look_back"), "%v", err)
		return
	}
	if _, err := policy.LookBackLimit(int64(r.RequestsPerUnit), w); err != nil {
		at := rpuNode
		if at == nil {
			at = n
		}
		p.errorf(at, join(field, "requests_per_unit"), "%v (look_back)", err)
		return
	}
	r.LookBack = w
}

// fileExtension reads the file's portero: {address_lists}.
func (p *parser) fileExtension(n *yaml.Node, field string) {
	p.fields(n, field, func(k string, kn, v *yaml.Node) {
		f := join(field, k)
		if k != "address_lists" {
			p.strictUnknown(kn, field, k, "address_lists")
			return
		}
		if v.Kind != yaml.MappingNode {
			p.errorf(v, f, "want a mapping of names to lists of addresses and CIDRs, found %s", yamlwalk.Describe(v))
			return
		}
		p.lists = plans.AddressLists{}
		p.fields(v, f, func(name string, kn, list *yaml.Node) {
			lf := join(f, name)
			items, values := p.strList(list, lf)
			bad, err := p.lists.Add(name, values)
			if err != nil {
				p.errorf(kn, lf, "%v", err)
			}
			for _, b := range bad {
				p.errorf(items[b.Index], fmt.Sprintf("%s[%d]", lf, b.Index), "%v", b.Err)
			}
		})
	})
}

// strList reads a list of strings: their nodes and values.
func (p *parser) strList(n *yaml.Node, field string) (items []*yaml.Node, values []string) {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, field, "want a list, found %s", yamlwalk.Describe(n))
		return nil, nil
	}
	for i, item := range n.Content {
		if item = p.resolve(item, field); item == nil {
			break
		}
		if p.str(item, fmt.Sprintf("%s[%d]", field, i)); item.Kind == yaml.ScalarNode && !yamlwalk.IsNull(item) {
			items, values = append(items, item), append(values, item.Value)
		}
	}
	return items, values
}

// addresses reads a descriptor's portero: {addresses, not_addresses}
// into d.
func (p *parser) addresses(d *descriptor.Node, n *yaml.Node, field string) {
	var in, out string // the lists as written, for the node's name
	p.fields(n, field, func(k string, kn, v *yaml.Node) {
		f := join(field, k)
		var set **clientip.AddrSet
		text := &in
		switch k {
		case "addresses":
			set = &d.Addresses
		case "not_addresses":
			set, text = &d.NotAddresses, &out
		default:
			p.strictUnknown(kn, field, k, "addresses and not_addresses")
			return
		}
		items, values := p.strList(v, f)
		if len(items) == 0 {
			p.errorf(v, f, "want at least one address list, address or CIDR")
			return
		}
		s, bad, err := p.lists.Set(values, "portero.address_lists")
		for _, b := range bad {
			p.errorf(items[b.Index], fmt.Sprintf("%s[%d]", f, b.Index), "%v", b.Err)
		}
		if err != nil {
			p.errorf(v, f, "%v", err)
			return
		}
		*set, *text = s, "["+strings.Join(values, ",")+"]"
	})
	if in == "" && out == "" {
		return
	}
	if d.Value != "" {
		p.errorf(n, field, "a descriptor matches a value or addresses, not both (value %q)", d.Value)
		return
	}
	if out != "" {
		out = "!" + out
	}
	d.AddressText = in + out
}

// budget reads the extension's budget into r once its algorithm is known;
// never under Envoyproxy, whose counters are envoyproxy/ratelimit's.
func (p *parser) budget(r *descriptor.LimitSpec, x *extension, field string) {
	if x.budgetNode == nil {
		return
	}
	f := join(field, "portero.budget")
	b, err := time.ParseDuration(x.budget)
	switch {
	case p.compat:
		p.errorf(x.budgetNode, f, "leased budgets are Portero's own: not in envoyproxy/ratelimit's compatibility mode")
	case err != nil:
		p.errorf(x.budgetNode, f, "%q: want a duration such as 50ms", x.budget)
	case b < time.Millisecond || b > portero.MaxBudget:
		p.errorf(x.budgetNode, f, "%v: want the time a batch lasts, from 1ms to %v (50ms is a good start)", b, portero.MaxBudget)
	case !portero.Leasable(x.alg):
		p.errorf(x.budgetNode, f, "%s cannot lease budgets; set portero.algorithm to fixed-window, fixed-window-anchored, token-bucket, leaky-meter or gcra (or calendar: true)", x.alg)
	default:
		r.Budget = b
	}
}
