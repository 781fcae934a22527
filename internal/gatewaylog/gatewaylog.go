// Package gatewaylog is the access log's wrapper around `portero serve`'s
// gateway: each request's accesslog.Entry is begun before it is decided,
// filled by the gateway's hooks (route, decision) through the request's
// context, and written once the response is done. What a line records is
// what the running configuration reads, secrets by their SHA-256: the API
// key, the cookies and query arguments keys read, the headers only keys
// read.
package gatewaylog

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portero-rl/portero/clientip"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/accesslog"
	"github.com/portero-rl/portero/internal/apikey"
	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/statuswriter"
	"github.com/portero-rl/portero/policy"
)

// Options configure serve's access log.
type Options struct {
	// Path is the file, "-" for standard output, or empty for none;
	// Format json (when empty) or text; Buffer the most lines waiting for
	// the disk (0: accesslog.DefaultBuffer), beyond which a line is dropped
	// and counted.
	Path, Format string
	Buffer       int
	// Headers are request headers to record as sent besides those the
	// configuration reads, for a replay of a configuration that reads
	// them; never the api_keys header, recorded by its hash alone.
	Headers []string
}

// Log is a running access log.
type Log struct {
	o    Options
	w    *accesslog.Writer
	now  func() time.Time
	spec atomic.Pointer[spec]
}

// spec is what the access log records of a request under the running
// configuration.
type spec struct {
	clientIP *clientip.Config
	headers  []string // request headers, canonical
	// hashed are those of headers recorded as their SHA-256, by name:
	// "header:NAME=", their part in a rule's key.
	hashed map[string]string
	resp   []string // response headers the costs read
	// queries and cookies are those the keys read, the only ones the query
	// and the Cookie header keep, each value as its SHA-256 (a key needs
	// only to tell values apart).
	queries, cookies []string
	// keyHeader is the api_keys header, recorded by its hash; empty
	// without API keys.
	keyHeader, keyLabel string
}

// Open starts the access log o names, its counters registered on reg,
// stamped by now; nil when o names none.
func Open(o Options, stdout io.Writer, reg *prometheus.Registry, now func() time.Time) (*Log, error) {
	if o.Path == "" {
		return nil, nil
	}
	w, err := accesslog.New(accesslog.Options{Path: o.Path, Format: o.Format, Buffer: o.Buffer, Stdout: stdout})
	if err != nil {
		return nil, err
	}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "portero_access_log_dropped_total",
			Help: "Access log lines dropped because the disk was slower than the requests and the buffer was full."},
			func() float64 { return float64(w.Dropped()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "portero_access_log_lines_total",
			Help: "Access log lines written."},
			func() float64 { return float64(w.Written()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "portero_access_log_write_errors_total",
			Help: "Access log writes that failed (a full disk); the lines are lost."},
			func() float64 { n, _ := w.Errors(); return float64(n) }),
	)
	return &Log{o: o, w: w, now: now}, nil
}

// Close writes what is queued and closes the file.
func (l *Log) Close() error { return l.w.Close() }

// ReopenOn reopens the file for every value on c until ctx is done (serve
// sends one per SIGUSR1, for log rotation).
func (l *Log) ReopenOn(ctx context.Context, c <-chan struct{}, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-c:
			if !ok {
				return
			}
			if err := l.w.Reopen(); err != nil {
				log.Error("access log: cannot reopen; still writing to the old file", "err", err)
				continue
			}
			log.Info("access log reopened", "path", l.o.Path)
		}
	}
}

// SetConfig records what the access log keeps under cfg: the request
// headers it reads (and Options.Headers), the response headers its costs
// read, the query arguments and cookies its keys read, hashed, and the API
// key's hash, never the key. The headers read only by keys
// (config.HashedHeaders) are hashed unless Options.Headers names them.
func (l *Log) SetConfig(cfg *config.Config) {
	sp := &spec{clientIP: &cfg.ClientIP, queries: cfg.Policy.Queries(), resp: cfg.Policy.ResponseHeaders()}
	seen := map[string]bool{}
	if cfg.Gateway.Keys != nil {
		sp.keyHeader = http.CanonicalHeaderKey(cfg.Gateway.KeyHeader)
		sp.keyLabel = "header:" + sp.keyHeader + "="
		seen[sp.keyHeader] = true
	}
	if sp.cookies = cfg.Policy.Cookies(); len(sp.cookies) > 0 {
		seen["Cookie"] = true // recorded hashed, by cookie, after the headers
	}
	for _, n := range append(cfg.RequestHeaders(), l.o.Headers...) {
		n = http.CanonicalHeaderKey(n)
		if n != "" && !seen[n] {
			seen[n] = true
			sp.headers = append(sp.headers, n)
		}
	}
	sp.hashed = map[string]string{}
	for _, n := range cfg.HashedHeaders() {
		sp.hashed[n] = "header:" + n + "="
	}
	for _, n := range l.o.Headers {
		delete(sp.hashed, http.CanonicalHeaderKey(n)) // asked for as sent
	}
	l.spec.Store(sp)
}

// logged is the entry of one request being served.
type logged struct {
	e    accesslog.Entry
	hdr  []accesslog.Header
	resp []accesslog.Header
	// redact lists the parts of a rule's key whose values are secrets
	// (Name: "header:X-Api-Key=", "cookie:sid="), with what the entry's
	// key shows instead (Value: their hash, as the entry records them).
	redact []accesslog.Header
}

type loggedKey struct{}

var loggedPool = sync.Pool{New: func() any { return &logged{} }}

func loggedOf(r *http.Request) *logged {
	l, _ := r.Context().Value(loggedKey{}).(*logged)
	return l
}

// Handler wraps h, the gateway: every request but the probes gets a line.
func (l *Log) Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			h.ServeHTTP(w, r)
			return
		}
		lg := loggedPool.Get().(*logged)
		sp := l.spec.Load()
		e := &lg.e
		// Time + Latency is when the response ended, on the server's clock:
		// when a replay settles the rules counted after it.
		start := l.now()
		*e = accesslog.Entry{Time: start, Method: r.Method, Host: r.Host, Path: r.URL.Path, ContentLength: r.ContentLength}
		lg.request(r, sp)
		rec := &statuswriter.Writer{ResponseWriter: w}
		h.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), loggedKey{}, lg)))
		e.Status, e.Bytes, e.Latency = rec.Status, rec.Bytes, l.now().Sub(start)
		if e.Status == 0 {
			e.Status = http.StatusOK
		}
		resp := lg.resp[:0]
		for _, name := range sp.resp {
			if v := w.Header()[name]; len(v) > 0 {
				resp = append(resp, accesslog.Header{Name: name, Value: v[0]})
			}
		}
		e.RespHeader = resp
		if e.Decision == "" {
			e.Decision = "no-rule"
		}
		l.w.Log(e)
		lg.hdr, lg.resp, lg.redact = lg.hdr[:0], resp[:0], lg.redact[:0]
		clear(lg.hdr[:cap(lg.hdr)])
		clear(lg.resp[:cap(lg.resp)])
		lg.e = accesslog.Entry{Shadow: e.Shadow[:0]}
		loggedPool.Put(lg)
	})
}

// request records what sp keeps of r before it is decided.
func (lg *logged) request(r *http.Request, sp *spec) {
	e := &lg.e
	if len(sp.queries) > 0 {
		e.Query = lg.query(r.URL.RawQuery, sp.queries)
	}
	if sp.keyHeader != "" {
		if e.APIKey = apikey.Logged(r.Header.Get(sp.keyHeader)); e.APIKey != "" {
			lg.redact = append(lg.redact, accesslog.Header{Name: sp.keyLabel, Value: e.APIKey})
		}
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		e.Peer = host
	}
	if a := sp.clientIP.Resolve(r); a.IsValid() {
		e.ClientIP = a.String()
	}
	hdr := lg.hdr[:0]
	for _, name := range sp.headers {
		v := r.Header[name]
		if len(v) == 0 {
			continue
		}
		value := v[0]
		if label, ok := sp.hashed[name]; ok {
			// As a key reads it: trimmed, empty for no value.
			if value = strings.TrimSpace(value); value != "" {
				value = apikey.Hash(value)
				lg.redact = append(lg.redact, accesslog.Header{Name: label, Value: value})
			}
		}
		hdr = append(hdr, accesslog.Header{Name: name, Value: value})
	}
	if len(sp.cookies) > 0 {
		if line := lg.cookies(r.Header, sp.cookies); line != "" {
			hdr = append(hdr, accesslog.Header{Name: "Cookie", Value: line})
		}
	}
	e.Header = hdr
}

// NoteRoute is the gateway's OnRoute hook: the route and its upstream.
func NoteRoute(r *http.Request, route, upstream string) {
	if l := loggedOf(r); l != nil {
		l.e.Route, l.e.Upstream = route, upstream
	}
}

// NoteDecision is the access log's part of the gateway's OnDecision hook:
// the decision, the rule that decided (the engine's Decider: the refusing
// rule, or when allowed the one closest to its limit), its key with its
// secrets hashed, and the shadow rules that would have refused.
func NoteDecision(r *http.Request, v *engine.Verdict) {
	l := loggedOf(r)
	if l == nil {
		return
	}
	e := &l.e
	switch {
	case len(v.Results) == 0:
		e.Decision = "no-rule"
	case v.Allowed:
		e.Decision = "allowed"
	case v.Unavailable():
		e.Decision = "unavailable"
	case v.NeverPasses():
		e.Decision = "can-never-pass"
	default:
		e.Decision = "refused"
	}
	if i := v.Decider(); i >= 0 {
		e.Rule, e.Key = v.Results[i].Rule.Name, v.Results[i].Key
		for _, rd := range l.redact {
			if strings.Contains(e.Key, rd.Name) {
				e.Key = redactKey(e.Key, rd.Name, rd.Value)
			}
		}
	}
	for i := range v.Results {
		if res := &v.Results[i]; res.Rule.Shadow && (res.Outcome == engine.ShadowRefused || res.Outcome == engine.CanNeverPass) {
			e.Shadow = append(e.Shadow, res.Rule.Name)
		}
	}
}

// NoteAnswered is the gateway's OnAnswered hook: the gateway answered the
// request itself (forbidden, limits).
func NoteAnswered(r *http.Request, why string) {
	if l := loggedOf(r); l != nil {
		l.e.Decision = why
	}
}

// NoteError is the access log's part of the gateway's OnError hook: a cost
// that could not be read (400 or 411), or an error.
func NoteError(r *http.Request, err error) {
	l := loggedOf(r)
	if l == nil {
		return
	}
	var re *policy.RuleError
	if errors.As(err, &re) {
		l.e.Decision, l.e.Rule = "bad-cost", re.Rule
		return
	}
	if l.e.Decision == "" {
		l.e.Decision = "error"
	}
}

// redactKey returns key (a rule's key, parts label=value joined by +,
// whose values escape + and =) with the value of its part label (the API
// key header's) replaced by the key's hash: what a replay of the entry
// keys that rule by (it puts the hash in the header).
func redactKey(key, label, hash string) string {
	parts := strings.Split(key, "+")
	for i, p := range parts {
		if strings.HasPrefix(p, label) {
			parts[i] = label + hash
		}
	}
	return strings.Join(parts, "+")
}

// cookies returns the Cookie line the entry records for the cookies the
// keys read: each found as name=its SHA-256 (empty stays empty: a key
// part with no value), the others left out; and notes each in l.redact.
func (l *logged) cookies(h http.Header, names []string) string {
	return l.hashed("cookie", names, "; ", func(name string) (string, bool) { return policy.CookieValue(h, name) }, func(name string) string { return name })
}

// query returns the query the entry records for the arguments the keys
// read: each found as name=its SHA-256 (empty stays empty), the others
// left out (a query may carry tokens); and notes each in l.redact.
func (l *logged) query(raw string, names []string) string {
	return l.hashed("query", names, "&", func(name string) (string, bool) { return policy.QueryValue(raw, name) }, url.QueryEscape)
}

// hashed is cookies' and query's shared part: names whose value is found
// become quote(name)=SHA-256 of the value, joined by sep, each noted in
// l.redact as kind:name=.
func (l *logged) hashed(kind string, names []string, sep string, value func(string) (string, bool), quote func(string) string) string {
	var b strings.Builder
	for _, name := range names {
		v, ok := value(name)
		if !ok {
			continue
		}
		if v != "" {
			v = apikey.Hash(v)
			l.redact = append(l.redact, accesslog.Header{Name: kind + ":" + name + "=", Value: v})
		}
		if b.Len() > 0 {
			b.WriteString(sep)
		}
		b.WriteString(quote(name) + "=" + v)
	}
	return b.String()
}
