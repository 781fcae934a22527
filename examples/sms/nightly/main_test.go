package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/portero-rl/portero/examples/sms"
	"github.com/portero-rl/portero/internal/redistest"
)

// TestRun: the job sends what the hour's budget of 1000 messages admits
// (600), and instead of waiting an hour past its night for the rest (500
// more), stops at once and says what is left.
func TestRun(t *testing.T) {
	rs := redistest.Start(t)
	var billed atomic.Int64
	prov := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b sms.Batch
		json.NewDecoder(r.Body).Decode(&b)
		billed.Add(sms.Messages(b))
		io.WriteString(w, "ok")
	}))
	defer prov.Close()
	to := func(n int) []string {
		var s []string
		for i := range n {
			s = append(s, fmt.Sprint("+1555", i))
		}
		return s
	}
	data, _ := json.Marshal([]sms.Batch{{To: to(600), Text: "hello"}, {To: to(500), Text: "hello"}, {To: to(1), Text: "hi"}})
	file := filepath.Join(t.TempDir(), "batches.json")
	os.WriteFile(file, data, 0o600)
	var out bytes.Buffer
	err := run(context.Background(), []string{"--redis", rs.URL(), "--provider", prov.URL + "/sms/send", "--batches", file, "--until", "10m"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "sent 1 of 3 batches (600 messages); 2 left for the next night") || billed.Load() != 600 {
		t.Errorf("output %q, billed %d; want 1 batch of 600 sent and 2 left", out.String(), billed.Load())
	}
	if err := run(context.Background(), []string{"--redis", rs.URL()}, &out); err == nil || !strings.Contains(err.Error(), "--batches") {
		t.Errorf("run without --batches = %v", err)
	}
}
