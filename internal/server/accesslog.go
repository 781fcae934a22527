package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/accesslog"
	"github.com/portero-rl/portero/internal/apikey"
	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/statuswriter"
	"github.com/portero-rl/portero/policy"
)

// AccessLog configures serve's access log (package accesslog): one line
// per request, in JSON (what `portero replay` reads) or text.
type AccessLog struct {
	// Path is the file, "-" for standard output, or empty for no access
	// log.
	Path string
	// Format is json (the default when empty) or text.
	Format string
	// Buffer is the most lines waiting for the disk; beyond it a line is
	// dropped and counted (portero_access_log_dropped_total). 0 means
	// accesslog.DefaultBuffer.
	Buffer int
	// Headers are request headers to record as sent besides those the
	// configuration reads (config.RequestHeaders), for a replay of another
	// configuration that reads them; never the api_keys header, which is
	// recorded by its hash alone.
	Headers []string
}

// logged is one request being served with the access log on: its entry,
// filled as the request goes (route, decision) and written at the end.
type logged struct {
	e    accesslog.Entry
	hdr  []accesslog.Header
	resp []accesslog.Header
	// redact lists the parts of a rule's key whose values are secrets
	// (Name: "header:X-Api-Key=", "cookie:sid="), with what the entry's
	// key shows instead (Value: their hash, as the entry records them).
	redact []accesslog.Header
}

// logSpec is what the access log records of a request, for the
// configuration running.
type logSpec struct {
	headers []string // request headers, canonical
	// hashed are those of headers recorded as their SHA-256
	// (config.HashedHeaders), by name: "header:NAME=", their part in a
	// rule's key.
	hashed map[string]string
	resp   []string // response headers the costs read
	// queries are the query arguments the keys read: the query is
	// recorded with these alone, each value as its SHA-256, as cookies.
	queries []string
	// keyHeader is the api_keys header: recorded as apikey.Logged (its
	// SHA-256), never as sent; empty without API keys.
	keyHeader, keyLabel string
	// cookies are those the keys read: the Cookie header is recorded with
	// these alone, each value as its SHA-256 (a cookie is a credential;
	// a key needs only to tell values apart), never as sent.
	cookies []string
}

type loggedKey struct{}

var loggedPool = sync.Pool{New: func() any { return &logged{} }}

func loggedOf(r *http.Request) *logged {
	l, _ := r.Context().Value(loggedKey{}).(*logged)
	return l
}

// openAccessLog starts the access log of o, and its metrics; nil when off.
func (s *Server) openAccessLog(o AccessLog) (*accesslog.Writer, error) {
	if o.Path == "" {
		return nil, nil
	}
	w, err := accesslog.New(accesslog.Options{Path: o.Path, Format: o.Format, Buffer: o.Buffer, Stdout: s.opts.Stdout})
	if err != nil {
		return nil, err
	}
	s.metrics.reg.MustRegister(
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
	return w, nil
}

// reopenLoop reopens the access log for every value on c until ctx is
// done (serve sends one per SIGUSR1).
func (s *Server) reopenLoop(ctx context.Context, c <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-c:
			if !ok {
				return
			}
			if err := s.access.Reopen(); err != nil {
				s.log.Error("access log: cannot reopen; still writing to the old file", "err", err)
				continue
			}
			s.log.Info("access log reopened", "path", s.opts.AccessLog.Path)
		}
	}
}

// accessLogged wraps the gateway: each request's entry is begun before it
// is decided, completed by the hooks (route, decision), and written once
// the response is done. The probes are not logged.
func (s *Server) accessLogged(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			h.ServeHTTP(w, r)
			return
		}
		l := loggedPool.Get().(*logged)
		cfg := s.gw.Config()
		spec := s.logSpec.Load()
		e := &l.e
		// The latency is on the server's clock too: Time + Latency is when
		// the response ended, when the rules counted after it were settled
		// (a replay settles them then).
		start := s.now()
		*e = accesslog.Entry{Time: start, Method: r.Method, Host: r.Host, Path: r.URL.Path, ContentLength: r.ContentLength}
		if len(spec.queries) > 0 {
			e.Query = l.query(r.URL.RawQuery, spec.queries)
		}
		if spec.keyHeader != "" {
			e.APIKey = apikey.Logged(r.Header.Get(spec.keyHeader))
			if e.APIKey != "" {
				l.redact = append(l.redact, accesslog.Header{Name: spec.keyLabel, Value: e.APIKey})
			}
		}
		if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			e.Peer = host
		}
		if a := cfg.ClientIP.Resolve(r); a.IsValid() {
			e.ClientIP = a.String()
		}
		hdr := l.hdr[:0]
		for _, name := range spec.headers {
			v := r.Header[name]
			if len(v) == 0 {
				continue
			}
			value := v[0]
			if label, ok := spec.hashed[name]; ok {
				// As a key reads it: trimmed, empty for no value.
				if value = strings.TrimSpace(value); value != "" {
					value = apikey.Hash(value)
					l.redact = append(l.redact, accesslog.Header{Name: label, Value: value})
				}
			}
			hdr = append(hdr, accesslog.Header{Name: name, Value: value})
		}
		if len(spec.cookies) > 0 {
			if line := l.cookies(r.Header, spec.cookies); line != "" {
				hdr = append(hdr, accesslog.Header{Name: "Cookie", Value: line})
			}
		}
		e.Header = hdr
		rec := &statuswriter.Writer{ResponseWriter: w}
		h.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), loggedKey{}, l)))
		e.Status, e.Bytes, e.Latency = rec.Status, rec.Bytes, s.now().Sub(start)
		if e.Status == 0 {
			e.Status = http.StatusOK
		}
		resp := l.resp[:0]
		for _, name := range spec.resp {
			if v := w.Header()[name]; len(v) > 0 {
				resp = append(resp, accesslog.Header{Name: name, Value: v[0]})
			}
		}
		e.RespHeader = resp
		if e.Decision == "" {
			e.Decision = "no-rule"
		}
		s.access.Log(e)
		l.hdr, l.resp, l.redact = hdr[:0], resp[:0], l.redact[:0]
		clear(l.hdr[:cap(l.hdr)])
		clear(l.resp[:cap(l.resp)])
		l.e = accesslog.Entry{Shadow: e.Shadow[:0]}
		loggedPool.Put(l)
	})
}

// setLogSpec records what the access log keeps for the configuration
// running: the request headers it reads (and those --access-log-header
// adds), the response headers its costs read, the query when its keys
// read it, and the API key's hash, never the key: the api_keys header is
// not among the headers, whatever asks for it; nor is Cookie as sent, but
// only the cookies the keys read, hashed; the query likewise; and the
// headers read only by keys (config.HashedHeaders) are hashed unless
// --access-log-header asks for them as sent.
func (s *Server) setLogSpec(cfg *config.Config) {
	spec := &logSpec{queries: cfg.Policy.Queries(), resp: cfg.Policy.ResponseHeaders()}
	seen := map[string]bool{}
	if cfg.Gateway.Keys != nil {
		spec.keyHeader = http.CanonicalHeaderKey(cfg.Gateway.KeyHeader)
		spec.keyLabel = "header:" + spec.keyHeader + "="
		seen[spec.keyHeader] = true
	}
	if spec.cookies = cfg.Policy.Cookies(); len(spec.cookies) > 0 {
		seen["Cookie"] = true // recorded hashed, by cookie, after the headers
	}
	for _, n := range append(cfg.RequestHeaders(), s.opts.AccessLog.Headers...) {
		n = http.CanonicalHeaderKey(n)
		if n != "" && !seen[n] {
			seen[n] = true
			spec.headers = append(spec.headers, n)
		}
	}
	spec.hashed = map[string]string{}
	for _, n := range cfg.HashedHeaders() {
		spec.hashed[n] = "header:" + n + "="
	}
	for _, n := range s.opts.AccessLog.Headers {
		delete(spec.hashed, http.CanonicalHeaderKey(n)) // asked for as sent
	}
	s.logSpec.Store(spec)
}

// onRoute is the gateway's OnRoute hook: it notes the route in the entry.
func onRoute(r *http.Request, route, upstream string) {
	if l := loggedOf(r); l != nil {
		l.e.Route, l.e.Upstream = route, upstream
	}
}

// noteDecision is the gateway's OnDecision hook's access-log part: the
// decision, the rule that decided (the engine's Decider: the refusing rule,
// or when allowed the one closest to its limit), its key, and the shadow
// rules that would have refused.
func noteDecision(r *http.Request, v *engine.Verdict) {
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

// noteAnswered is the OnAnswered hook's part: the gateway answered the
// request itself (forbidden, limits).
func noteAnswered(r *http.Request, why string) {
	if l := loggedOf(r); l != nil {
		l.e.Decision = why
	}
}

// noteError is the OnError hook's part: a cost that could not be read
// (400 or 411), or an error.
func noteError(r *http.Request, err error) {
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
