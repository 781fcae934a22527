package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/gateway"
	"github.com/portero-rl/portero/internal/plans"
	"github.com/portero-rl/portero/internal/replay"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/memstore"
)

// replayFlags are the options of `portero replay`.
type replayFlags struct {
	config, logFormat, format, chart, decisions, host string
	top                                               int
	window                                            time.Duration
}

// newReplayCmd builds `portero replay`: access logs through a whole
// configuration, as serve would decide them.
func newReplayCmd() *cobra.Command {
	var f replayFlags
	cmd := &cobra.Command{
		Use:   "replay --config FILE ACCESS_LOG...",
		Short: "Replay access logs through a configuration: what would it have refused, whom, and when?",
		Long: `replay decides every request of the access logs through a whole Portero
configuration (every rule, key, match, cost, shadow mode, quota and usage
plan) by the gateway's own decision path, the one 'portero serve' answers
with, on a virtual clock that follows the logs' times, and reports per rule
how many requests it would have refused, the keys refused most, and when.

Logs: nginx's and Apache's combined format, nginx's main, any nginx
log_format ('nginx:FORMAT') or Apache LogFormat ('apache:FORMAT'), the JSON
access log of 'portero serve --access-log' (json), and CSV with a header
line 'time,method,path,client_ip[,header:NAME…]' (csv); gzip-compressed or
not. Without --log-format each file's format is told from its first line.
Several files are merged by time.

A request is decided when it arrived: the logged response time is taken
off, and lines are put back in arrival order within --reorder-window. The
counters live in memory whatever the configuration's store says, so a
replay never touches a production Redis. Rules counted after the response
are settled with the response the log recorded, when it ended. Not
modelled: the overload section, server.max_in_flight, and requests
canceled while a queue holds them. A malformed line is counted, reported
with its file and line, and skipped.

--decisions FILE writes one row per request:
line,time,client,method,path,status,rule,decision, where status is what
serve would answer (200: passed on to the upstream). See
docs/operations.md.`,
		Example: `  portero replay --config portero.yaml /var/log/nginx/access.log*
  portero replay --config portero.yaml --chart refusals.svg --decisions decisions.csv access.log
  portero replay --config portero.yaml --log-format 'nginx:$remote_addr [$time_local] "$request" $status $msec $request_time "$http_x_api_key"' access.log`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErr(errors.New("give at least one access log"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return runReplay(cmd, f, args) },
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.config, "config", "c", "", "the configuration to try (YAML, as serve reads it)")
	fl.StringVar(&f.logFormat, "log-format", "", "combined, main, json, csv, nginx:'LOG_FORMAT' or apache:'LOGFORMAT'; empty to detect each file's")
	fl.StringVar(&f.format, "format", "table", "report format: table, csv or json")
	fl.StringVar(&f.chart, "chart", "", "draw the refusals over time to this file (.svg or .png)")
	fl.StringVar(&f.decisions, "decisions", "", "write one CSV row per request to this file")
	fl.StringVar(&f.host, "host", "", "Host of the requests whose log does not record one (for rules and routes that match a host)")
	fl.IntVar(&f.top, "top", 10, "how many of the keys refused most to list")
	fl.DurationVar(&f.window, "reorder-window", replay.DefaultReorderWindow, "how far out of order (by arrival) a log's lines may be and still be decided in order")
	return cmd
}

// runReplay replays the access logs at paths as f says.
func runReplay(cmd *cobra.Command, f replayFlags, paths []string) error {
	if f.config == "" {
		return usageErr(errors.New("--config is required: the configuration to try"))
	}
	if err := checkOneOf("--format", f.format, replay.ReportFormats...); err != nil {
		return err
	}
	if err := checkChart("--chart", f.chart); err != nil {
		return err
	}
	if f.logFormat != "" {
		if _, _, err := replay.ParseFormat(f.logFormat); err != nil {
			return usageErr(fmt.Errorf("--log-format: %w", err))
		}
	}
	cfg, err := config.LoadWith(f.config, config.Options{AllowUnsetEnv: true})
	if err != nil {
		return usageErr(err)
	}
	d, err := newGatewayDecider(cfg)
	if err != nil {
		return err
	}
	defer d.Close()
	rd, err := replay.Open(paths, replay.InputOptions{Format: f.logFormat, Host: f.host, ReorderWindow: f.window, Headers: d.headers,
		Query: d.query, RespHeaders: d.respHeaders}, func(p string) (io.ReadCloser, error) { return os.Open(p) })
	if err != nil {
		return usageErr(err)
	}
	defer rd.Close()
	opts := replay.Options{Top: f.top, MultipleFiles: len(paths) > 1, Tick: d.sweep}
	if f.decisions != "" {
		out, err := os.Create(f.decisions)
		if err != nil {
			return err
		}
		defer out.Close()
		opts.Decisions = out
	}
	defer debug.SetGCPercent(debug.SetGCPercent(replayGCPercent))
	rep, err := replay.Replay(cmd.Context(), rd, d, opts)
	if err != nil {
		return err
	}
	if err := rep.Write(cmd.OutOrStdout(), f.format); err != nil {
		return err
	}
	if f.chart != "" {
		return rep.Chart(f.chart)
	}
	return nil
}

// replayGCPercent is the collector's target during a replay: its live heap
// is small (the store's bounded state), and at the default of 100 the
// collector runs every few thousand lines.
const replayGCPercent = 400

// gatewayDecider decides replayed requests with a real gateway of the
// configuration over a memory store (gateway.Gateway.Decide: the route
// match and the limiter's one decision path that ServeHTTP uses).
type gatewayDecider struct {
	gw    *gateway.Gateway
	store *memstore.Store
	rules []replay.RuleInfo
	index map[string]int
	// headers are those the configuration reads: the only ones the
	// replay keeps from text logs.
	headers []string
	// respHeaders are the response headers its costs read: the only ones
	// kept from text logs.
	respHeaders []string
	// query: the configuration's keys read the query.
	query bool
	// keyHeader is where the API key goes (api_keys.header): a key the
	// access log recorded by its hash goes there as that hash, so that a
	// rule keyed on the header counts the same callers together.
	keyHeader string
	// settles: some rule is counted after the response; bytes: by the
	// response's body bytes.
	settles, bytes bool
	peer           string // the last peer, and its RemoteAddr form
	addr           string
	req            http.Request
	url            url.URL
	d              gateway.Decision
	out            replay.Decision
	// pending holds the requests in flight whose rules counted after the
	// response wait for its end, by the end of their responses, then by
	// arrival; free their memory for reuse.
	pending []*unsettled
	free    []*unsettled
	seq     int64
}

// unsettled is a request passed on whose response ends at due, with what
// its rules counted after the response wait for.
type unsettled struct {
	due  time.Time
	seq  int64
	o    gateway.Pending
	resp policy.Response
}

// hold keeps what the rules of the request just decided at now count after
// its response, to be settled with the response r's log recorded when it
// ended (r.Latency later), as serve settled it.
func (g *gatewayDecider) hold(now time.Time, r *replay.Request) {
	var ow *unsettled
	if n := len(g.free); n > 0 {
		ow, g.free = g.free[n-1], g.free[:n-1]
	} else {
		ow = &unsettled{}
	}
	if !g.gw.Pending(&g.d, now, &ow.o) {
		g.free = append(g.free, ow)
		return
	}
	g.seq++
	ow.due, ow.seq = now.Add(max(r.Latency, 0)), g.seq
	ow.resp = policy.Response{Status: r.Status, Header: http.Header(r.RespHeader).Clone(), Bytes: r.Bytes}
	i, _ := slices.BinarySearchFunc(g.pending, ow, func(a, b *unsettled) int { return cmp.Or(a.due.Compare(b.due), cmp.Compare(a.seq, b.seq)) })
	g.pending = slices.Insert(g.pending, i, ow)
}

// settleDue settles, at their ends, the responses that ended by now.
func (g *gatewayDecider) settleDue(now time.Time) error {
	for len(g.pending) > 0 && !g.pending[0].due.After(now) {
		ow := g.pending[0]
		g.pending[0], g.pending = nil, g.pending[1:]
		err := g.gw.Settle(context.Background(), &ow.o, &ow.resp, ow.due)
		ow.resp = policy.Response{}
		g.free = append(g.free, ow)
		var re *policy.RuleError
		if err != nil && !errors.As(err, &re) {
			return err
		}
		// A cost in the response that cannot be read: serve keeps that
		// rule's reservation, and so does the replay.
	}
	return nil
}

func newGatewayDecider(cfg *config.Config) (*gatewayDecider, error) {
	st, err := memstore.New(memstore.Config{MaxKeys: cfg.MaxKeys, SweepInterval: -1}) // swept on the replay's clock
	if err != nil {
		return nil, err
	}
	gw, err := gateway.New(cfg, st, gateway.Hooks{})
	if err != nil {
		st.Close(context.Background())
		return nil, err
	}
	g := &gatewayDecider{gw: gw, store: st, index: map[string]int{}, headers: cfg.RequestHeaders(), query: cfg.Policy.ReadsQuery(),
		keyHeader: plans.DefaultKeyHeader, settles: cfg.Policy.Settles(), bytes: cfg.Policy.ReadsResponseBytes()}
	if cfg.Gateway.Keys != nil {
		g.keyHeader = cfg.Gateway.KeyHeader
	}
	if g.respHeaders = cfg.Policy.ResponseHeaders(); g.respHeaders == nil {
		g.respHeaders = []string{}
	}
	g.keyHeader = http.CanonicalHeaderKey(g.keyHeader)
	if g.headers == nil {
		g.headers = []string{}
	}
	for i, r := range cfg.Policy.Rules() {
		g.rules = append(g.rules, replay.RuleInfo{Name: r.Name, Key: r.Key.String(), Limit: r.Limit.String(), Shadow: r.Shadow()})
		g.index[r.Name] = i
	}
	g.req = http.Request{Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, URL: &g.url}
	g.req = *g.req.WithContext(context.Background())
	return g, nil
}

func (g *gatewayDecider) Rules() []replay.RuleInfo { return g.rules }

func (g *gatewayDecider) sweep(now time.Time) { g.store.Sweep(now) }

func (g *gatewayDecider) Close() { g.store.Close(context.Background()) }

// Decide builds the http.Request serve would have received (its peer, Host,
// path, query and the logged headers, its API key as the access log
// recorded it) and decides it at now, after settling the responses that
// ended by now; for a request passed on, it holds what its rules count
// after the response, to settle them with the response the log recorded
// when it ends, as serve did once the upstream answered.
func (g *gatewayDecider) Decide(now time.Time, r *replay.Request) (*replay.Decision, error) {
	ctx := context.Background()
	if r.APIKey != "" {
		ctx = gateway.WithLoggedAPIKey(ctx, r.APIKey)
		if _, ok := r.Header[g.keyHeader]; !ok {
			r.Header[g.keyHeader] = []string{r.APIKey}
		}
	}
	if ctx != g.req.Context() {
		g.req = *g.req.WithContext(ctx)
	}
	req := &g.req
	req.Method, req.Host, req.Header = r.Method, r.Host, r.Header
	g.url = url.URL{Path: r.Path, RawQuery: r.RawQuery}
	if r.Peer != g.peer || g.addr == "" {
		g.peer, g.addr = r.Peer, ""
		if r.Peer != "" {
			g.addr = joinHostPort(r.Peer)
		}
	}
	req.RemoteAddr = g.addr
	req.ContentLength = r.ContentLength
	if req.ContentLength < 0 && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		req.ContentLength = 0 // what net/http sets for a request without a body
	}
	// The responses that ended by now, in the order they ended: serve had
	// settled them when this request arrived.
	if err := g.settleDue(now); err != nil {
		return nil, err
	}
	g.gw.Decide(req, now, &g.d)
	out := &g.out
	*out = replay.Decision{Status: g.d.Status, Rule: -1, Results: out.Results[:0], Client: g.d.ClientIP}
	if g.d.Answered != "" {
		out.Decision, out.Detail = g.d.Answered, g.d.Detail
		return out, nil
	}
	if g.settles && g.d.Verdict != nil && g.d.Verdict.Allowed {
		if r.Status == 0 || r.Answered || (g.bytes && r.Bytes < 0) {
			out.Unsettled = true
		} else {
			g.hold(now, r)
		}
	}
	switch out.Status {
	case 0:
		out.Status, out.Decision = http.StatusOK, "allowed" // passed on to the upstream
	case http.StatusNotFound:
		out.Decision = "no-route"
	case http.StatusTooManyRequests:
		out.Decision = "refused"
	case http.StatusServiceUnavailable:
		out.Decision = "unavailable"
	case http.StatusBadRequest, http.StatusLengthRequired:
		out.Decision = "bad-cost"
	}
	if err := g.d.Err; err != nil {
		var re *policy.RuleError
		if !errors.As(err, &re) {
			return nil, err
		}
		out.Detail = err.Error()
		if i, ok := g.index[re.Rule]; ok {
			out.Rule = i
			out.Results = append(out.Results, replay.RuleResult{Rule: i, Outcome: replay.BadCost})
		}
		return out, nil
	}
	v := g.d.Verdict
	if v == nil {
		out.Decision = "probe"
		return out, nil
	}
	if len(v.Results) == 0 && out.Decision == "allowed" {
		out.Decision = "no-rule"
	}
	for i := range v.Results {
		res := &v.Results[i]
		out.Results = append(out.Results, replay.RuleResult{Rule: res.Rule.Index, Key: res.Key,
			Outcome: replay.Outcome(res.Outcome.String()), Shadow: res.Rule.Shadow})
	}
	if i := v.Decider(); i >= 0 {
		out.Rule = v.Results[i].Rule.Index
		if v.Results[i].Outcome == engine.CanNeverPass && !v.Allowed {
			out.Decision = "can-never-pass"
			out.Detail = fmt.Sprintf("cost %d is more than the %d rule %s can ever admit", v.Results[i].Cost, v.Results[i].Rule.MaxCost(), v.Results[i].Rule.Name)
		}
	}
	return out, nil
}

// joinHostPort is a peer as RemoteAddr holds it, with a port of 0.
func joinHostPort(host string) string {
	if strings.IndexByte(host, ':') >= 0 && !strings.HasPrefix(host, "[") {
		return "[" + host + "]:0"
	}
	return host + ":0"
}
