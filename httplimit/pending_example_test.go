package httplimit_test

import (
	"context"
	"fmt"
	"log"
	"net/http/httptest"
	"slices"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/memstore"
)

// ExampleLimiter_Pending replays logged requests through a rule that counts
// only failed logins: Decide decides each at its logged instant, Pending
// keeps what it still has to settle, and Settle settles it with the logged
// response when that response ended — here the first failure is still in
// flight when the second arrives, as it was when served, so the second
// passes too.
func ExampleLimiter_Pending() {
	failed, _ := policy.ParseStatuses([]string{"401"})
	p, err := policy.New([]policy.Rule{{Name: "login-failures", Key: policy.MustParseKey("ip"), Algorithm: portero.SlidingLog,
		Limit: portero.MustParseLimit("2/min"), Responses: failed}}, policy.Options{})
	if err != nil {
		log.Fatal(err)
	}
	st, _ := memstore.New(memstore.Config{})
	defer st.Close(context.Background())
	l, err := httplimit.New(httplimit.Config{Policy: p, Store: st})
	if err != nil {
		log.Fatal(err)
	}
	t0 := time.Date(2026, 5, 1, 9, 30, 0, 0, time.UTC)
	logged := []struct {
		at, took time.Duration
		status   int
	}{{0, 2 * time.Second, 401}, {time.Second, 0, 401}, {3 * time.Second, 0, 200}}
	type inFlight struct {
		o   httplimit.Pending
		end time.Time
		st  int
	}
	var flying []*inFlight
	for _, e := range logged {
		now := t0.Add(e.at)
		for len(flying) > 0 && !flying[0].end.After(now) { // the responses that ended by now
			f := flying[0]
			flying = flying[1:]
			l.Settle(context.Background(), &f.o, &policy.Response{Status: f.st}, f.end)
		}
		r := httptest.NewRequest("POST", "/login", nil)
		var d httplimit.Decision
		l.Decide(r, "", now, &d)
		fmt.Println(e.at, d.Status)
		f := &inFlight{end: now.Add(e.took), st: e.status}
		if l.Pending(&d, now, &f.o) {
			flying = append(flying, f)
			slices.SortStableFunc(flying, func(a, b *inFlight) int { return a.end.Compare(b.end) })
		}
	}
	// Output:
	// 0s 0
	// 1s 0
	// 3s 429
}
