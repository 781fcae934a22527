package rls

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/config/envoyconf"
	"github.com/portero-rl/portero/store/memstore"
)

// degradedStore answers as a store whose failure policy decided: its
// inner store's decisions, marked Degraded (what redisstore does while
// Redis is down under fail-open or local).
type degradedStore struct{ portero.Store }

func (s degradedStore) AllowAll(ctx context.Context, now time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	ds, err := s.Store.AllowAll(ctx, now, hits)
	for i := range ds {
		ds[i].Degraded = true
	}
	return ds, err
}

// TestDegradedHeaders: when a failure policy decided (the store's, or the
// door's FailureResponse), RateLimit-Policy still names the limit but no
// RateLimit item is sent for it: its values would be made up (r=0 for a
// fail-closed refusal that counted nothing).
func TestDegradedHeaders(t *testing.T) {
	lim, err := envoyconf.Load(examples, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close(context.Background())
	req := &Request{Domain: "edge", Descriptors: []Descriptor{{Entries: []envoyconf.Entry{{Key: "remote_address", Value: "10.0.0.1"}}}}}
	headers := func(r *Response) map[string]string {
		m := map[string]string{}
		for _, h := range r.Headers() {
			m[h.Name] = h.Value
		}
		return m
	}

	eng, err := NewEngine(Options{Store: degradedStore{ms}, Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := eng.Decide(context.Background(), t0, req)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Statuses[0].Degraded {
		t.Error("Status.Degraded = false for a decision the store's failure policy made")
	}
	h := headers(resp)
	if _, ok := h["RateLimit"]; ok || h["RateLimit-Policy"] == "" {
		t.Errorf("store fail-open: headers %v, want RateLimit-Policy and no RateLimit", h)
	}

	eng, err = NewEngine(Options{Store: ms, Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	resp = eng.FailureResponse(req, FailClosed, errors.New("redis down"))
	h = headers(resp)
	if _, ok := h["RateLimit"]; ok || h["RateLimit-Policy"] == "" || h["Retry-After"] != "1" {
		t.Errorf("fail-closed: headers %v, want RateLimit-Policy, Retry-After: 1 and no RateLimit", h)
	}
	// Healthy, the same request announces its values.
	resp, err = eng.Decide(context.Background(), t0, req)
	if err != nil {
		t.Fatal(err)
	}
	if h := headers(resp); h["RateLimit"] == "" {
		t.Errorf("healthy: headers %v, want RateLimit", h)
	}
}
