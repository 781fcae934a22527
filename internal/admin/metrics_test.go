package admin

import (
	"fmt"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// One series per node, read at each scrape: a dead master is 1 by its
// address and slots while the others are 0.
func TestNodeGauge(t *testing.T) {
	nodes := []NodeState{{Node: "127.0.0.1:7000", Slots: "0-5460"}, {Node: "127.0.0.1:7001", Slots: "5461-16383"}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewNodeGauge(func() []NodeState { return nodes }))
	scrape := func() []string {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				l := m.GetLabel()
				out = append(out, fmt.Sprintf("%s{%s=%s,%s=%s} %g", mf.GetName(), l[0].GetName(), l[0].GetValue(), l[1].GetName(), l[1].GetValue(), m.GetGauge().GetValue()))
			}
		}
		return out
	}
	nodes[1].Unavailable = true
	want := []string{
		"portero_store_node_unavailable{node=127.0.0.1:7000,slots=0-5460} 0",
		"portero_store_node_unavailable{node=127.0.0.1:7001,slots=5461-16383} 1",
	}
	if got := scrape(); !slices.Equal(got, want) {
		t.Fatalf("scrape = %q, want %q", got, want)
	}
	nodes = nil // the memory store: no series
	if got := scrape(); len(got) != 0 {
		t.Fatalf("without nodes: %q", got)
	}
}
