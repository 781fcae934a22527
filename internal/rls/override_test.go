package rls

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/config/envoyconf"
	"github.com/portero-rl/portero/store/memstore"
)

// ruleCounter is a store that records the distinct rules and (rule, key)
// pairs it was asked about: every distinct rule is a table a store keeps
// for good (memstore, redisstore), every key is bounded by max_keys and
// expires.
type ruleCounter struct {
	portero.Store
	rules map[portero.Rule]bool
	keys  map[string]bool
}

func (s *ruleCounter) AllowAll(ctx context.Context, now time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	for _, h := range hits {
		s.rules[h.Rule] = true
		s.keys[h.Rule.Name+"\x00"+h.Key] = true
	}
	return s.Store.AllowAll(ctx, now, hits)
}

// TestOverridesBounded: 20,000 distinct descriptor values, each with a
// limit override, used to make 20,000 rules that no store forgets (100,000
// took portero rls from 23 MB to 308 MB). The values are now keys of one
// rule per override limit, bounded by the store's max_keys and expiring
// with their window; distinct override limits are capped
// (Options.MaxOverrides), beyond which a request is refused as invalid
// rather than growing memory; and an override in a domain that is not
// configured is ignored, as envoyproxy/ratelimit ignores it.
func TestOverridesBounded(t *testing.T) {
	lim, err := envoyconf.Load(examples, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := memstore.New(memstore.Config{SweepInterval: -1, MaxKeys: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close(context.Background())
	st := &ruleCounter{Store: ms, rules: map[portero.Rule]bool{}, keys: map[string]bool{}}
	eng, err := NewEngine(Options{Store: st, Limits: lim, MaxOverrides: 8})
	if err != nil {
		t.Fatal(err)
	}
	ov := &Override{RequestsPerUnit: 2, Unit: envoyconf.Minute}
	ask := func(domain, value string, o *Override) (*Response, error) {
		return eng.Decide(context.Background(), t0, &Request{Domain: domain, Descriptors: []Descriptor{{
			Entries: []envoyconf.Entry{{Key: "remote_address", Value: value}}, Override: o}}})
	}
	const n = 20_000
	for i := range n {
		resp, err := ask("edge", fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255), ov)
		if err != nil || resp.Code != OK || resp.Statuses[0].Limit.RequestsPerUnit != 2 {
			t.Fatalf("override %d: %+v, %v", i, resp, err)
		}
	}
	if len(st.rules) != 1 {
		t.Errorf("%d distinct values made %d store rules, want 1", n, len(st.rules))
	}
	if got := ms.Len(); got > 1000 {
		t.Errorf("memstore holds %d keys, want at most max_keys 1000", got)
	}
	// Each value still has its own count: 2 per minute.
	for range 2 {
		ask("edge", "192.0.2.1", ov)
	}
	if resp, _ := ask("edge", "192.0.2.1", ov); resp.Code != OverLimit {
		t.Errorf("third request under a 2/min override: %v, want OVER_LIMIT", resp.Code)
	}
	if resp, _ := ask("edge", "192.0.2.2", ov); resp.Code != OK {
		t.Errorf("another value: %v, want OK", resp.Code)
	}
	// Distinct override limits are capped.
	for rpu := range uint32(20) {
		_, err := ask("edge", "192.0.2.3", &Override{RequestsPerUnit: 100 + rpu, Unit: envoyconf.Hour})
		var re *RequestError
		if rpu < 7 && err != nil {
			t.Fatalf("override limit %d of 8: %v", rpu+2, err)
		}
		if rpu >= 7 && (!errors.As(err, &re) || re.Kind != InvalidArgument) {
			t.Fatalf("override limit %d of 8: err %v, want InvalidArgument", rpu+2, err)
		}
	}
	if len(st.rules) > 8 {
		t.Errorf("%d store rules after 21 distinct override limits, want at most 8", len(st.rules))
	}
	// An override in an unknown domain is ignored: NOT_FOUND as for any
	// request there, or with AllowUnknownDomains OK without a limit.
	before := len(st.rules)
	var re *RequestError
	if _, err := ask("elsewhere", "v", ov); !errors.As(err, &re) || re.Kind != NotFound {
		t.Errorf("override in an unknown domain: %v, want NotFound", err)
	}
	open, err := NewEngine(Options{Store: st, Limits: lim, AllowUnknownDomains: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		resp, err := open.Decide(context.Background(), t0, &Request{Domain: fmt.Sprintf("d%d", i), Descriptors: []Descriptor{{
			Entries: []envoyconf.Entry{{Key: "k", Value: "v"}}, Override: ov}}})
		if err != nil || resp.Code != OK || resp.Statuses[0].Limit != nil {
			t.Fatalf("override in unknown domain with AllowUnknownDomains: %+v, %v; want OK without a limit", resp, err)
		}
	}
	if len(st.rules) != before {
		t.Errorf("overrides in unknown domains made %d store rules", len(st.rules)-before)
	}
}
