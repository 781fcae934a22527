package gateway_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestMaxIdleConnsIsTheCap: max_idle_conns is how many idle connections
// the gateway keeps to an upstream, fewer than the default too. Each round
// holds 8 requests at the upstream until all 8 arrived, so the gateway
// needs 8 connections; the second round finds at most max_idle_conns of
// the first round's idle and opens at least the rest again (a connection
// not yet back in the pool when the round starts only adds new ones).
func TestMaxIdleConnsIsTheCap(t *testing.T) {
	const inFlight = 8
	for _, tt := range []struct {
		idle, wantNew int
	}{{2, inFlight - 2}, {1, inFlight - 1}} {
		t.Run(fmt.Sprint(tt.idle), func(t *testing.T) {
			var opened atomic.Int64
			var barrier sync.WaitGroup
			up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				barrier.Done()
				barrier.Wait()
			}))
			up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					opened.Add(1)
				}
			}
			up.Start()
			t.Cleanup(up.Close)
			_, srv, _ := gw(t, fmt.Sprintf("upstreams: {api: {url: %s, max_idle_conns: %d}}\nroutes: [{upstream: api}]\n", up.URL, tt.idle))
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: inFlight}, Timeout: 10 * time.Second}
			round := func() {
				barrier.Add(inFlight)
				var wg sync.WaitGroup
				for range inFlight {
					wg.Go(func() {
						resp, err := client.Get(srv.URL)
						if err != nil {
							t.Error(err)
							return
						}
						resp.Body.Close()
						if resp.StatusCode != 200 {
							t.Errorf("status %d", resp.StatusCode)
						}
					})
				}
				wg.Wait()
			}
			round()
			first := opened.Load()
			round()
			if first != inFlight || opened.Load()-first < int64(tt.wantNew) {
				t.Errorf("connections opened: %d in the first round, %d in the second; want %d and at least %d",
					first, opened.Load()-first, inFlight, tt.wantNew)
			}
		})
	}
}
