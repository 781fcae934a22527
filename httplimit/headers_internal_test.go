package httplimit

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/policy"
)

// The headers and bodies the middleware assembles from parts prepared
// per policy are checked against their formatting from scratch where those
// parts live: engine/header (TestWriterSet, TestAppend) and
// internal/httpanswer (TestAppendRefusalMatchesMarshal,
// TestApplyDoesNotShareCapacity).

// fixedStore allows every hit without allocating, so that allocation
// counts measure the middleware alone.
type fixedStore struct{ decs []portero.Decision }

func (s *fixedStore) AllowAll(_ context.Context, _ time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	for i := range hits {
		s.decs[i] = portero.Decision{Allowed: true, Limit: 100, Remaining: 50, ResetAfter: time.Second}
	}
	return s.decs[:len(hits)], nil
}
func (s *fixedStore) Peek(context.Context, portero.Rule, string, time.Time, int64) (portero.Decision, error) {
	return portero.Decision{Allowed: true, Limit: 100, Remaining: 50, ResetAfter: time.Second}, nil
}
func (s *fixedStore) Reset(context.Context, portero.Rule, string) error { return nil }
func (s *fixedStore) Close(context.Context) error                       { return nil }

// TestAllowedAllocations keeps the allowed path lean: one store key for
// the two rules keyed by ip (they share it), none for the global rule, and
// two for the headers whatever their number (one string, one []string).
func TestAllowedAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	p, err := policy.New([]policy.Rule{
		{Name: "per-ip", Key: policy.MustParseKey("ip"), Algorithm: portero.FixedWindow, Limit: portero.MustParseLimit("100/s")},
		{Name: "per-ip-min", Key: policy.MustParseKey("ip"), Algorithm: portero.FixedWindow, Limit: portero.MustParseLimit("1000/min")},
		{Name: "global", Key: policy.MustParseKey("global"), Algorithm: portero.FixedWindow, Limit: portero.MustParseLimit("1000/s")},
	}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(Config{Policy: p, Store: &fixedStore{decs: make([]portero.Decision, 8)}, LegacyHeaders: true})
	if err != nil {
		t.Fatal(err)
	}
	h := l.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	r, _ := http.NewRequest("GET", "http://example.com/items/1", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	w := &headerOnly{h: http.Header{}}
	h.ServeHTTP(w, r)
	if got := w.h.Get("RateLimit"); got != `"per-ip";r=50;t=1, "per-ip-min";r=50;t=1, "global";r=50;t=1` {
		t.Fatalf("RateLimit = %s", got)
	}
	if n := testing.AllocsPerRun(100, func() { clear(w.h); h.ServeHTTP(w, r) }); n > 3 {
		t.Errorf("%v allocations per allowed request, want at most 3", n)
	}
}

type headerOnly struct{ h http.Header }

func (w *headerOnly) Header() http.Header         { return w.h }
func (w *headerOnly) Write(p []byte) (int, error) { return len(p), nil }
func (w *headerOnly) WriteHeader(int)             {}
