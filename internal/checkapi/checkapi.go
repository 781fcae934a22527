// Package checkapi is Portero's HTTP decision service, a door to the
// engine for envoyproxy/ratelimit's descriptors (package descriptor, as
// the Envoy RLS compiles them):
//
//   - POST /v1/check answers a JSON request ({"domain": "edge",
//     "descriptors": [{"entries": [{"key": "remote_address", "value":
//     "10.0.0.1"}]}], "cost": 1}) with 200 and the decision in JSON for
//     every decision, allowed or refused, with the RateLimit fields; a
//     request that can never pass gets the 429 of every HTTP door.
//   - /v1/auth answers nginx's auth_request and Traefik's forwardAuth: the
//     descriptors come from the query (descriptor=remote_address={ip},
//     with placeholders {ip}, {method}, {path}, {uri}, {host} and
//     {header:Name}) and the original request from the proxy's headers; a
//     refusal is the deny status (403 behind nginx, which turns any other
//     status into a 500; 429 otherwise).
//
// Under the failure policy FailError both answer 503; errors are RFC 9457
// problems. docs/nginx.md has the whole protocol.
package checkapi

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/portero-rl/portero/clientip"
	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/httpanswer"
	"github.com/portero-rl/portero/internal/quote"
)

// Config configures a Handler. Compiler and Engine are required; the zero
// value of every other field means its default.
type Config struct {
	// Compiler compiles the requests (shared with the RLS door).
	Compiler *descriptor.Compiler
	// Engine decides /v1/check requests (shared with the RLS door).
	Engine *engine.Engine
	// AuthEngine decides /v1/auth requests; nil means Engine. Its failure
	// policy is the proxies': FailAllow lets traffic through while the
	// store is down, where a 503 would be nginx's 500.
	AuthEngine *engine.Engine
	// ClientIP finds the original client's address for {ip}; its zero
	// value trusts X-Forwarded-For from loopback proxies only.
	ClientIP clientip.Config
	// DefaultDomain is used by /v1/auth when the query names none.
	DefaultDomain string
	// MaxBody bounds a /v1/check body in bytes; 0 means 64 KiB.
	MaxBody int64
	// Timeout bounds one decision; 0 means 1s.
	Timeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives store failures; nil means slog.Default().
	Logger *slog.Logger
	// Observer, when set, is told of every request's plan and verdict, or
	// its error (portero rls's metrics).
	Observer descriptor.Observer
}

// Handler serves /v1/check, /v1/auth and /healthz. It is safe for
// concurrent use.
type Handler struct {
	cfg    Config
	mux    *http.ServeMux
	writer *httpanswer.Writer // nil: formats each rule's text per request
}

// New validates cfg and returns the handler.
func New(cfg Config) (*Handler, error) {
	if cfg.Engine == nil || cfg.Compiler == nil {
		return nil, errors.New("checkapi: a compiler and an engine are required")
	}
	if cfg.AuthEngine == nil {
		cfg.AuthEngine = cfg.Engine
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = 64 << 10
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if len(cfg.ClientIP.TrustedProxies) == 0 {
		cfg.ClientIP.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	}
	if err := cfg.ClientIP.Validate(); err != nil {
		return nil, fmt.Errorf("checkapi: client ip: %w", err)
	}
	h := &Handler{cfg: cfg, mux: http.NewServeMux()}
	h.mux.HandleFunc("/v1/check", h.check)
	h.mux.HandleFunc("/v1/auth", h.auth)
	h.mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// CheckRequest is the body of POST /v1/check.
type CheckRequest struct {
	Domain      string            `json:"domain,omitempty"`
	Descriptors []CheckDescriptor `json:"descriptors,omitempty"`
	// Cost is the request's hits (Envoy's request hits_addend); 0 or
	// absent means 1.
	Cost *int64 `json:"cost,omitempty"`
}

// CheckDescriptor is one descriptor of a CheckRequest.
type CheckDescriptor struct {
	Entries    []CheckEntry   `json:"entries"`
	HitsAddend *uint64        `json:"hits_addend,omitempty"`
	Limit      *CheckOverride `json:"limit,omitempty"`
}

// CheckEntry is one (key, value) pair.
type CheckEntry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// CheckOverride is a descriptor's limit override.
type CheckOverride struct {
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	Unit            string `json:"unit"`
}

// CheckResponse is the answer of POST /v1/check.
type CheckResponse struct {
	Allowed bool   `json:"allowed"`
	Code    string `json:"code"`
	// Rule to ResetAfter describe the rule that decided
	// (engine.Verdict.Decider); Rule is empty when no limit applied.
	Rule       string  `json:"rule,omitempty"`
	Limit      int64   `json:"limit"`
	Remaining  int64   `json:"remaining"`
	RetryAfter float64 `json:"retry_after"`
	ResetAfter float64 `json:"reset_after"`
	// Descriptors has one entry per request descriptor.
	Descriptors []DescriptorResult `json:"descriptors,omitempty"`
	// Degraded is the store's error when the failure policy answered.
	Degraded string `json:"degraded,omitempty"`
}

// DescriptorResult is the verdict on one descriptor.
type DescriptorResult struct {
	Code            string  `json:"code"`
	Rule            string  `json:"rule,omitempty"`
	RequestsPerUnit uint32  `json:"requests_per_unit,omitempty"`
	Unit            string  `json:"unit,omitempty"`
	Algorithm       string  `json:"algorithm,omitempty"`
	Remaining       int64   `json:"remaining"`
	RetryAfter      float64 `json:"retry_after"`
	ResetAfter      float64 `json:"reset_after"`
	Counted         bool    `json:"counted"`
	Shadow          bool    `json:"shadow,omitempty"`
	Unlimited       bool    `json:"unlimited,omitempty"`
	CheckOnly       bool    `json:"check_only,omitempty"`
	// Outcome is the engine's; Failure the failure policy that decided.
	Outcome string `json:"outcome,omitempty"`
	Failure string `json:"failure,omitempty"`
}

func problem(w http.ResponseWriter, status int, detail string) { httpanswer.Error(w, status, detail) }

func (h *Handler) check(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		problem(w, http.StatusMethodNotAllowed, "use POST with a JSON body")
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if msg := checkMediaType(ct); msg != "" {
			problem(w, http.StatusUnsupportedMediaType, msg)
			return
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			problem(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body larger than %d bytes", h.cfg.MaxBody))
			return
		}
		problem(w, http.StatusBadRequest, "reading body: "+err.Error())
		return
	}
	var req CheckRequest
	if msg := decodeCheck(body, &req); msg != "" {
		problem(w, http.StatusBadRequest, "malformed JSON: "+msg)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	if req.Domain == "" && len(req.Descriptors) == 0 {
		problem(w, http.StatusBadRequest, "give domain and descriptors")
		return
	}
	h.checkDomain(ctx, w, &req)
}

// checkMediaType returns why a /v1/check Content-Type is refused, or "":
// exactly application/json, with no parameter but charset=utf-8 (RFC 8259
// JSON is UTF-8). A prefix test let application/jsonx through.
func checkMediaType(ct string) string {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return fmt.Sprintf("Content-Type %s: %v; want application/json", quote.Input(ct), err)
	}
	if mt != "application/json" {
		return fmt.Sprintf("Content-Type %s: want application/json", quote.Input(ct))
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return fmt.Sprintf("Content-Type %s: parameter %s: want no parameter but charset=utf-8", quote.Input(ct), quote.Input(k+"="+v))
		}
	}
	return ""
}

// decodeCheck reads a /v1/check body into req and returns why it refuses
// it, or "": one JSON object, no unknown member, and no member named twice
// in one object, where encoding/json keeps the last: {"domain":"a","domain":"b"}
// would be decided for b while a log or a proxy that read the first saw a.
// github.com/go-json-experiment/json (json/v2, which Go 1.26 has only
// under GOEXPERIMENT) refuses both and says where.
func decodeCheck(body []byte, req *CheckRequest) string {
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	err := jsonv2.UnmarshalDecode(dec, req, jsonv2.RejectUnknownMembers(true))
	var syn *jsontext.SyntacticError
	var sem *jsonv2.SemanticError
	switch {
	case err == nil:
		if _, err := dec.ReadToken(); err != io.EOF {
			return "more than one value"
		}
		return ""
	case errors.As(err, &syn) && errors.Is(err, jsontext.ErrDuplicateName):
		return "duplicate member " + quote.Input(syn.JSONPointer.LastToken()) + within(syn.JSONPointer.Parent())
	case errors.As(err, &sem) && errors.Is(err, jsonv2.ErrUnknownName):
		return "unknown field " + quote.Input(sem.JSONPointer.LastToken()) + within(sem.JSONPointer.Parent())
	case errors.As(err, &sem):
		return fmt.Sprintf("%s %s: want a %v%s", sem.JSONKind, quote.Input(string(sem.JSONValue)), sem.GoType, within(sem.JSONPointer))
	case errors.As(err, &syn):
		return fmt.Sprintf("%v at byte %d", syn.Err, syn.ByteOffset)
	}
	return err.Error()
}

// within spells where p points, as " in descriptors[0].limit"; "" for the
// top level.
func within(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if _, err := strconv.Atoi(tok); err == nil {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	if b.Len() == 0 {
		return ""
	}
	return " in " + quote.Cut(b.String())
}

func (h *Handler) checkDomain(ctx context.Context, w http.ResponseWriter, in *CheckRequest) {
	req := &descriptor.Request{Domain: in.Domain}
	if in.Cost != nil {
		if *in.Cost < 0 || *in.Cost > math.MaxUint32 {
			problem(w, http.StatusBadRequest, fmt.Sprintf("cost %d: want 0 to %d", *in.Cost, uint32(math.MaxUint32)))
			return
		}
		req.Hits = uint32(*in.Cost)
	}
	for i, d := range in.Descriptors {
		out := descriptor.Descriptor{Hits: d.HitsAddend}
		for _, e := range d.Entries {
			out.Entries = append(out.Entries, descriptor.Entry{Key: e.Key, Value: e.Value})
		}
		if d.Limit != nil {
			u, err := descriptor.ParseUnit(d.Limit.Unit)
			if err != nil {
				problem(w, http.StatusBadRequest, fmt.Sprintf("descriptor %d: limit: %v", i, err))
				return
			}
			out.Override = &descriptor.Override{RequestsPerUnit: d.Limit.RequestsPerUnit, Unit: u}
		}
		req.Descriptors = append(req.Descriptors, out)
	}
	var p descriptor.Plan
	now := h.cfg.Now()
	if !h.compile(w, req, now, &p) {
		return
	}
	var v engine.Verdict
	if !h.decide(ctx, w, h.cfg.Engine, now, &v, req, &p) {
		return
	}
	// The plan's code, as the Envoy door answers it: under QUOTA_MODE a
	// descriptor without a limit is a quota that passes.
	code := p.Code(&v)
	out := CheckResponse{Allowed: code == descriptor.OK, Code: code.String()}
	if v.Degraded != nil {
		out.Degraded = v.Degraded.Error()
	}
	if i := v.Decider(); i >= 0 {
		st := p.Status(p.Of[i], &v, now)
		out.Rule = st.Limit.PolicyName()
		out.Limit = v.Results[i].Decision.Limit
		out.Remaining = st.Remaining
		out.RetryAfter = st.RetryAfter.Seconds()
		out.ResetAfter = st.ResetAfter.Seconds()
	}
	for i := range p.Descriptors {
		st := p.Status(i, &v, now)
		dr := DescriptorResult{Code: st.Code.String(), Remaining: st.Remaining, RetryAfter: st.RetryAfter.Seconds(),
			ResetAfter: st.ResetAfter.Seconds(), Counted: st.Counted, Shadow: st.Shadow, Unlimited: st.Unlimited,
			CheckOnly: st.CheckOnly, Outcome: st.Outcome.String(), Failure: string(st.Failure)}
		if l := st.Limit; l != nil {
			dr.Rule, dr.RequestsPerUnit, dr.Unit = l.PolicyName(), l.RequestsPerUnit, l.Unit.String()
			if l.Rule != nil {
				dr.Algorithm = string(l.Rule.Algorithm)
			}
		}
		out.Descriptors = append(out.Descriptors, dr)
	}
	h.answer(w, &v, out)
}

// compile compiles req into p for a decision at now and answers its
// errors; ok is false when an error answer was written.
func (h *Handler) compile(w http.ResponseWriter, req *descriptor.Request, now time.Time, p *descriptor.Plan) bool {
	err := h.cfg.Compiler.Compile(req, now, p)
	if err == nil {
		return true
	}
	if h.cfg.Observer != nil {
		h.cfg.Observer.Observe(req, p, new(engine.Verdict), 0, err)
	}
	status := http.StatusBadRequest
	var re *descriptor.RequestError
	if errors.As(err, &re) && re.Kind == descriptor.NotFound {
		status = http.StatusNotFound
	}
	problem(w, status, err.Error())
	return false
}

// decide has e decide p's hits into v and answers a store failure that e
// reports (portero.FailError) with 503; ok is false when it did. req and
// p, the compiled request, go to the Observer.
func (h *Handler) decide(ctx context.Context, w http.ResponseWriter, e *engine.Engine, now time.Time, v *engine.Verdict,
	req *descriptor.Request, p *descriptor.Plan) bool {
	obs := h.cfg.Observer
	var start time.Time
	if obs != nil {
		start = time.Now()
	}
	err := e.Decide(ctx, now, p.Hits, v)
	if obs != nil {
		obs.Observe(req, p, v, time.Since(start), err)
	}
	if err != nil || v.Degraded != nil {
		cause := v.Degraded
		if err != nil {
			cause = err
		}
		h.cfg.Logger.Warn("checkapi: store failed", "request", req.Domain, "policy", e.OnError().String(), "err", cause)
	}
	if err != nil {
		httpanswer.WriteUnavailable(w, time.Second, "rate-limit store unavailable: "+err.Error())
		return false
	}
	return true
}

// answer writes the rate-limit fields of v and out as JSON (200), or, for
// a request that can never pass, the 429 problem every HTTP door sends.
func (h *Handler) answer(w http.ResponseWriter, v *engine.Verdict, out CheckResponse) {
	var f httpanswer.Fields
	if v.NeverPasses() {
		h.writer.Refuse(w, &f, nil, v, http.StatusTooManyRequests)
		return
	}
	h.writer.Fields(&f, v)
	if !v.Allowed {
		f.Static("Cache-Control", "no-store")
	}
	f.Apply(w.Header())
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// original is what /v1/auth knows about the proxied request.
type original struct {
	method, uri, path, host string
	ip                      netip.Addr
	header                  http.Header
}

func (h *Handler) original(r *http.Request) original {
	o := original{header: r.Header}
	o.method = cmp.Or(r.Header.Get("X-Original-Method"), r.Header.Get("X-Forwarded-Method"), r.Method)
	o.uri = cmp.Or(r.Header.Get("X-Original-URI"), r.Header.Get("X-Forwarded-Uri"), r.URL.RequestURI())
	o.path = o.uri
	if i := strings.IndexAny(o.path, "?#"); i >= 0 {
		o.path = o.path[:i]
	}
	if p, err := url.PathUnescape(o.path); err == nil {
		o.path = p
	}
	o.host = cmp.Or(r.Header.Get("X-Forwarded-Host"), r.Header.Get("X-Original-Host"), r.Host)
	o.ip = h.cfg.ClientIP.Resolve(r)
	return o
}

// expand resolves the placeholders of one template value; ok is false when
// one has no value.
func (o *original) expand(tmpl string) (string, bool, error) {
	var b strings.Builder
	for {
		i := strings.IndexByte(tmpl, '{')
		if i < 0 {
			b.WriteString(tmpl)
			return b.String(), true, nil
		}
		j := strings.IndexByte(tmpl[i:], '}')
		if j < 0 {
			return "", false, fmt.Errorf("unclosed { in %s", quote.Input(tmpl))
		}
		b.WriteString(tmpl[:i])
		name := tmpl[i+1 : i+j]
		tmpl = tmpl[i+j+1:]
		var v string
		switch {
		case name == "ip":
			if !o.ip.IsValid() {
				return "", false, nil
			}
			v = o.ip.String()
		case name == "method":
			v = o.method
		case name == "path":
			v = o.path
		case name == "uri":
			v = o.uri
		case name == "host":
			v = o.host
		case strings.HasPrefix(name, "header:"):
			hv := o.header.Values(strings.TrimPrefix(name, "header:"))
			if len(hv) == 0 {
				return "", false, nil
			}
			v = strings.TrimSpace(hv[0])
		default:
			return "", false, fmt.Errorf("unknown placeholder %s: want {ip}, {method}, {path}, {uri}, {host} or {header:Name}", quote.Input("{"+name+"}"))
		}
		if v == "" {
			return "", false, nil
		}
		b.WriteString(v)
	}
}

// request is the descriptor request of /v1/auth's templates for o (one
// remote_address={ip} when none), or why they cannot be read. A
// descriptor whose placeholder has no value is dropped, as Envoy drops it.
func (o original) request(domain string, templates []string) (*descriptor.Request, string) {
	if len(templates) == 0 {
		templates = []string{"remote_address={ip}"}
	}
	req := &descriptor.Request{Domain: domain}
	for _, t := range templates {
		var d descriptor.Descriptor
		for _, part := range strings.Split(t, ",") {
			k, v, ok := strings.Cut(part, "=")
			if !ok || k == "" {
				return nil, fmt.Sprintf("descriptor %s: want key=value[,key=value...]", quote.Input(t))
			}
			val, has, err := o.expand(v)
			if err != nil {
				return nil, fmt.Sprintf("descriptor %s: %v", quote.Input(t), err)
			}
			if !has {
				d.Entries = nil
				break
			}
			d.Entries = append(d.Entries, descriptor.Entry{Key: k, Value: val})
		}
		if len(d.Entries) > 0 {
			req.Descriptors = append(req.Descriptors, d)
		}
	}
	return req, ""
}

func (h *Handler) auth(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	deny := http.StatusTooManyRequests
	if r.Header.Get("X-Original-URI") != "" {
		deny = http.StatusForbidden
	}
	if s := q.Get("deny_status"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 400 || n > 599 {
			problem(w, http.StatusBadRequest, fmt.Sprintf("deny_status %s: want a 4xx or 5xx status", quote.Input(s)))
			return
		}
		deny = n
	}
	domain := cmp.Or(q.Get("domain"), h.cfg.DefaultDomain)
	if domain == "" {
		problem(w, http.StatusBadRequest, "no domain: add ?domain=... to the auth URL")
		return
	}
	req, msg := h.original(r).request(domain, q["descriptor"])
	if msg != "" {
		problem(w, http.StatusBadRequest, msg)
		return
	}
	hd := w.Header()
	if len(req.Descriptors) == 0 {
		hd.Set("X-Portero-Decision", "allowed")
		w.WriteHeader(http.StatusOK) // nothing to limit, as Envoy skips the call
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	var p descriptor.Plan
	now := h.cfg.Now()
	if !h.compile(w, req, now, &p) {
		return
	}
	var v engine.Verdict
	if !h.decide(ctx, w, h.cfg.AuthEngine, now, &v, req, &p) {
		return
	}
	var f httpanswer.Fields
	if i := v.Decider(); i >= 0 {
		f.Static("X-Portero-Rule", v.Results[i].Rule.Name)
	}
	if p.Code(&v) != descriptor.OK { // as /v1/check and the Envoy door decide
		f.Static("X-Portero-Decision", "refused")
		h.writer.Refuse(w, &f, nil, &v, deny)
		return
	}
	decision := "allowed"
	if v.Degraded != nil {
		decision = "allowed-store-unavailable"
	}
	f.Static("X-Portero-Decision", decision)
	h.writer.Fields(&f, &v)
	f.Apply(hd)
	w.WriteHeader(http.StatusOK)
}
