package engine_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/engine/header"
	"github.com/portero-rl/portero/store/memstore"
)

// BenchmarkDecide measures one decision of two stacked rules (per client,
// global) through the engine over the memory store, beside the store's own
// AllowAll on the same hits ("store-only"): the difference is the engine's
// cost. "with-headers" adds the header writer. Clients spread over 250 keys.
//
//	go test -run '^$' -bench Decide -benchmem ./engine
func BenchmarkDecide(b *testing.B) {
	st, err := memstore.New(memstore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close(context.Background())
	perIP := announced(b, "per-ip", portero.GCRA, "1000000/s")
	global := announced(b, "global", portero.FixedWindow, "1000000000/s")
	keys := make([]string, 250)
	for i := range keys {
		keys[i] = "10.0." + strconv.Itoa(i) + ".1"
	}
	ctx := context.Background()
	e := newEngine(b, st, engine.Options{})
	b.Run("store-only", func(b *testing.B) {
		hits := make([]portero.Hit, 2)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			hits[0] = portero.Hit{Rule: perIP.Rule, Key: keys[i%len(keys)], Cost: 1}
			hits[1] = portero.Hit{Rule: global.Rule, Key: "", Cost: 1}
			if _, err := st.AllowAll(ctx, t0, hits); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("engine", func(b *testing.B) {
		hits := make([]engine.Hit, 2)
		v := new(engine.Verdict)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			hits[0] = engine.Hit{Rule: perIP, Key: keys[i%len(keys)], Cost: 1}
			hits[1] = engine.Hit{Rule: global, Key: "", Cost: 1}
			if err := e.Decide(ctx, t0, hits, v); err != nil || !v.Allowed {
				b.Fatal(err)
			}
		}
	})
	b.Run("with-headers", func(b *testing.B) {
		hits := make([]engine.Hit, 2)
		v := new(engine.Verdict)
		w := header.NewWriter([]*engine.Rule{perIP, global}, false)
		fs, buf := make([]header.Field, 0, 8), make([]byte, 0, 256)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			hits[0] = engine.Hit{Rule: perIP, Key: keys[i%len(keys)], Cost: 1}
			hits[1] = engine.Hit{Rule: global, Key: "", Cost: 1}
			if err := e.Decide(ctx, t0, hits, v); err != nil || !v.Allowed {
				b.Fatal(err)
			}
			fs, buf = w.Append(fs[:0], buf[:0], v)
		}
	})
}

// announced is a rule with its header text formatted, as compilers build
// them.
func announced(b *testing.B, name string, alg portero.Algorithm, limit string) *engine.Rule {
	r := engine.Rule{Rule: portero.Rule{Name: name, Algorithm: alg, Limit: portero.MustParseLimit(limit)}}
	ann, err := header.Announce(&r)
	if err != nil {
		b.Fatal(err)
	}
	r.Announce = ann
	out, err := engine.NewRule(r)
	if err != nil {
		b.Fatal(err)
	}
	return out
}
