package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero/internal/dashboard"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/internal/server"
)

// send makes one request with the given method and headers (name, value
// pairs) and returns the status and the body.
func send(t *testing.T, method, url string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// keyState is the JSON of GET /api/keys.
type keyState struct {
	Rule       string  `json:"rule"`
	Key        string  `json:"key"`
	Allowed    bool    `json:"allowed"`
	Limit      int64   `json:"limit"`
	Remaining  int64   `json:"remaining"`
	RetryAfter float64 `json:"retry_after_seconds"`
	ResetAfter float64 `json:"reset_after_seconds"`
}

// adminKeysSession is the operator's session against a running gateway
// whose configuration has the admin token s3cret and the rule per-key
// (header X-API-Key, 3 per hour): a client is refused, the admin API shows
// its state, resets it, and the client passes again.
func adminKeysSession(t *testing.T, r *running) {
	t.Helper()
	auth := []string{"Authorization", "Bearer s3cret"}
	client := func(key string) int {
		code, _ := send(t, "GET", r.gateway+"/", "X-API-Key", key)
		return code
	}
	state := func(key string) keyState {
		t.Helper()
		code, body := send(t, "GET", r.admin+"/api/keys?rule=per-key&key="+url.QueryEscape(key), auth...)
		if code != http.StatusOK {
			t.Fatalf("GET /api/keys for %q: %d %s", key, code, body)
		}
		var st keyState
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatalf("GET /api/keys: %v in %s", err, body)
		}
		if st.Rule != "per-key" || st.Key != key || st.Limit != 3 {
			t.Errorf("GET /api/keys for %q: %+v", key, st)
		}
		return st
	}

	for i := range 3 {
		if code := client("alice"); code != 200 {
			t.Fatalf("alice's request %d: %d, want 200", i+1, code)
		}
	}
	if code := client("alice"); code != 429 {
		t.Fatalf("alice's fourth request in the hour: %d, want 429", code)
	}
	if code := client("bob"); code != 200 {
		t.Fatalf("bob's first request: %d", code)
	}

	// The operator finds alice's key among the refused ones and looks at
	// her state.
	code, body := send(t, "GET", r.admin+"/api/refused", auth...)
	var refused []dashboard.Key
	if err := json.Unmarshal([]byte(body), &refused); code != 200 || err != nil || len(refused) != 1 || refused[0].Rule != "per-key" {
		t.Fatalf("GET /api/refused: %d %s (%v), want alice's key alone", code, body, err)
	}
	alice := refused[0].Key
	if !strings.HasSuffix(alice, "=alice") {
		t.Fatalf("alice's key %q", alice)
	}
	bob := strings.TrimSuffix(alice, "alice") + "bob"
	for range 5 { // looking counts nothing
		st := state(alice)
		if st.Allowed || st.Remaining != 0 || st.RetryAfter <= 0 || st.ResetAfter < st.RetryAfter {
			t.Fatalf("alice's state: %+v, want refused, 0 remaining, a retry after > 0", st)
		}
		if st := state(bob); !st.Allowed || st.Remaining != 2 || st.RetryAfter != 0 {
			t.Fatalf("bob's state after one request: %+v, want allowed, 2 of 3 left", st)
		}
	}
	if st := state("nobody"); !st.Allowed || st.Remaining != 3 || st.ResetAfter != 0 {
		t.Errorf("an unknown key: %+v, want a fresh key's state", st)
	}

	// Without the token nothing is shown and nothing is reset.
	if code, _ := send(t, "GET", r.admin+"/api/keys?rule=per-key&key="+url.QueryEscape(alice)); code != http.StatusUnauthorized {
		t.Errorf("GET /api/keys without the token: %d, want 401", code)
	}
	if code, _ := send(t, "DELETE", r.admin+"/api/keys?rule=per-key&key="+url.QueryEscape(alice), "Authorization", "Bearer wrong"); code != http.StatusUnauthorized {
		t.Errorf("DELETE /api/keys with a wrong token: %d, want 401", code)
	}
	if st := state(alice); st.Allowed {
		t.Fatalf("alice after an unauthorized reset: %+v, want still refused", st)
	}
	if code := client("alice"); code != 429 {
		t.Fatalf("alice after an unauthorized reset: %d, want still 429", code)
	}
	for _, c := range []struct {
		method, query string
		want          int
	}{
		{"DELETE", "rule=nope&key=" + url.QueryEscape(alice), http.StatusNotFound},
		{"DELETE", "rule=per-key", http.StatusBadRequest},
		{"POST", "rule=per-key&key=" + url.QueryEscape(alice), http.StatusMethodNotAllowed},
	} {
		if code, body := send(t, c.method, r.admin+"/api/keys?"+c.query, auth...); code != c.want {
			t.Errorf("%s /api/keys?%s: %d %s, want %d", c.method, c.query, code, body, c.want)
		}
	}

	// The reset.
	code, body = send(t, "DELETE", r.admin+"/api/keys?rule=per-key&key="+url.QueryEscape(alice), auth...)
	if code != http.StatusOK || !strings.Contains(body, `"reset": "`+alice+`"`) {
		t.Fatalf("DELETE /api/keys: %d %s", code, body)
	}
	if !strings.Contains(r.logs.String(), "key reset through the admin API") {
		t.Errorf("the reset is not logged:\n%s", r.logs)
	}
	if st := state(alice); !st.Allowed || st.Remaining != 3 || st.RetryAfter != 0 {
		t.Errorf("alice's state after the reset: %+v, want a fresh key's", st)
	}
	for i := range 3 {
		if code := client("alice"); code != 200 {
			t.Fatalf("alice's request %d after the reset: %d, want 200", i+1, code)
		}
	}
	if code := client("alice"); code != 429 {
		t.Errorf("alice's fourth request after the reset: %d, want 429 again", code)
	}
	if st := state(bob); !st.Allowed || st.Remaining != 2 {
		t.Errorf("bob after alice's reset: %+v, want untouched", st)
	}
}

const adminKeysRules = `
admin: {token: s3cret}
upstreams: {d: {type: demo}}
routes: [{upstream: d}]
rules: [{name: per-key, key: "header:X-API-Key", algorithm: sliding-log, limit: 3/h}]
`

// TestAdminKeysMemory: the operator's session with the memory store.
func TestAdminKeysMemory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mem.yaml")
	writeFile(t, path, adminKeysRules)
	t0 := time.Date(2026, 4, 1, 10, 0, 0, 0, time.UTC)
	adminKeysSession(t, start(t, server.Options{ConfigPath: path, Now: func() time.Time { return t0 }}))
}

// TestAdminKeysRedis: the same session with the Redis store (server clock).
func TestAdminKeysRedis(t *testing.T) {
	addr := redistest.Start(t).Addr()
	path := filepath.Join(t.TempDir(), "redis.yaml")
	writeFile(t, path, fmt.Sprintf("store: {type: redis, url: \"redis://%s/0\", timeout: 2s, on_error: deny}\n", addr)+adminKeysRules)
	adminKeysSession(t, start(t, server.Options{ConfigPath: path}))
	if keys, err := redistest.Do(addr, "KEYS", "*"); err != nil || !strings.Contains(keys, "=alice}") {
		t.Errorf("redis keys %q, %v: want alice's state in Redis", keys, err)
	}
}

// TestAdminKeysStoreDown: with Redis down, GET /api/keys answers what the
// gateway's requests get, the failure policy's decision, and says so
// (decided_by), rather than the store's error.
func TestAdminKeysStoreDown(t *testing.T) {
	srv := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "down.yaml")
	writeFile(t, path, fmt.Sprintf("store: {type: redis, url: \"redis://%s/0\", timeout: 200ms, on_error: deny}\n", srv.Addr())+adminKeysRules)
	r := start(t, server.Options{ConfigPath: path})
	srv.Kill()
	t.Cleanup(srv.Restart)
	code, body := send(t, "GET", r.admin+"/api/keys?rule=per-key&key=alice", "Authorization", "Bearer s3cret")
	var st struct {
		keyState
		DecidedBy string `json:"decided_by"`
	}
	if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil || st.Allowed || st.DecidedBy != "deny" {
		t.Errorf("GET /api/keys with Redis down: %d %s; want 200, refused, decided_by deny", code, body)
	}
}
