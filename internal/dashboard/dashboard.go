// Package dashboard is the live dashboard of Portero's admin listener: per
// rule what was allowed and refused over the last minutes, the keys
// closest to their limits and refused most, the quotas spent, the
// configuration running, and the store's health. `portero serve` and
// `portero rls` both mount it and feed it through the small Source
// interface.
//
// The page is one embedded HTML file, a style sheet and a script (no
// external asset, so it works on a closed network), updated over
// server-sent events or, where a proxy cuts those, by polling. It sits
// behind the admin token: a bearer token, or for a browser the cookie its
// login form sets, an HMAC of the token (not the token; changing the token
// logs everyone out). A Dashboard samples its Source once per
// Options.Interval and keeps Options.History samples: its memory is
// bounded.
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
	"strings"
	"sync"
	"time"
)

// Source is what a command tells the dashboard. Snapshot is called from
// one goroutine, once per interval, while the command serves.
type Source interface {
	Snapshot() Snapshot
}

// Snapshot is the state of a command at one instant. Counters are
// cumulative since the command started; the dashboard turns them into
// rates.
type Snapshot struct {
	Service string `json:"service"` // such as "portero serve"
	Config  Config `json:"config"`
	Rules   []Rule `json:"rules"`
	// TopRefused are the keys refused most recently, most first, over
	// TopRefusedWindow (such as "5 min").
	TopRefused       []Key        `json:"top_refused"`
	TopRefusedWindow string       `json:"top_refused_window,omitempty"`
	Usage            []UsageEntry `json:"usage"` // the keys closest to their limits
	Store            Store        `json:"store"`
	Requests         float64      `json:"requests"` // requests decided
}

// Config describes the configuration running: where it was read from,
// when it was applied, the reloads applied and refused.
type Config struct {
	Source       string    `json:"source"`
	Loaded       time.Time `json:"loaded"`
	Reloads      int64     `json:"reloads"`
	ReloadErrors int64     `json:"reload_errors"`
}

// Rule is one rule and its decision counters, by outcome name (allowed,
// near-limit, refused, shadow-refused, not-counted, check-only,
// can-never-pass).
type Rule struct {
	Name      string             `json:"name"`
	Key       string             `json:"key"`
	Algorithm string             `json:"algorithm,omitempty"`
	Limit     string             `json:"limit"`
	Mode      string             `json:"mode"`            // enforce or shadow
	Quota     bool               `json:"quota,omitempty"` // a calendar quota (per day, week or month)
	Counts    map[string]float64 `json:"counts"`
}

// Key is a refused key and how often it was refused.
type Key struct {
	Rule   string `json:"rule"`
	Key    string `json:"key"`
	Shadow bool   `json:"shadow,omitempty"`
	Count  int64  `json:"count"`
}

// Store is the store's health.
type Store struct {
	Type    string `json:"type"`     // memory or redis
	OnError string `json:"on_error"` // the failure policy
	// Connected is false while a Redis store has not reached Redis yet;
	// Fallback true while the failure policy decides instead of the store.
	Connected bool `json:"connected"`
	Fallback  bool `json:"fallback"`
	// Errors counts the decisions the store failed, FallbackDecisions the
	// rule decisions the failure policy made.
	Errors            float64   `json:"errors"`
	FallbackDecisions float64   `json:"fallback_decisions"`
	Latency           Histogram `json:"-"` // of decision times, in seconds
}

// Histogram is a cumulative histogram: Counts[i] observations were at most
// Bounds[i] seconds; Count in all.
type Histogram struct {
	Bounds []float64
	Counts []uint64
	Count  uint64
	Sum    float64
}

// Options configure a Dashboard; every field may be left zero.
type Options struct {
	// Token returns the admin token at each request (a reload may change
	// it); nil or "" means none, and the dashboard is open like the rest of
	// the admin listener.
	Token func() string
	// Prefix is the path the dashboard is mounted under: "/dashboard/".
	Prefix string
	// Interval is the time between samples (one second), History the
	// samples kept for the charts (900: 15 minutes).
	Interval time.Duration
	History  int
	// Ticks, when not nil, are the instants Run samples at (a test's
	// clock); nil samples at the start and then every Interval.
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

// sample is one point of the charts: per rule name, the rates per second
// of allowed, refused and shadow-refused decisions over the interval
// before it.
type sample struct {
	At       time.Time
	Rules    map[string][3]float64
	P50, P99 float64 // seconds; NaN without data
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

// Close ends the event streams of the pages watching, which would
// otherwise hold an http.Server's Shutdown until its deadline (register it
// with RegisterOnShutdown). Later streams end at once; the rest works on.
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
	s := sample{At: now, Rules: map[string][3]float64{}, P50: math.NaN(), P99: math.NaN()}
	if d.last != nil {
		s.Elapsed = now.Sub(d.lastAt).Seconds()
		s.P50, s.P99 = quantiles(snap.Store.Latency, d.last.Store.Latency)
	}
	prev := map[string]map[string]float64{}
	if d.last != nil {
		for _, r := range d.last.Rules {
			prev[r.Name] = r.Counts
		}
	}
	rate := func(cur, prev map[string]float64, outcomes ...string) float64 {
		if s.Elapsed <= 0 || prev == nil {
			return 0
		}
		var n float64
		for _, o := range outcomes {
			n += cur[o] - prev[o]
		}
		return math.Max(n, 0) / s.Elapsed
	}
	for _, r := range snap.Rules {
		p := prev[r.Name]
		s.Rules[r.Name] = [3]float64{rate(r.Counts, p, "allowed", "near-limit", "check-only"), rate(r.Counts, p, "refused", "can-never-pass"),
			rate(r.Counts, p, "shadow-refused")}
	}
	d.rps = 0
	if d.last != nil {
		if s.Elapsed > 0 {
			d.rps = math.Max(snap.Requests-d.last.Requests, 0) / s.Elapsed
		}
		d.samples[d.next] = s
		d.next = (d.next + 1) % len(d.samples)
		d.full = d.full || d.next == 0
	}
	d.last, d.lastAt = &snap, now
	d.state = d.encode(false)
	point, _ := json.Marshal(point{d.state, now.UnixMilli(), s.Rules, ms(s.P99)})
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
	// RefusedMinute counts the enforced rules' refusals of the last
	// minute's samples.
	RefusedMinute float64 `json:"refused_last_minute"`
	IntervalMS    int64   `json:"interval_ms"`
	// Latency is over the last minute's samples, in milliseconds (null
	// without data): the latest p50 and the worst p99.
	Latency struct {
		P50 *float64 `json:"p50_ms"`
		P99 *float64 `json:"p99_ms"`
	} `json:"latency"`
	Quotas  []UsageEntry `json:"quotas"`
	History *history     `json:"history,omitempty"`
	// Window counts each rule's allowed, refused and shadow-refused
	// decisions over the samples kept: what the rule cards show beside
	// their charts.
	Window map[string][3]float64 `json:"window"`
}

// point is one sample as sent live.
type point struct {
	State json.RawMessage       `json:"state"`
	T     int64                 `json:"t"`
	Rules map[string][3]float64 `json:"rules"` // allowed, refused, shadow per second
	P99   *float64              `json:"p99_ms"`
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
	st := state{IntervalMS: d.opts.Interval.Milliseconds()}
	if d.last == nil {
		b, _ := json.Marshal(st)
		return b
	}
	st.Snapshot, st.Now, st.RPS = *d.last, d.lastAt.UnixMilli(), d.rps
	st.Rules = nonNil(st.Rules)
	st.TopRefused = nonNil(st.TopRefused)
	st.Usage, st.Quotas = nonNil(st.Usage), []UsageEntry{}
	quota := map[string]bool{}
	for _, r := range st.Rules {
		quota[r.Name] = r.Quota
	}
	for _, u := range st.Usage {
		if quota[u.Rule] {
			st.Quotas = append(st.Quotas, u)
		}
	}
	samples := d.ordered()
	minute := d.lastAt.Add(-time.Minute)
	p50, p99 := math.NaN(), math.NaN()
	for _, s := range samples {
		if !s.At.After(minute) {
			continue
		}
		for _, r := range s.Rules {
			st.RefusedMinute += r[1] * s.Elapsed
		}
		if !math.IsNaN(s.P50) {
			p50 = s.P50
		}
		if !math.IsNaN(s.P99) && (math.IsNaN(p99) || s.P99 > p99) {
			p99 = s.P99
		}
	}
	st.Latency.P50, st.Latency.P99 = ms(p50), ms(p99)
	st.Window = d.window(samples)
	if withHistory {
		h := &history{T: []int64{}, Rules: map[string]*ruleHistory{}, P99: []*float64{}}
		for _, r := range st.Rules {
			h.Rules[r.Name] = &ruleHistory{Allowed: []float64{}, Refused: []float64{}, Shadow: []float64{}}
		}
		for _, s := range samples {
			h.T, h.P99 = append(h.T, s.At.UnixMilli()), append(h.P99, ms(s.P99))
			for name, rh := range h.Rules {
				v := s.Rules[name] // zero when the rule was not in the configuration then
				rh.Allowed, rh.Refused, rh.Shadow = append(rh.Allowed, v[0]), append(rh.Refused, v[1]), append(rh.Shadow, v[2])
			}
		}
		st.History = h
	}
	b, _ := json.Marshal(st)
	return b
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
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
			for i, v := range s.Rules[r.Name] {
				n[i] += v * s.Elapsed
			}
		}
		w[r.Name] = [3]float64{math.Round(n[0]), math.Round(n[1]), math.Round(n[2])}
	}
	return w
}

// cookieName is the dashboard's session cookie.
const cookieName = "portero_dashboard"

// cookieValue is what the cookie holds for token: an HMAC, not the token.
func cookieValue(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("portero dashboard session v1"))
	return hex.EncodeToString(m.Sum(nil))
}

func (d *Dashboard) token() string {
	if d.opts.Token == nil {
		return ""
	}
	return d.opts.Token()
}

// authorized reports whether r carries the token (bearer) or the
// dashboard's cookie for it.
func (d *Dashboard) authorized(r *http.Request) bool {
	token := d.token()
	if token == "" {
		return true
	}
	if got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok &&
		subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1 {
		return true
	}
	c, err := r.Cookie(cookieName)
	return err == nil && subtle.ConstantTimeCompare([]byte(c.Value), []byte(cookieValue(token))) == 1
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
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	// Everything comes from this origin: no external asset can load, and
	// no other site can frame the page.
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'")
	h.Set("Referrer-Policy", "no-referrer")
	switch {
	case rest == "login":
		d.login(w, r)
	case rest == "app.css": // the login page's style too: nothing in it is secret
		d.file(w, r, "app.css", "text/css; charset=utf-8")
	case !d.authorized(r) && (rest == "" || rest == "index.html"):
		d.loginPage(w, http.StatusUnauthorized, "")
	case !d.authorized(r):
		h.Set("WWW-Authenticate", `Bearer realm="portero-admin"`)
		http.Error(w, "a valid bearer token (or the dashboard's login) is required", http.StatusUnauthorized)
	case rest == "" || rest == "index.html":
		d.file(w, r, "index.html", "text/html; charset=utf-8")
	case rest == "app.js":
		d.file(w, r, "app.js", "text/javascript; charset=utf-8")
	case rest == "state":
		d.mu.Lock()
		b := d.encode(true)
		d.mu.Unlock()
		h.Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	case rest == "events":
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
	send := func(b []byte) bool {
		_, err := w.Write(b)
		return err == nil && rc.Flush() == nil
	}
	if !send([]byte("retry: 2000\n\n")) {
		return
	}
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-d.closed:
			return
		case b := <-ch:
			if !send(append(append([]byte("event: sample\ndata: "), b...), '\n', '\n')) {
				return
			}
		case <-keepalive.C:
			if !send([]byte(": keepalive\n\n")) {
				return
			}
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
	if token := d.token(); token != "" {
		if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("token")), []byte(token)) != 1 {
			d.loginPage(w, http.StatusUnauthorized, "That is not the admin token.")
			return
		}
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
