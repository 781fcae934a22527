// Package statuswriter records what a handler answered — its final status
// and the body bytes written — for the code that acts after the response:
// the middleware's settlement of rules counted after it, and the access
// log. Standard library only.
package statuswriter

import "net/http"

// Writer passes a response through to ResponseWriter and records it.
// Status is the first final status (informational 1xx responses such as
// 100 Continue and 103 Early Hints are not one), 200 once a body byte or a
// flush went out without WriteHeader, and 0 while nothing did; Bytes counts
// the body bytes written.
type Writer struct {
	http.ResponseWriter
	Status int
	Bytes  int64
}

func (w *Writer) WriteHeader(code int) {
	if w.Status == 0 && code >= 200 {
		w.Status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *Writer) Write(b []byte) (int, error) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.Bytes += int64(n)
	return n, err
}

// Flush passes flushes on (streaming responses through the gateway).
func (w *Writer) Flush() {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the writer beneath (the
// reverse proxy flushes through it).
func (w *Writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }
