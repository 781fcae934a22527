package policy_test

import (
	"errors"
	"net/http"
	"testing"
	"unsafe"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/policy"
)

// Compile turns a request into the engine's hits, in rule order, and
// decides nothing.
func TestCompile(t *testing.T) {
	cl, _ := policy.ParseCost("content-length")
	hc, _ := policy.ParseCost("header:X-Cost")
	p := mustPolicy(t,
		policy.Rule{Name: "per-ip", Key: policy.MustParseKey("ip"), Algorithm: portero.FixedWindow, Limit: portero.PerMinute(100)},
		policy.Rule{Name: "login", Match: policy.Match{Methods: []string{"POST"}, Path: "/login"}, Key: policy.MustParseKey("ip"),
			Algorithm: portero.SlidingLog, Limit: portero.PerMinute(3), Mode: policy.Shadow},
		policy.Rule{Name: "bytes", Key: policy.MustParseKey("global"), Algorithm: portero.TokenBucket, Limit: portero.PerSecond(1000), Cost: cl},
		policy.Rule{Name: "weighted", Key: policy.MustParseKey("header:X-Key"), Limit: portero.PerMinute(10), Cost: hc},
	)
	r := req("POST", "/login", "192.0.2.1")
	r.ContentLength = 5000 // more than "bytes" can ever admit: still a hit
	r.Header["X-Key"] = []string{"k"}
	r.Header["X-Cost"] = []string{"3"}
	hits, keys, err := p.Compile(r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		rule string
		key  string
		cost int64
	}{{"per-ip", "ip=192.0.2.1/32", 1}, {"login", "ip=192.0.2.1/32", 1}, {"bytes", "global=*", 5000}, {"weighted", "header:X-Key=k", 3}}
	if len(hits) != len(want) {
		t.Fatalf("Compile = %d hits, want %d", len(hits), len(want))
	}
	for i, w := range want {
		h := hits[i]
		if h.Rule.Name != w.rule || h.Key != w.key || h.Cost != w.cost || h.CheckOnly {
			t.Errorf("hit %d = %s %q %d, want %s %q %d", i, h.Rule.Name, h.Key, h.Cost, w.rule, w.key, w.cost)
		}
		if pr := p.Rules()[i]; h.Rule != pr.Engine() || h.Rule.Index != i || h.Rule.Rule != pr.StoreRule() || h.Rule.Shadow != pr.Shadow() {
			t.Errorf("hit %d: rule %+v is not rules[%d].Engine()", i, h.Rule, i)
		}
	}
	if unsafe.StringData(hits[0].Key) != unsafe.StringData(hits[1].Key) {
		t.Error("the two rules keyed by ip do not share one key string")
	}
	if hits[2].Rule.Unit != "content-bytes" || hits[2].Rule.Announce.Policy != `"bytes";q=1000;qu="content-bytes";w=1` {
		t.Errorf("bytes: unit %q, announced %q", hits[2].Rule.Unit, hits[2].Rule.Announce.Policy)
	}
	// Reuse: the next request appends after what the caller kept.
	hits, _, err = p.Compile(req("GET", "/", "192.0.2.2"), hits[:0], keys)
	if err != nil || len(hits) != 2 || hits[0].Key != "ip=192.0.2.2/32" {
		t.Errorf("second request: %v %+v", err, hits)
	}
	// An unreadable cost is the request's fault: a RuleError.
	bad := req("GET", "/", "192.0.2.3")
	bad.Header = http.Header{"X-Key": {"k"}, "X-Cost": {"lots"}}
	if _, _, err := p.Compile(bad, nil, nil); !errors.Is(err, policy.ErrBadCost) {
		t.Errorf("X-Cost: lots: %v, want ErrBadCost", err)
	}
	var re *policy.RuleError
	chunked := req("GET", "/", "192.0.2.3")
	chunked.ContentLength = -1
	if _, _, err := p.Compile(chunked, nil, nil); !errors.As(err, &re) || re.Rule != "bytes" || !errors.Is(err, policy.ErrLengthRequired) {
		t.Errorf("no Content-Length: %v, want a RuleError of bytes wrapping ErrLengthRequired", err)
	}
}
