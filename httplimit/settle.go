package httplimit

import (
	"cmp"
	"context"
	"maps"
	"net/http"
	"time"

	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/statuswriter"
	"github.com/portero-rl/portero/policy"
)

// Rules settled after the response (policy.Rule.Responses, a cost from the
// response): the middleware watches the response (status, header fields,
// body bytes) and settles with the engine once the handler returns; the
// response's RateLimit fields tell the state before the settlement.

// serveSettled serves r with next, watching the response, then settles
// pending (decided for req) with the engine.
func (cfg *Config) serveSettled(w http.ResponseWriter, r *http.Request, next http.Handler, req *policy.Request, pending []policy.Settlement) {
	rec := &statuswriter.Writer{ResponseWriter: w}
	next.ServeHTTP(rec, r)
	if rec.Status == 0 {
		rec.Status = http.StatusOK // a handler that wrote nothing: net/http sends 200
	}
	resp := &policy.Response{Status: rec.Status, Header: w.Header(), Bytes: rec.Bytes}
	// The client may be gone; the settlement still applies.
	perr, eerr, _ := cfg.settle(context.WithoutCancel(r.Context()), cfg.Now(), pending, req, resp, nil)
	for _, err := range []error{perr, eerr} {
		if err != nil && cfg.OnError != nil {
			cfg.OnError(r, err)
		}
	}
}

// settle settles pending (decided for req) with resp at now: the policy's
// adjustments (perr: a cost in the response that cannot be read keeps that
// rule's reservation), then the engine's (eerr); adj is reused.
func (cfg *Config) settle(ctx context.Context, now time.Time, pending []policy.Settlement, req *policy.Request, resp *policy.Response,
	adj []engine.Adjustment) (perr, eerr error, _ []engine.Adjustment) {
	adj, perr = cfg.Policy.Settle(pending, req, resp, adj[:0])
	return perr, cfg.engine.Settle(ctx, now, adj), adj
}

// Pending is what a request that Decide passed still has to settle once
// its response is known (count_responses, a cost from the response), for
// replaying traffic: Settle settles it with the logged response when that
// response ends, as Serve does once the handler has answered. The zero
// value settles nothing.
type Pending struct {
	pending []policy.Settlement
	req     policy.Request
	adj     []engine.Adjustment
}

// Pending sets p to what d, decided at now, settles once its response is
// known, and reports whether there is anything. p keeps what it needs of
// the request: d may be reused before Settle.
func (l *Limiter) Pending(d *Decision, now time.Time, p *Pending) bool {
	cfg := l.cfg.Load()
	if d.Verdict == nil || !cfg.Policy.Settles() {
		return false
	}
	if p.pending = cfg.Policy.Pending(d.Verdict, now, p.pending[:0]); len(p.pending) == 0 {
		return false
	}
	p.req = d.s.req
	p.req.Identity = maps.Clone(p.req.Identity)
	p.req.Header = map[string][]string(http.Header(p.req.Header).Clone())
	return true
}

// Settle settles p with resp, the response that ended at now, as Serve
// does; the error is the policy's, else the engine's.
func (l *Limiter) Settle(ctx context.Context, p *Pending, resp *policy.Response, now time.Time) error {
	if len(p.pending) == 0 {
		return nil
	}
	perr, eerr, adj := l.cfg.Load().settle(ctx, now, p.pending, &p.req, resp, p.adj)
	p.adj = adj
	return cmp.Or(perr, eerr)
}
