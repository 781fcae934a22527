package policy_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"unsafe"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/policy/policytest"
)

// TestKeyValues pins the store keys byte for byte, since they are the
// counters' names: a change would reset every client's count at upgrade.
func TestKeyValues(t *testing.T) {
	p := mustPolicy(t,
		policy.Rule{Name: "host", Key: policy.MustParseKey("host"), Limit: portero.PerMinute(100)},
		policy.Rule{Name: "hdr", Key: policy.MustParseKey("header:X-Id"), Limit: portero.PerMinute(100)},
	)
	long := strings.Repeat("é", 40)
	sum := sha256.Sum256([]byte(long))
	for _, tt := range []struct{ host, id, wantHost, wantID string }{
		{"API.Example.COM:8443", "a%b", "host=api.example.com", "header:X-Id=a%25b"},
		{"api.example.com.", "tab\there\x7f", "host=api.example.com", "header:X-Id=tab%09here%7F"},
		{"[2001:DB8::1]:80", long, "host=[2001:db8::1]", "header:X-Id=sha256:" + hex.EncodeToString(sum[:16])},
		{"a+b=c", "ünï", "host=a%2Bb%3Dc", "header:X-Id=ünï"},
	} {
		r := req("GET", "/", "192.0.2.1")
		r.Host = tt.host
		r.Header["X-Id"] = []string{tt.id}
		v, err := evaluate(p, context.Background(), &policytest.Store{}, t0, r)
		if err != nil {
			t.Fatal(err)
		}
		if len(v.Results) != 2 || v.Results[0].Key != tt.wantHost || v.Results[1].Key != tt.wantID {
			t.Errorf("host %q, id %q: keys %+v, want %q and %q", tt.host, tt.id, v.Results, tt.wantHost, tt.wantID)
		}
	}
}

// TestEvaluateIntoReuse checks that a Verdict reused for another request
// keeps nothing of the previous one, and that the rules keyed by ip share
// one key string.
func TestEvaluateIntoReuse(t *testing.T) {
	p := mustPolicy(t,
		policy.Rule{Name: "per-ip", Key: policy.MustParseKey("ip"), Algorithm: portero.FixedWindow, Limit: portero.PerMinute(100)},
		policy.Rule{Name: "login", Match: policy.Match{Methods: []string{"POST"}, Path: "/login"}, Key: policy.MustParseKey("ip"),
			Algorithm: portero.FixedWindow, Limit: portero.PerMinute(1)},
	)
	store := &policytest.Store{}
	ctx := context.Background()
	var v engine.Verdict
	if err := evaluateInto(p, ctx, store, t0, req("POST", "/login", "192.0.2.1"), &v); err != nil || !v.Allowed || len(v.Results) != 2 {
		t.Fatalf("first login: %v %+v", err, v)
	}
	if k0, k1 := v.Results[0].Key, v.Results[1].Key; k0 != k1 || unsafe.StringData(k0) != unsafe.StringData(k1) {
		t.Errorf("first login: keys %q and %q are two strings, want one shared", k0, k1)
	}
	if err := evaluateInto(p, ctx, store, t0, req("POST", "/login", "192.0.2.1"), &v); err != nil || v.Allowed || len(v.Violated) != 1 {
		t.Fatalf("second login: %v %+v, want refused by login", err, v)
	}
	if err := evaluateInto(p, ctx, store, t0, req("GET", "/", "192.0.2.2"), &v); err != nil {
		t.Fatal(err)
	}
	if !v.Allowed || len(v.Results) != 1 || len(v.Violated) != 0 || v.Results[0].Key != "ip=192.0.2.2/32" || v.Results[0].Outcome != engine.Allowed {
		t.Errorf("after reuse: %+v, want one allowed result for 192.0.2.2", v)
	}
}
