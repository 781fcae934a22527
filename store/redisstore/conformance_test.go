package redisstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/store/redisstore"
	"github.com/portero-rl/portero/store/storetest"
)

var prefixes atomic.Int64

// newStore returns a store on srv with a fresh key prefix, closed at the
// end of the test.
func newStore(t testing.TB, srv *redistest.Server, cfg redisstore.Config) *redisstore.Store {
	t.Helper()
	if cfg.URL == "" && cfg.Addrs == nil && cfg.Client == nil {
		cfg.URL = srv.URL()
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second // these tests check decisions, not latency on a busy machine
	}
	if cfg.Prefix == "" {
		cfg.Prefix = fmt.Sprintf("t%d:", prefixes.Add(1))
	}
	s, err := redisstore.New(cfg)
	if err != nil {
		t.Fatalf("redisstore.New: %v", err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// TestConformance runs the conformance suite (step tables, random traces
// compared with storetest.Reference, all-or-nothing, errors) against a real
// redis-server in caller-clock mode.
func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T) portero.Store {
		return newStore(t, srv, redisstore.Config{Clock: redisstore.CallerClock})
	})
}
