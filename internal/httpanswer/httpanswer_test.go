package httpanswer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/engine/header"
	"github.com/portero-rl/portero/store/storetest"
)

func rule(t *testing.T, i int, name string, alg portero.Algorithm, limit portero.Limit, unit string) *engine.Rule {
	t.Helper()
	r := engine.Rule{Rule: portero.Rule{Name: name, Algorithm: alg, Limit: limit}, Unit: unit, Index: i}
	ann, err := header.Announce(&r)
	if err != nil {
		t.Fatal(err)
	}
	r.Announce = ann
	out, err := engine.NewRule(r)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The body assembled from prepared parts is the Problem json.Marshal
// writes, byte for byte, for refusals by one and several rules, refusals
// that can never pass (with and without a unit, a rule that admits
// nothing), with and without prepared texts.
func TestAppendRefusalMatchesMarshal(t *testing.T) {
	ip := rule(t, 0, "per-ip", portero.FixedWindow, portero.PerMinute(3), "")
	tiny := rule(t, 1, "tiny.window", portero.SlidingCounter, portero.Limit{Count: 2, Window: 500 * time.Millisecond}, "")
	bytes := rule(t, 2, "bytes", portero.TokenBucket, portero.PerSecond(1000), "content-bytes")
	none := rule(t, 3, "blocked", portero.FixedWindow, portero.Limit{Window: time.Second}, "")
	texts := NewWriter([]*engine.Rule{ip, tiny, bytes, none}, false)
	e, err := engine.New(engine.Options{Store: storetest.NewReference()})
	if err != nil {
		t.Fatal(err)
	}
	h := func(r *engine.Rule, key string, cost int64) engine.Hit {
		return engine.Hit{Rule: r, Key: key, Cost: cost}
	}
	now := storetest.Base
	ctx := context.Background()
	prime := []engine.Hit{h(ip, "a", 3), h(tiny, "a", 2)}
	if err := e.Decide(ctx, now, prime, new(engine.Verdict)); err != nil {
		t.Fatal(err)
	}
	for _, hits := range [][]engine.Hit{
		{h(ip, "a", 1)},
		{h(ip, "a", 1), h(tiny, "a", 1)},
		{h(bytes, "a", 5000)},
		{h(ip, "a", 1), h(bytes, "b", 5000)},
		{h(none, "a", 1)},
		{{Rule: none, Key: "a", CheckOnly: true}},
	} {
		v := new(engine.Verdict)
		if err := e.Decide(ctx, now, hits, v); err != nil {
			t.Fatal(err)
		}
		if v.Allowed {
			t.Fatalf("%v allowed", hits)
		}
		for _, tx := range []*Writer{texts, nil} {
			for _, status := range []int{429, 403} {
				retry := int64(7)
				if v.NeverPasses() {
					retry = 0
				}
				want, _ := json.Marshal(Refusal(status, v, retry))
				got := tx.AppendRefusal(nil, status, v, retry)
				if string(got) != string(want)+"\n" {
					t.Errorf("%v (texts %v):\n got %s\nwant %s", hits, tx != nil, got, want)
				}
			}
		}
	}
	v := new(engine.Verdict)
	_ = e.Decide(ctx, now, []engine.Hit{h(bytes, "c", 5000)}, v)
	if p := Refusal(429, v, 0); p.Detail != `rule "bytes" admits at most 1000 content-bytes at once and this request costs 5000: it can never pass` ||
		p.Cost != 5000 || p.MaxCost == nil || *p.MaxCost != 1000 || p.RetryAfter != 0 {
		t.Errorf("can-never-pass problem: %+v", p)
	}
}

// Appending to one field set by Apply cannot overwrite another: they are
// cut from one slice with capped capacity.
func TestApplyDoesNotShareCapacity(t *testing.T) {
	var f Fields
	f.Static("A", "a")
	f.Int("B", 12345)
	f.Static("C", "c")
	h := http.Header{}
	f.Apply(h)
	h.Add("A", "x")
	h.Add("B", "y")
	if got := fmt.Sprint(h["A"], h["B"], h["C"]); got != "[a x] [12345 y] [c]" {
		t.Errorf("after Add: %s, want [a x] [12345 y] [c]", got)
	}
	if _, d := h["D"]; len(h["B"]) == 0 || d {
		t.Error("B is not set, or D is")
	}
	if n := testing.AllocsPerRun(100, func() { f.Apply(http.Header{}) }); n > 3 { // the map, the string, the []string
		t.Errorf("Apply allocates %v times", n)
	}
}

func TestWriteUnavailable(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteUnavailable(rec, 1500*time.Millisecond, "the rate limiter cannot reach its store")
	var p Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "2" || rec.Header().Get("Cache-Control") != "no-store" ||
		p.Type != ProblemTemporaryReducedCapacity || p.RetryAfter != 2 {
		t.Errorf("WriteUnavailable: %d %v %+v", rec.Code, rec.Header(), p)
	}
}
