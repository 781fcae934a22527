package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/engine/header"
	"github.com/portero-rl/portero/httplimit"
	"github.com/portero-rl/portero/internal/apikey"
	"github.com/portero-rl/portero/internal/httpanswer"
	"github.com/portero-rl/portero/internal/plans"
	"github.com/portero-rl/portero/internal/quote"
	"github.com/portero-rl/portero/policy"
)

// The API-gateway model: a request's API key names its caller and plan
// (403 when missing, unknown or outside the plan's routes), and GET
// /v1/limits tells the caller which limits apply to it and how much of
// each is left, without counting.

// refusal is what the gateway answers itself before any limit is counted:
// 400 or 403, and why. The zero refusal lets the request in.
type refusal struct {
	status int
	detail string
}

// caller is what the API-gateway model decides about r (part of front): r
// with its API key's ID and plan as identities for the plans' rules; a
// refusal when the key header is given more than once (400), or the key is
// missing, unknown or its plan does not cover r (403); limits when r asks
// for GET /v1/limits (refused as the request it asks about would be).
func (t *table) caller(r *http.Request) (out *http.Request, ref refusal, limits bool) {
	gm := &t.cfg.Gateway
	if gm.Keys != nil {
		// A replayed request carries its key as the access log recorded
		// it (WithLoggedAPIKey), a served one in its header.
		logged, replayed := r.Context().Value(loggedKeyCtx{}).(string)
		raw := logged
		if !replayed {
			vs := r.Header[t.keyField]
			if len(vs) > 1 {
				// Which one would be charged is a guess a client could
				// exploit: refuse rather than pick.
				return r, refusal{http.StatusBadRequest, "the " + gm.KeyHeader + " header is given " + strconv.Itoa(len(vs)) +
					" times: send one API key (an API key identifies the one caller a request is counted for)"}, false
			}
			if len(vs) == 1 {
				raw = vs[0]
			}
		}
		if raw == "" {
			return r, refusal{http.StatusForbidden, "missing API key: send it in the " + gm.KeyHeader + " header (an API key identifies the caller for counting; it is not a credential)"}, false
		}
		var k apikey.Key
		var ok bool
		if replayed {
			k, ok = gm.Keys.LookupLogged(logged)
		} else {
			k, ok = gm.Keys.Lookup(raw)
		}
		if !ok {
			return r, refusal{http.StatusForbidden, "unknown API key in the " + gm.KeyHeader + " header"}, false
		}
		r = r.WithContext(httplimit.WithIdentities(r.Context(), map[string]string{plans.IdentityAPIKey: k.ID, plans.IdentityPlan: k.Plan}))
	}
	method, path := r.Method, r.URL.Path
	limits = gm.LimitsPath != "" && path == gm.LimitsPath
	if limits {
		method, path = asked(r)
		if method == "" {
			return r, refusal{}, true // every limit of the caller: no one request to check
		}
	}
	if gm.Keys != nil {
		plan := httplimit.Identity(r.Context())[plans.IdentityPlan]
		if pc := gm.Plans[plan]; pc != nil && !pc.Covers(&policy.Request{Method: method, Host: r.Host, Path: path, Header: r.Header}) {
			return r, refusal{http.StatusForbidden, "usage plan " + plan + " does not cover " + quote.Cut(method) + " " + quote.Cut(path)}, false
		}
	}
	return r, refusal{}, limits
}

// asked returns the request a GET /v1/limits asks about: its method and
// path query parameters, the one left out being the limits request's own;
// "" and "" when it gives neither (it asks about every limit of the caller).
func asked(r *http.Request) (method, path string) {
	q := r.URL.Query()
	method, path = q.Get("method"), q.Get("path")
	if method == "" && path == "" {
		return "", ""
	}
	return cmp.Or(method, r.Method), cmp.Or(path, r.URL.Path)
}

type loggedKeyCtx struct{}

// WithLoggedAPIKey returns ctx for a request replayed from serve's access
// log, which records the API key as apikey.Logged does (its SHA-256, never
// the key): the gateway then looks the caller up by that record instead of
// the key header (Decide answers what ServeHTTP answered for the key
// itself). "" is a request that presented no key.
func WithLoggedAPIKey(ctx context.Context, logged string) context.Context {
	return context.WithValue(ctx, loggedKeyCtx{}, logged)
}

// limitsStatus is the status of a request for the limits endpoint when
// the limits can be read: 405 for a method other than GET and HEAD.
func limitsStatus(method string) int {
	if method != http.MethodGet && method != http.MethodHead {
		return http.StatusMethodNotAllowed
	}
	return http.StatusOK
}

// LimitsAnswer is the body of GET /v1/limits.
type LimitsAnswer struct {
	Client LimitsClient `json:"client"`
	Limits []LimitView  `json:"limits"`
}

// LimitsClient is who asked.
type LimitsClient struct {
	IP     string `json:"ip,omitempty"`
	APIKey string `json:"api_key,omitempty"`
	Plan   string `json:"plan,omitempty"`
}

// LimitView is one limit that applies to the caller, and what is left of
// it now. Its figures are those of the decision the next request gets:
// that request is refused exactly when RetryAfterSeconds is set (its
// Retry-After), and otherwise leaves Remaining less its cost.
type LimitView struct {
	Name string `json:"name"`
	// Level is global, stage, method, plan, quota, rate-rule or rule.
	Level string `json:"level"`
	// AppliesTo is the requests the rule selects, such as "POST /orders";
	// for a plan's throttle and quota, the routes the plan covers.
	AppliesTo string `json:"applies_to"`
	// Shared reports a limit counted for every client together (the
	// installation's, a stage's), not for this caller alone.
	Shared    bool   `json:"shared"`
	Algorithm string `json:"algorithm"`
	Limit     string `json:"limit"`
	// Quota marks a calendar quota (per day, week or month).
	Quota bool `json:"quota,omitempty"`
	// Max is the most the rule admits at once, in units: the count of a
	// window or quota, the burst of a bucket.
	Max int64 `json:"max"`
	// Remaining is what is available now.
	Remaining int64  `json:"remaining"`
	Unit      string `json:"unit,omitempty"`
	// Cost, when not 1, is what the next request costs under the rule
	// (its reserve, or the cost header the limits request carries): the
	// cost the retry time is for.
	Cost int64 `json:"cost,omitempty"`
	// ResetSeconds is how long until the rule is whole again, from now.
	ResetSeconds int64 `json:"reset_seconds"`
	// RetryAfterSeconds, when the next request would be refused, is how
	// long until it would pass.
	RetryAfterSeconds int64 `json:"retry_after_seconds,omitempty"`
	// CanNeverPass: the next request costs more than the rule ever admits
	// at once; waiting does not help.
	CanNeverPass bool `json:"can_never_pass,omitempty"`
	// PeriodEndsSeconds is, for a quota, the time to the end of its period.
	PeriodEndsSeconds int64  `json:"period_ends_seconds,omitempty"`
	Mode              string `json:"mode,omitempty"`
	// DecidedBy names the failure policy when the store could not answer:
	// the figures are then not the shared count.
	DecidedBy string `json:"decided_by,omitempty"`
}

// limits answers GET /v1/limits: every limit that applies to the caller
// (or, with ?method=&path=, to that request), with what is left and what
// the next request gets, from the engine's peek at each rule's cost. The
// RateLimit fields come from the one header writer.
func (g *Gateway) limits(w http.ResponseWriter, r *http.Request, t *table) {
	if limitsStatus(r.Method) != http.StatusOK {
		w.Header().Set("Allow", "GET, HEAD")
		httpanswer.Error(w, http.StatusMethodNotAllowed, "GET "+t.cfg.Gateway.LimitsPath+" tells which limits apply and how much of each is left")
		return
	}
	method, path := asked(r)
	var v engine.Verdict
	pol, err := g.limiter.Limits(r, method, path, &v)
	if re := (*policy.RuleError)(nil); errors.As(err, &re) {
		httplimit.WriteCostError(w, re) // what the request itself would get
		return
	}
	if err != nil {
		httplimit.WriteUnavailable(w, 0, "the limits cannot be read now: "+err.Error())
		return
	}
	id := httplimit.Identity(r.Context())
	ans := LimitsAnswer{Client: LimitsClient{APIKey: id[plans.IdentityAPIKey], Plan: id[plans.IdentityPlan]}, Limits: []LimitView{}}
	if ip := t.cfg.ClientIP.Resolve(r); ip.IsValid() {
		ans.Client.IP = ip.String()
	}
	for i := range v.Results {
		res := &v.Results[i]
		if pr := pol.RuleOf(res.Rule); pr != nil {
			ans.Limits = append(ans.Limits, view(res, pr, &t.cfg.Gateway, ans.Client.Plan))
		}
	}
	body, _ := json.MarshalIndent(ans, "", "  ")
	body = append(body, '\n')
	h := w.Header()
	g.limiter.SetLimitsHeaders(h, &v)
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}

// view is the LimitView of the look res at rule pr, for a caller in plan.
func view(res *engine.Result, pr *policy.Rule, gm *plans.Model, plan string) LimitView {
	d := res.Decision
	lv := LimitView{
		Name: pr.Name, Level: cmp.Or(gm.Levels[pr.Name], "rule"), AppliesTo: pr.Match.String(), Shared: !pr.Key.PerClient(),
		Algorithm: string(pr.Algorithm), Limit: pr.Limit.String(), Quota: d.Quota, Max: d.Limit, Remaining: max(d.Remaining, 0),
		Unit: res.Rule.Unit, ResetSeconds: header.CeilSeconds(d.ResetAfter), DecidedBy: string(res.Failure),
	}
	if pc := gm.Plans[plan]; pc != nil && len(pc.Routes) > 0 && (lv.Level == "plan" || lv.Level == "quota") {
		routes := make([]string, len(pc.Routes))
		for i := range pc.Routes {
			routes[i] = pc.Routes[i].String()
		}
		lv.AppliesTo = strings.Join(routes, ", ")
	}
	if res.Cost != 1 {
		lv.Cost = res.Cost
	}
	if pr.Shadow() {
		lv.Mode = "shadow"
	}
	switch {
	case res.Outcome == engine.CanNeverPass:
		lv.CanNeverPass = true
	case !d.Allowed:
		lv.RetryAfterSeconds = max(header.CeilSeconds(d.RetryAfter), 1)
	}
	if d.Quota {
		lv.PeriodEndsSeconds = header.CeilSeconds(d.PeriodLeft)
	}
	return lv
}
