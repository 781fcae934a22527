package httplimit

import (
	"context"
	"net/http"

	"github.com/portero-rl/portero/policy"
)

// Rules settled after the response (policy.Rule.Responses, a cost from the
// response): the middleware watches the response of a request that has
// such hits, and settles them with the engine once the handler returns —
// the status, the response's header fields (an upstream's X-Tokens-Used)
// and the body bytes written. The response is already on its way then, so
// its RateLimit fields tell the state before the settlement; the next
// response tells it after.

// recorder watches a response for settlement.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *recorder) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Flush passes flushes on (streaming responses through the gateway).
func (w *recorder) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the writer beneath.
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// serveSettled serves r with next, watching the response, then settles
// pending (decided for req) with the engine.
func (cfg *Config) serveSettled(w http.ResponseWriter, r *http.Request, next http.Handler, req *policy.Request, pending []policy.Settlement) {
	rec := &recorder{ResponseWriter: w}
	next.ServeHTTP(rec, r)
	if rec.status == 0 {
		rec.status = http.StatusOK // a handler that wrote nothing: net/http sends 200
	}
	resp := &policy.Response{Status: rec.status, Header: w.Header(), Bytes: rec.bytes}
	adj, err := cfg.Policy.Settle(pending, req, resp, nil)
	if err != nil && cfg.OnError != nil {
		cfg.OnError(r, err)
	}
	// The client may be gone; the settlement is still owed.
	if err := cfg.engine.Settle(context.WithoutCancel(r.Context()), cfg.Now(), adj); err != nil && cfg.OnError != nil {
		cfg.OnError(r, err)
	}
}
