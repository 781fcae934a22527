// Package dashboard is the live dashboard of Portero's admin listener: per
// rule, what was allowed and refused over the last minutes; the rules and
// keys closest to their limits; the keys refused most; the quotas spent;
// the configuration running and where it came from; and the store's health
// (latency, failure-policy state, fallback decisions). `portero serve` and
// `portero rls` both mount it, each feeding it through the small Source
// interface.
//
// The page is one HTML file, a style sheet and a script, embedded with
// go:embed: no external asset, no CDN, so it works on a closed network. It
// updates live from server-sent events, and falls back to polling where
// those are cut by a proxy. It sits behind the admin token: requests carry
// it as a bearer token, or, for a browser, in a cookie that the page's
// login form sets (an HMAC of the token, so that the cookie is not the
// token and changing the token logs everyone out).
//
// A Dashboard samples its Source once per Options.Interval in Run (or when
// Sample is called, with the instant given: tests drive it on their own
// clock) and keeps Options.History samples: its memory is bounded.
package dashboard

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"html"
	"io/fs"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// Source is what a command tells the dashboard. Snapshot is called from
// one goroutine, once per interval; it must be safe to call while the
// command serves.
type Source interface {
	Snapshot() Snapshot
}

// Snapshot is the state of a command at one instant. Counters are
// cumulative since the command started; the dashboard turns them into
// rates.
type Snapshot struct {
	// Service names the command, such as "portero serve".
	Service string `json:"service"`
	// Config is the configuration running.
	Config Config `json:"config"`
	// Rules are the rules of the configuration with their counters.
	Rules []Rule `json:"rules"`
	// TopRefused are the keys refused most recently (the command's own
	// bounded list, such as serve's /api/refused), most first.
	TopRefused []Key `json:"top_refused"`
	// TopRefusedWindow says over how long TopRefused counts, such as 5m.
	TopRefusedWindow string `json:"top_refused_window,omitempty"`
	// Usage are the keys closest to their limits (a Usage tracker's Top).
	Usage []UsageEntry `json:"usage"`
	// Store is the store's health.
	Store Store `json:"store"`
	// Requests counts the requests decided.
	Requests float64 `json:"requests"`
}

// Config describes the configuration running.
type Config struct {
	// Source is the file it was read from (or the built-in default).
	Source string `json:"source"`
	// Loaded is when it was applied.
	Loaded time.Time `json:"loaded"`
	// Reloads and ReloadErrors count the reloads applied and refused.
	Reloads      int64 `json:"reloads"`
	ReloadErrors int64 `json:"reload_errors"`
}

// Rule is one rule and its decision counters.
type Rule struct {
	Name      string `json:"name"`
	Key       string `json:"key"`
	Algorithm string `json:"algorithm,omitempty"`
	Limit     string `json:"limit"`
	// Mode is enforce or shadow.
	Mode string `json:"mode"`
	// Quota is true for a calendar quota (per day, week or month).
	Quota bool `json:"quota,omitempty"`
	// Counts are the decisions by outcome name (allowed, near-limit,
	// refused, shadow-refused, not-counted, check-only, can-never-pass).
	Counts map[string]float64 `json:"counts"`
}

// Key is a refused key.
type Key struct {
	Rule   string `json:"rule"`
	Key    string `json:"key"`
	Shadow bool   `json:"shadow,omitempty"`
	Count  int64  `json:"count"`
}

// Store is the store's health.
type Store struct {
	// Type is memory or redis.
	Type string `json:"type"`
	// OnError is the failure policy: allow, deny, local or error.
	OnError string `json:"on_error"`
	// Connected is false while a Redis store has not reached Redis yet.
	Connected bool `json:"connected"`
	// Fallback is true while the failure policy decides instead of the
	// store.
	Fallback bool `json:"fallback"`
	// Errors counts the decisions the store failed; FallbackDecisions the
	// rule decisions the failure policy made.
	Errors            float64 `json:"errors"`
	FallbackDecisions float64 `json:"fallback_decisions"`
	// Latency is the cumulative histogram of decision times, in seconds.
	Latency Histogram `json:"-"`
}

// Histogram is a cumulative histogram: Counts[i] observations were at most
// Bounds[i] seconds; Count in all.
type Histogram struct {
	Bounds []float64
	Counts []uint64
	Count  uint64
	Sum    float64
}

// Options configure a Dashboard.
type Options struct {
	// Token returns the admin token at each request (a reload may change
	// it); nil or "" means none, and the dashboard is open like the rest of
	// the admin listener.
	Token func() string
	// Prefix is the path the dashboard is mounted under; empty means
	// "/dashboard/".
	Prefix string
	// Interval is the time between samples; 0 means one second.
	Interval time.Duration
	// History is the number of samples kept for the charts; 0 means 900
	// (15 minutes at one a second).
	History int
	// Ticks, when not nil, are the instants Run samples at, one per value
	// received (a test's or a simulation's clock); nil samples once at the
	// start and then every Interval of the wall clock.
	Ticks <-chan time.Time
}

// Dashboard serves the page and its data. It is safe for concurrent use.
type Dashboard struct {
	src    Source
	opts   Options
	assets fs.FS

	mu      sync.Mutex
	samples []sample // ring, oldest first once full
	next    int
	full    bool
	last    *Snapshot
	lastAt  time.Time
	rps     float64 // requests per second in the last sample
	state   []byte  // the latest state, as sent to clients
	subs    map[chan []byte]struct{}
	closed  chan struct{}
	once    sync.Once
}

// sample is one point of the charts: per rule, rates per second over the
// interval before it.
type sample struct {
	At       time.Time
	Allowed  []float64 // by rule, in the order of the snapshot's rules
	Refused  []float64
	Shadow   []float64
	Names    []string
	P50, P99 float64 // seconds, over the interval; NaN without data
	Fallback bool
	Requests float64 // per second
	Elapsed  float64 // seconds since the sample before
}

//go:embed assets
var assetFS embed.FS

// New returns a dashboard of src. Call Run (or Sample) to feed it.
func New(src Source, o Options) *Dashboard {
	if o.Prefix == "" {
		o.Prefix = "/dashboard/"
	}
	if !strings.HasSuffix(o.Prefix, "/") {
		o.Prefix += "/"
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.History <= 0 {
		o.History = 900
	}
	sub, _ := fs.Sub(assetFS, "assets")
	return &Dashboard{src: src, opts: o, assets: sub, samples: make([]sample, o.History), subs: map[chan []byte]struct{}{},
		closed: make(chan struct{})}
}

// Close ends the event streams of the pages watching (they would otherwise
// hold an http.Server's Shutdown until its deadline: register it with
// RegisterOnShutdown). Later streams end at once; the rest keeps working.
func (d *Dashboard) Close() { d.once.Do(func() { close(d.closed) }) }

// Run samples every Interval (or at Options.Ticks) until ctx is done.
func (d *Dashboard) Run(ctx context.Context) {
	ticks := d.opts.Ticks
	if ticks == nil {
		t := time.NewTicker(d.opts.Interval)
		defer t.Stop()
		ticks = t.C
		d.Sample(time.Now())
	}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-ticks:
			d.Sample(now)
		}
	}
}

// Sample takes a snapshot at now, adds a point to the charts and sends the
// new state to every page watching.
func (d *Dashboard) Sample(now time.Time) {
	snap := d.src.Snapshot()
	d.mu.Lock()
	defer d.mu.Unlock()
	s := sample{At: now, P50: math.NaN(), P99: math.NaN(), Fallback: snap.Store.Fallback}
	var elapsed float64
	if d.last != nil {
		elapsed = now.Sub(d.lastAt).Seconds()
	}
	s.Elapsed = elapsed
	prevRule := map[string]map[string]float64{}
	if d.last != nil {
		for _, r := range d.last.Rules {
			prevRule[r.Name] = r.Counts
		}
	}
	rate := func(cur, prev map[string]float64, outcomes ...string) float64 {
		if elapsed <= 0 || prev == nil {
			return 0
		}
		var n float64
		for _, o := range outcomes {
			n += cur[o] - prev[o]
		}
		return math.Max(n, 0) / elapsed
	}
	for _, r := range snap.Rules {
		p := prevRule[r.Name]
		s.Names = append(s.Names, r.Name)
		s.Allowed = append(s.Allowed, rate(r.Counts, p, "allowed", "near-limit", "check-only"))
		s.Refused = append(s.Refused, rate(r.Counts, p, "refused", "can-never-pass"))
		s.Shadow = append(s.Shadow, rate(r.Counts, p, "shadow-refused"))
	}
	if d.last != nil {
		s.P50, s.P99 = quantiles(snap.Store.Latency, d.last.Store.Latency)
		if elapsed > 0 {
			s.Requests = math.Max(snap.Requests-d.last.Requests, 0) / elapsed
		}
	}
	if d.last != nil {
		d.samples[d.next] = s
		d.next = (d.next + 1) % len(d.samples)
		if d.next == 0 {
			d.full = true
		}
	}
	d.last, d.lastAt, d.rps = &snap, now, s.Requests
	d.state = d.encode(false)
	point := d.encodePoint(s)
	for ch := range d.subs {
		select {
		case ch <- point:
		default: // a slow page misses a point rather than slow the others
		}
	}
}

// quantiles estimates the median and 99th percentile of the observations
// between two cumulative histograms, interpolating within a bucket (as
// Prometheus's histogram_quantile does); NaN when there were none.
func quantiles(cur, prev Histogram) (p50, p99 float64) {
	n := float64(cur.Count) - float64(prev.Count)
	if n <= 0 || len(cur.Bounds) == 0 || len(prev.Counts) != len(cur.Counts) {
		return math.NaN(), math.NaN()
	}
	q := func(phi float64) float64 {
		rank := phi * n
		lower, below := 0.0, 0.0
		for i, b := range cur.Bounds {
			c := float64(cur.Counts[i]) - float64(prev.Counts[i])
			if c >= rank {
				if c == below {
					return b
				}
				return lower + (b-lower)*(rank-below)/(c-below)
			}
			lower, below = b, c
		}
		return cur.Bounds[len(cur.Bounds)-1] // beyond the last bound
	}
	return q(0.5), q(0.99)
}

// state is what the page reads: the latest snapshot, derived figures and,
// when asked, the history.
type state struct {
	Snapshot
	Now int64   `json:"now"` // unix ms of the sample
	RPS float64 `json:"requests_per_second"`
	// RefusedMinute counts the rule refusals (enforced) of the last
	// minute's samples.
	RefusedMinute float64      `json:"refused_last_minute"`
	IntervalMS    int64        `json:"interval_ms"` // between samples
	Latency       latency      `json:"latency"`
	Quotas        []UsageEntry `json:"quotas"`
	History       *history     `json:"history,omitempty"`
	// Window counts each rule's decisions over the samples kept, by rule
	// name: allowed (with near-limit and check-only), refused (with
	// can-never-pass) and shadow-refused, what the rule cards show beside
	// their charts.
	Window map[string][3]float64 `json:"window"`
}

type latency struct {
	// P50 and P99 over the last minute's samples, in milliseconds; null
	// without data.
	P50 *float64 `json:"p50_ms"`
	P99 *float64 `json:"p99_ms"`
}

type history struct {
	T     []int64                 `json:"t"`
	Rules map[string]*ruleHistory `json:"rules"`
	P99   []*float64              `json:"p99_ms"`
}

type ruleHistory struct {
	Allowed []float64 `json:"allowed"`
	Refused []float64 `json:"refused"`
	Shadow  []float64 `json:"shadow"`
}

// point is one sample as sent live.
type point struct {
	State json.RawMessage       `json:"state"`
	T     int64                 `json:"t"`
	Rules map[string][3]float64 `json:"rules"` // allowed, refused, shadow per second
	P99   *float64              `json:"p99_ms"`
}

func ms(f float64) *float64 {
	if math.IsNaN(f) {
		return nil
	}
	v := f * 1000
	return &v
}

func (d *Dashboard) ordered() []sample {
	if d.full {
		return append(append([]sample(nil), d.samples[d.next:]...), d.samples[:d.next]...)
	}
	return d.samples[:d.next]
}

// encode renders the state; d.mu is held.
func (d *Dashboard) encode(withHistory bool) []byte {
	if d.last == nil {
		b, _ := json.Marshal(state{IntervalMS: d.opts.Interval.Milliseconds()})
		return b
	}
	st := state{Snapshot: *d.last, Now: d.lastAt.UnixMilli(), RPS: d.rps, IntervalMS: d.opts.Interval.Milliseconds()}
	if st.Rules == nil {
		st.Rules = []Rule{}
	}
	if st.TopRefused == nil {
		st.TopRefused = []Key{}
	}
	if st.Usage == nil {
		st.Usage = []UsageEntry{}
	}
	st.Quotas = []UsageEntry{}
	quota := map[string]bool{}
	for _, r := range st.Rules {
		quota[r.Name] = r.Quota
	}
	for _, u := range st.Usage {
		if quota[u.Rule] {
			st.Quotas = append(st.Quotas, u)
		}
	}
	// Latency over the last minute: the median of the samples' medians
	// would be wrong; keep it simple and honest with the worst p99 and the
	// latest p50 of the samples that had data.
	samples := d.ordered()
	minute := d.lastAt.Add(-time.Minute)
	var p50, p99 = math.NaN(), math.NaN()
	for _, s := range samples {
		if !s.At.After(minute) {
			continue
		}
		for _, r := range s.Refused {
			st.RefusedMinute += r * s.Elapsed
		}
		if !math.IsNaN(s.P50) {
			p50 = s.P50
		}
		if !math.IsNaN(s.P99) && (math.IsNaN(p99) || s.P99 > p99) {
			p99 = s.P99
		}
	}
	st.Latency = latency{P50: ms(p50), P99: ms(p99)}
	st.Window = d.window(samples)
	if withHistory {
		h := &history{Rules: map[string]*ruleHistory{}}
		for _, r := range st.Rules {
			h.Rules[r.Name] = &ruleHistory{Allowed: []float64{}, Refused: []float64{}, Shadow: []float64{}}
		}
		for _, s := range samples {
			h.T = append(h.T, s.At.UnixMilli())
			h.P99 = append(h.P99, ms(s.P99))
			for _, r := range st.Rules {
				rh := h.Rules[r.Name]
				a, rf, sh := valueOf(s, r.Name)
				rh.Allowed, rh.Refused, rh.Shadow = append(rh.Allowed, a), append(rh.Refused, rf), append(rh.Shadow, sh)
			}
		}
		if h.T == nil {
			h.T, h.P99 = []int64{}, []*float64{}
		}
		st.History = h
	}
	b, _ := json.Marshal(st)
	return b
}

// window returns the decisions of each rule of the latest snapshot over
// the samples kept. Until the history is full they span the whole run, so
// the snapshot's counters, cumulative since the start, are the window's
// exactly; after, the samples' rates times their intervals. d.mu is held.
func (d *Dashboard) window(samples []sample) map[string][3]float64 {
	w := make(map[string][3]float64, len(d.last.Rules))
	for _, r := range d.last.Rules {
		if !d.full {
			c := r.Counts
			w[r.Name] = [3]float64{c["allowed"] + c["near-limit"] + c["check-only"], c["refused"] + c["can-never-pass"], c["shadow-refused"]}
			continue
		}
		var n [3]float64
		for _, s := range samples {
			a, rf, sh := valueOf(s, r.Name)
			n[0], n[1], n[2] = n[0]+a*s.Elapsed, n[1]+rf*s.Elapsed, n[2]+sh*s.Elapsed
		}
		w[r.Name] = [3]float64{math.Round(n[0]), math.Round(n[1]), math.Round(n[2])}
	}
	return w
}

// valueOf returns a sample's rates for the rule named (0 when the rule was
// not in the configuration then).
func valueOf(s sample, name string) (allowed, refused, shadow float64) {
	for i, n := range s.Names {
		if n == name {
			return s.Allowed[i], s.Refused[i], s.Shadow[i]
		}
	}
	return 0, 0, 0
}

func (d *Dashboard) encodePoint(s sample) []byte {
	p := point{State: d.state, T: s.At.UnixMilli(), Rules: map[string][3]float64{}, P99: ms(s.P99)}
	for i, n := range s.Names {
		p.Rules[n] = [3]float64{s.Allowed[i], s.Refused[i], s.Shadow[i]}
	}
	b, _ := json.Marshal(p)
	return b
}

// cookieName is the dashboard's session cookie.
const cookieName = "portero_dashboard"

// cookieValue is what the cookie holds for token: an HMAC, not the token.
func cookieValue(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("portero dashboard session v1"))
	return hex.EncodeToString(m.Sum(nil))
}

// authorized reports whether r carries the token (bearer) or the
// dashboard's cookie for it.
func (d *Dashboard) authorized(r *http.Request) bool {
	var token string
	if d.opts.Token != nil {
		token = d.opts.Token()
	}
	if token == "" {
		return true
	}
	if got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok &&
		subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1 {
		return true
	}
	if c, err := r.Cookie(cookieName); err == nil && subtle.ConstantTimeCompare([]byte(c.Value), []byte(cookieValue(token))) == 1 {
		return true
	}
	return false
}

// ServeHTTP serves the dashboard under its prefix: the page, its assets,
// /state (JSON, with the history), /events (server-sent events, one per
// sample) and /login.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, d.opts.Prefix)
	if !ok {
		if r.URL.Path+"/" == d.opts.Prefix {
			http.Redirect(w, r, d.opts.Prefix, http.StatusFound)
			return
		}
		http.NotFound(w, r)
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	// Everything comes from this origin: no external asset can load, and
	// no other site can frame the page.
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'")
	w.Header().Set("Referrer-Policy", "no-referrer")
	switch rest {
	case "login":
		d.login(w, r)
		return
	case "app.css":
		// The login page's style too: nothing in it is secret.
		d.file(w, r, "app.css", "text/css; charset=utf-8")
		return
	}
	if !d.authorized(r) {
		if rest == "" || rest == "index.html" {
			d.loginPage(w, http.StatusUnauthorized, "")
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="portero-admin"`)
		http.Error(w, "a valid bearer token (or the dashboard's login) is required", http.StatusUnauthorized)
		return
	}
	switch rest {
	case "", "index.html":
		d.file(w, r, "index.html", "text/html; charset=utf-8")
	case "app.js":
		d.file(w, r, "app.js", "text/javascript; charset=utf-8")
	case "state":
		d.mu.Lock()
		b := d.encode(true)
		d.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	case "events":
		d.events(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (d *Dashboard) file(w http.ResponseWriter, r *http.Request, name, ctype string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	b, err := fs.ReadFile(d.assets, name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", ctype)
	_, _ = w.Write(b)
}

// events streams one event per sample until the client goes away.
func (d *Dashboard) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // the stream outlives any write timeout
	ch := make(chan []byte, 4)
	d.mu.Lock()
	d.subs[ch] = struct{}{}
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.subs, ch)
		d.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no") // nginx in front: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("retry: 2000\n\n"))
	fl.Flush()
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-d.closed:
			return
		case b := <-ch:
			if _, err := w.Write(append(append([]byte("event: sample\ndata: "), b...), '\n', '\n')); err != nil {
				return
			}
			fl.Flush()
		case <-keepalive.C:
			if _, err := w.Write([]byte(": keepalive\n\n")); err != nil {
				return
			}
			fl.Flush()
		}
	}
}

// login checks the token a person typed and sets the session cookie.
func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		d.loginPage(w, http.StatusOK, "")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if err := r.ParseForm(); err != nil {
		d.loginPage(w, http.StatusBadRequest, "The form could not be read.")
		return
	}
	var token string
	if d.opts.Token != nil {
		token = d.opts.Token()
	}
	if token != "" && subtle.ConstantTimeCompare([]byte(r.PostForm.Get("token")), []byte(token)) != 1 {
		d.loginPage(w, http.StatusUnauthorized, "That is not the admin token.")
		return
	}
	if token != "" {
		http.SetCookie(w, &http.Cookie{Name: cookieName, Value: cookieValue(token), Path: d.opts.Prefix, HttpOnly: true,
			Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	}
	http.Redirect(w, r, d.opts.Prefix, http.StatusSeeOther)
}

func (d *Dashboard) loginPage(w http.ResponseWriter, status int, msg string) {
	b, _ := fs.ReadFile(d.assets, "login.html")
	page := strings.Replace(string(b), "{{action}}", d.opts.Prefix+"login", 1)
	page = strings.Replace(page, "{{message}}", html.EscapeString(msg), 1)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(page))
}

// sortUsage orders entries by the share of their limit used, most first.
func sortUsage(us []UsageEntry) {
	sort.SliceStable(us, func(i, j int) bool {
		a, b := us[i], us[j]
		return float64(a.Used)*float64(b.Limit) > float64(b.Used)*float64(a.Limit)
	})
}
