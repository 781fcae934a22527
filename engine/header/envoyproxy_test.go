package header_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/engine/header"
	"github.com/portero-rl/portero/store/memstore"
	"github.com/portero-rl/portero/store/storetest"
)

// AppendEnvoyproxy writes envoyproxy/ratelimit's three fields for the hit
// with the least remaining, or the one refusing, with the whole seconds to
// the end of its epoch-aligned window.
func TestAppendEnvoyproxy(t *testing.T) {
	st, err := memstore.New(memstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	e, err := engine.New(engine.Options{Store: st, Counting: engine.CountEach})
	if err != nil {
		t.Fatal(err)
	}
	wide := rule(t, "wide", portero.FixedWindow, "10/m", false, "")
	narrow := rule(t, "narrow", portero.FixedWindow, "2/m", false, "")
	names := [3]string{"L", "R", "T"}
	now := storetest.Base.Add(25500 * time.Millisecond) // 35 s to the minute's end, rounded up
	var v engine.Verdict
	for _, want := range []string{"L=2 R=1 T=35", "L=2 R=0 T=35", "L=2 R=0 T=35"} {
		hits := []engine.Hit{{Rule: narrow, Key: "n", Cost: 1}, {Rule: wide, Key: "w", Cost: 1}}
		if err := e.Decide(context.Background(), now, hits, &v); err != nil {
			t.Fatal(err)
		}
		fields, buf := header.AppendEnvoyproxy(nil, nil, &v, &names, now)
		got := ""
		for i, f := range fields {
			if i > 0 {
				got += " "
			}
			got += fmt.Sprintf("%s=%s", f.Name, f.Value(buf))
		}
		if got != want {
			t.Errorf("allowed %v: fields %q, want %q", v.Allowed, got, want)
		}
	}
	v.Reset()
	if fields, _ := header.AppendEnvoyproxy(nil, nil, &v, &names, now); len(fields) != 0 {
		t.Errorf("no hit: fields %v, want none", fields)
	}
	if got := header.WholeSeconds(1500 * time.Millisecond); got != 2*time.Second {
		t.Errorf("WholeSeconds(1.5s) = %v, want 2s", got)
	}
}
