package main

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime/debug"
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

// newReplayCmd builds `portero replay`: access logs through a whole
// configuration, as serve would decide them.
func newReplayCmd() *cobra.Command {
	var (
		configPath, logFormat, format, chartPath, decisionsPath, host string
		top                                                           int
		window                                                        time.Duration
	)
	cmd := &cobra.Command{
		Use:   "replay --config FILE ACCESS_LOG...",
		Short: "Replay access logs through a configuration: what would it have refused, whom, and when?",
		Long: `replay decides every request of the access logs through a whole Portero
configuration — every rule, key, match, cost, shadow mode, quota and usage
plan, by the gateway's own decision path, the one 'portero serve' answers
with — on a
virtual clock that follows the logs' times, and reports per rule how many
requests it would have refused, the keys refused most, and when.

Logs: nginx's and Apache's combined format, nginx's main (with
X-Forwarded-For, which counts only from the configuration's trusted
proxies), any nginx log_format (--log-format 'nginx:FORMAT', such as one
with $msec, $request_time and "$http_x_api_key") or Apache LogFormat
('apache:FORMAT'), the JSON access log of 'portero serve --access-log'
(json), and CSV with a header line 'time,method,path,client_ip[,header:NAME…]'
(csv). Gzip-compressed files are read as they are. Without --log-format each
file's format is told from its first line. Several files are merged by time.

Time: a request is decided when it arrived. With sub-second times ($msec,
the JSON access log, CSV) that is its exact instant; with $time_local's whole
seconds, the requests of one second are decided at that second, in file
order. A log line is written when its response ends, so the log's
$request_time is taken off (whole seconds of it without $msec), and lines
are put back in arrival order within --reorder-window.

The counters live in memory whatever the configuration's store says, so a
replay never touches a production Redis; the decisions are the same (one
conformance suite). Rules counted after the response (count_responses, a
cost from the response) are settled with the response the log recorded
(status, body bytes, response headers), when it ended. Not modelled: the
overload section and server.max_in_flight, and requests canceled while a
queue holds them.

Every line gets a decision: a request whose cost is more than its rule can
ever admit is a refusal that says so (can-never-pass); a malformed line is
counted, reported with its file and line, and skipped.

--decisions FILE writes one row per request:
line,time,client,method,path,status,rule,decision — status is what serve
would answer (200: passed on to the upstream, which answers what it
answers; 429, 503, 400, 411, 403, 405 or 404 when Portero answers itself),
rule the rule that refused or, when allowed, the one closest to its limit.`,
		Example: `  portero replay --config portero.yaml /var/log/nginx/access.log*
  portero replay --config portero.yaml --chart refusals.svg --decisions decisions.csv access.log
  portero replay --config portero.yaml --log-format 'nginx:$remote_addr [$time_local] "$request" $status $msec $request_time "$http_x_api_key"' access.log`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErr(errors.New("give at least one access log"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if configPath == "" {
				return usageErr(errors.New("--config is required: the configuration to try"))
			}
			if err := checkOneOf("--format", format, replay.ReportFormats); err != nil {
				return err
			}
			if chartPath != "" {
				if err := checkChart(chartPath); err != nil {
					return err
				}
			}
			if logFormat != "" {
				if _, _, err := replay.ParseFormat(logFormat); err != nil {
					return usageErr(fmt.Errorf("--log-format: %w", err))
				}
			}
			cfg, err := config.LoadWith(configPath, config.Options{AllowUnsetEnv: true})
			if err != nil {
				return usageErr(err)
			}
			d, err := newGatewayDecider(cfg)
			if err != nil {
				return err
			}
			defer d.Close()
			rd, err := replay.Open(args, replay.InputOptions{Format: logFormat, Host: host, ReorderWindow: window, Headers: d.headers, Query: d.query, RespHeaders: d.respHeaders},
				func(p string) (io.ReadCloser, error) { return os.Open(p) })
			if err != nil {
				return usageErr(err)
			}
			defer rd.Close()
			opts := replay.Options{Top: top, MultipleFiles: len(args) > 1, Tick: d.sweep}
			if decisionsPath != "" {
				f, err := os.Create(decisionsPath)
				if err != nil {
					return err
				}
				defer f.Close()
				opts.Decisions = f
			}
			defer debug.SetGCPercent(debug.SetGCPercent(replayGCPercent))
			rep, err := replay.Replay(cmd.Context(), rd, d, opts)
			if err != nil {
				return err
			}
			if err := rep.Write(cmd.OutOrStdout(), format); err != nil {
				return err
			}
			if chartPath != "" {
				if err := rep.Chart(chartPath); err != nil {
					return err
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&configPath, "config", "c", "", "the configuration to try (YAML, as serve reads it)")
	f.StringVar(&logFormat, "log-format", "", "combined, main, json, csv, nginx:'LOG_FORMAT' or apache:'LOGFORMAT'; empty to detect each file's")
	f.StringVar(&format, "format", "table", "report format: table, csv or json")
	f.StringVar(&chartPath, "chart", "", "draw the refusals over time to this file (.svg or .png)")
	f.StringVar(&decisionsPath, "decisions", "", "write one CSV row per request to this file")
	f.StringVar(&host, "host", "", "Host of the requests whose log does not record one (for rules and routes that match a host)")
	f.IntVar(&top, "top", 10, "how many of the keys refused most to list")
	f.DurationVar(&window, "reorder-window", replay.DefaultReorderWindow, "how far out of order (by arrival) a log's lines may be and still be decided in order")
	return cmd
}

func checkOneOf(flag, v string, allowed []string) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return usageErr(fmt.Errorf("%s %q: want one of %s", flag, v, strings.Join(allowed, ", ")))
}

func checkChart(path string) error {
	lower := strings.ToLower(path)
	if !strings.HasSuffix(lower, ".svg") && !strings.HasSuffix(lower, ".png") {
		return usageErr(fmt.Errorf("--chart %q: want a file name ending in .svg or .png", path))
	}
	return nil
}

// replayGCPercent is the collector's target during a replay: the live heap
// is a few megabytes (the store's bounded state), so the default 100 would
// collect every few thousand lines; 400 costs a few megabytes more and
// saves about a tenth of the CPU (BenchmarkReplay, -benchtime 1000000x
// -cpu 1, 3 runs each with this set to 100 and to 400: 777k and 847k
// lines per CPU second).
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
	// owed holds the requests in flight whose rules counted after the
	// response wait for its end; free their memory for reuse.
	owed owedHeap
	free []*owed
	seq  int64
}

// owed is a request passed on whose response ends at due.
type owed struct {
	due  time.Time
	seq  int64
	o    gateway.Pending
	resp policy.Response
}

// owedHeap orders the owed by the end of their responses, then by arrival.
type owedHeap []*owed

func (h owedHeap) Len() int { return len(h) }
func (h owedHeap) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	return h[i].seq < h[j].seq
}
func (h owedHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *owedHeap) Push(x any)   { *h = append(*h, x.(*owed)) }
func (h *owedHeap) Pop() any {
	old := *h
	o := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return o
}

// owe keeps what the request just decided at now owes, to be settled with
// the response r's log recorded when that response ended (r.Latency
// later), as serve settled it.
func (g *gatewayDecider) owe(now time.Time, r *replay.Request) {
	var ow *owed
	if n := len(g.free); n > 0 {
		ow, g.free = g.free[n-1], g.free[:n-1]
	} else {
		ow = &owed{}
	}
	if !g.gw.Pending(&g.d, now, &ow.o) {
		g.free = append(g.free, ow)
		return
	}
	g.seq++
	ow.due, ow.seq = now.Add(max(r.Latency, 0)), g.seq
	ow.resp = policy.Response{Status: r.Status, Header: http.Header(r.RespHeader).Clone(), Bytes: r.Bytes}
	heap.Push(&g.owed, ow)
}

// payDue settles, at their ends, the responses that ended by now.
func (g *gatewayDecider) payDue(now time.Time) error {
	for len(g.owed) > 0 && !g.owed[0].due.After(now) {
		ow := heap.Pop(&g.owed).(*owed)
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
// ended by now; for a request passed on, it keeps what the rules counted
// after the response owe, to settle them with the response the log
// recorded when it ends (Gateway.Pending and Settle: as serve did once the
// upstream answered).
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
	if err := g.payDue(now); err != nil {
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
			g.owe(now, r)
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
