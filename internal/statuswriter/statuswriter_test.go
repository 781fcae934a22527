package statuswriter_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/portero-rl/portero/internal/statuswriter"
)

func TestWriter(t *testing.T) {
	for _, tt := range []struct {
		name   string
		answer func(w http.ResponseWriter)
		status int
		bytes  int64
	}{
		{"nothing", func(http.ResponseWriter) {}, 0, 0},
		{"body only", func(w http.ResponseWriter) { w.Write([]byte("hello")) }, 200, 5},
		{"informational first", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte("no"))
		}, 429, 2},
		{"second status ignored", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusNotFound)
			w.WriteHeader(http.StatusOK)
		}, 404, 0},
		{"flush", func(w http.ResponseWriter) { w.(http.Flusher).Flush() }, 200, 0},
		{"flush through ResponseController", func(w http.ResponseWriter) {
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("Flush: %v", err)
			}
			w.Write([]byte("abc"))
		}, 200, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// A real server: net/http sends a 1xx and then the final
			// status, as an upstream behind the gateway does.
			got := make(chan *statuswriter.Writer, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
				w := &statuswriter.Writer{ResponseWriter: rw}
				tt.answer(w)
				got <- w
			}))
			defer srv.Close()
			resp, err := http.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			w := <-got
			if w.Status != tt.status || w.Bytes != tt.bytes {
				t.Errorf("Status, Bytes = %d, %d; want %d, %d", w.Status, w.Bytes, tt.status, tt.bytes)
			}
			if int64(len(body)) != w.Bytes {
				t.Errorf("the client read %d bytes, %d counted", len(body), w.Bytes)
			}
			if want := max(tt.status, 200); resp.StatusCode != want {
				t.Errorf("the client got %d, want %d", resp.StatusCode, want)
			}
		})
	}
}
