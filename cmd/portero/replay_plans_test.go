package main

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero/internal/apikey"
	"github.com/portero-rl/portero/internal/gatewaylog"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/internal/server"
)

// plansReplayPolicy is the API-gateway model with the rules counted after
// the response: two plans chosen by API key (one covering only some
// routes, with a daily quota), the limits endpoint, failed logins counted
// by their 401s, a token budget per key charged from the upstream's
// X-Tokens-Used, and a rule keyed on the key's header itself (which the
// log must show hashed). UPSTREAM and the hashes are replaced by the
// test.
const plansReplayPolicy = `
client_ip:
  trusted_proxies: [127.0.0.0/8]
upstreams:
  app: {url: "UPSTREAM"}
routes:
  - {name: login, match: {path: /login}, upstream: app}
  - {name: api, match: {path: "/api/**"}, upstream: app}
plans:
  basic:
    rate: 4
    burst: 6
    quota: 50/day
    routes: [{path: /login}, {path: /api/items}, {path: /api/chat}]
  gold:
    rate: 10
    burst: 20
api_keys:
  header: X-Key
  keys:
    - {id: acme, plan: gold, sha256: ` + "ACME_HASH" + `}
    - {id: initech, plan: basic, sha256: ` + "INITECH_HASH" + `}
rules:
  - {name: login-failures, match: {methods: [POST], path: /login}, key: ip, algorithm: sliding-log, limit: 5/min, count_responses: ["401"]}
  - {name: per-header-key, key: "header:X-Key", limit: 5/s}
  - {name: tokens, match: {path: /api/chat}, key: "identity:api_key", algorithm: fixed-window, limit: 1500/min, cost: "response-header:X-Tokens-Used", reserve: 50}
`

// The keys the test's callers present: they must never reach the log.
const (
	acmeKey    = "acme-secret-key-7f3a"
	initechKey = "initech-secret-key-91c2"
	bogusKey   = "bogus-secret-key-0000"
)

// plansUpstream answers /login 200 for the right password and 401
// otherwise, and /api/chat with the tokens the request asks it to report.
func plansUpstream(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/login":
			if r.Header.Get("X-Password") != "right" {
				w.WriteHeader(http.StatusUnauthorized)
				io.WriteString(w, "wrong password\n")
				return
			}
		case "/api/chat":
			if n := r.Header.Get("X-Want-Tokens"); n != "" {
				w.Header().Set("X-Tokens-Used", n)
			}
		}
		io.WriteString(w, "ok "+r.URL.Path+"\n")
	}))
	t.Cleanup(srv.Close)
	return srv
}

type planRequest struct {
	at                     time.Time
	method, path           string
	client, key            string
	password, tokens, what string
}

// plansTraffic makes n requests from four addresses with the two keys, a
// wrong one and none, at random sub-second instants from 90 s before
// midnight UTC (the basic quota's day ends in the middle).
func plansTraffic(n int) []planRequest {
	rng := rand.New(rand.NewPCG(14, 15))
	at := time.Date(2026, 3, 1, 23, 58, 30, 0, time.UTC)
	var out []planRequest
	for range n {
		at = at.Add(time.Duration(rng.IntN(300)) * time.Millisecond)
		r := planRequest{at: at, method: "GET", path: "/api/items", client: fmt.Sprintf("203.0.113.%d", 1+rng.IntN(4))}
		switch k := rng.IntN(20); {
		case k < 2:
		case k < 3:
			r.key = bogusKey
		case k < 11:
			r.key = acmeKey
		default:
			r.key = initechKey
		}
		switch rng.IntN(20) {
		case 0, 1, 2, 3, 4:
			r.method, r.path, r.password = "POST", "/login", []string{"right", "wrong", "wrong"}[rng.IntN(3)]
		case 5, 6, 7, 8, 9, 10:
			r.path, r.tokens = "/api/chat", strconv.Itoa(1+rng.IntN(120))
			if rng.IntN(15) == 0 {
				r.tokens = "" // the upstream reports nothing: the reservation stands
			}
		case 11:
			r.path = "/api/admin" // not in the basic plan: 403
		case 12:
			r.path = "/v1/limits"
			if rng.IntN(3) == 0 {
				r.method = "POST" // 405
			}
		case 13:
			r.path = "/elsewhere" // gold: no route, 404 after the limits
		}
		out = append(out, r)
	}
	return out
}

// servedLine is what serve's access log says of a request.
type servedLine struct {
	Status   int    `json:"status"`
	Route    string `json:"route"`
	Rule     string `json:"rule"`
	Key      string `json:"key"`
	Decision string `json:"decision"`
	APIKey   string `json:"api_key_sha256"`
}

// TestReplayMatchesServePlans: a running portero serve with usage plans and
// API keys, failed logins counted on their 401s and a token budget charged
// from a response header writes its JSON access log; portero replay of that
// log decides every line as serve did — status, decision and deciding rule
// — and the log holds the keys' hashes, never a key.
func TestReplayMatchesServePlans(t *testing.T) {
	clock := &virtualClock{}
	checkPlansReplay(t, plansReplayPolicy, clock, plansTraffic(700), func(cfgPath, accessLog string) (string, func()) {
		return startServe(t, cfgPath, accessLog, clock)
	}, "401 allowed", "200 allowed per-header-key", "429 refused login-failures", "429 refused tokens",
		"429 refused plan/basic/quota", "403 forbidden", "405 limits", "200 limits", "404 allowed")
}

// plansRedisPolicy is plansReplayPolicy for a serve on Redis, which
// decides on the Redis server's clock, not the test's: limits that do not
// move in the seconds the test takes (buckets that refill one unit in 17
// or 40 minutes, a sliding log of an hour; no calendar quota, whose period
// could end in the middle), so that the instants serve and the replay
// decide at, a fraction of a millisecond apart, cannot part their
// decisions. The store's deadline is long: on a loaded machine a call past
// the default 50 ms would meet the failure policy, which the replay, in
// memory, never does.
const plansRedisPolicy = `
client_ip:
  trusted_proxies: [127.0.0.0/8]
store: {type: redis, url: "REDIS", timeout: 10s}
upstreams:
  app: {url: "UPSTREAM"}
routes:
  - {name: login, match: {path: /login}, upstream: app}
  - {name: api, match: {path: "/api/**"}, upstream: app}
plans:
  basic:
    rate: 0.001
    burst: 40
    routes: [{path: /login}, {path: /api/items}, {path: /api/chat}]
  gold:
    rate: 0.001
    burst: 90
api_keys:
  header: X-Key
  keys:
    - {id: acme, plan: gold, sha256: ACME_HASH}
    - {id: initech, plan: basic, sha256: INITECH_HASH}
rules:
  - {name: login-failures, match: {methods: [POST], path: /login}, key: ip, algorithm: sliding-log, limit: 5/h, count_responses: ["401"]}
  - {name: per-header-key, key: "header:X-Key", algorithm: token-bucket, limit: 1/40m burst 120}
  - {name: tokens, match: {path: /api/chat}, key: "identity:api_key", algorithm: token-bucket, limit: 1/40m burst 1500, cost: "response-header:X-Tokens-Used", reserve: 50}
`

// TestReplayMatchesServePlansOnRedis: the same with serve counting in a
// real redis-server (its Lua scripts, its settlement of the rules counted
// after the response) and the replay in memory, as it always does: every
// line decided alike.
func TestReplayMatchesServePlansOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	policy := strings.ReplaceAll(plansRedisPolicy, "REDIS", srv.URL())
	checkPlansReplay(t, policy, nil, plansTraffic(400), func(cfgPath, accessLog string) (string, func()) {
		return startServeWith(t, server.Options{ConfigPath: cfgPath, AccessLog: gatewaylog.Options{Path: accessLog}})
	}, "401 allowed", "429 refused login-failures", "429 refused tokens", "429 refused plan/basic", "403 forbidden",
		"405 limits", "200 limits", "404 allowed")
}

// checkPlansReplay serves traffic with policy (its UPSTREAM and key hashes
// filled in) through the serve start returns, on clock when not nil (else
// on the wall clock, and without the CSV, whose times would be the
// client's), checks that serve answered each of exercised at least three
// times and logged no key, and replays its access log (and the CSV).
func checkPlansReplay(t *testing.T, policy string, clock *virtualClock, traffic []planRequest,
	start func(cfgPath, accessLog string) (string, func()), exercised ...string) {
	dir := t.TempDir()
	up := plansUpstream(t)
	policy = strings.NewReplacer("UPSTREAM", up.URL, "ACME_HASH", apikey.Hash(acmeKey), "INITECH_HASH", apikey.Hash(initechKey)).Replace(policy)
	cfgPath := filepath.Join(dir, "portero.yaml")
	if err := os.WriteFile(cfgPath, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	accessLog := filepath.Join(dir, "access.log")
	gw, stop := start(cfgPath, accessLog)
	var served []int
	// The same requests as a CSV with their responses, as a proxy in front
	// would log them: the key in clear (a text log has its header), the
	// status and the tokens the upstream reported.
	var csvLog strings.Builder
	csvLog.WriteString("time,method,path,client_ip,header:X-Key,status,response_header:X-Tokens-Used\n")
	client := &http.Client{}
	for _, r := range traffic {
		if clock != nil {
			clock.set(r.at)
		}
		req, _ := http.NewRequest(r.method, gw+r.path, nil)
		req.Header.Set("X-Forwarded-For", r.client)
		if r.key != "" {
			req.Header.Set("X-Key", r.key)
		}
		if r.password != "" {
			req.Header.Set("X-Password", r.password)
		}
		if r.tokens != "" {
			req.Header.Set("X-Want-Tokens", r.tokens)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		served = append(served, res.StatusCode)
		fmt.Fprintf(&csvLog, "%s,%s,%s,%s,%s,%d,%s\n", r.at.Format(time.RFC3339Nano), r.method, r.path, r.client, r.key,
			res.StatusCode, res.Header.Get("X-Tokens-Used"))
	}
	csvPath := filepath.Join(dir, "requests.csv")
	if err := os.WriteFile(csvPath, []byte(csvLog.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	stop() // flushes and closes the access log

	raw, err := os.ReadFile(accessLog)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{acmeKey, initechKey, bogusKey} {
		if strings.Contains(string(raw), key) {
			t.Errorf("the access log holds the API key %q in clear", key)
		}
	}
	var lines []servedLine
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	for sc.Scan() {
		var l servedLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("access log line %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	if len(lines) != len(traffic) {
		t.Fatalf("the access log has %d lines for %d requests", len(lines), len(traffic))
	}
	counts := map[string]int{}
	for i, l := range lines {
		if l.Status != served[i] {
			t.Fatalf("access log line %d: status %d, the client got %d", i+1, l.Status, served[i])
		}
		if want := apikey.Logged(traffic[i].key); l.APIKey != want {
			t.Errorf("access log line %d: api_key_sha256 %q, want %q (the key's SHA-256)", i+1, l.APIKey, want)
		}
		// A rule keyed on the key's header shows its hash, as the replay
		// keys it.
		if want := "header:X-Key=" + apikey.Hash(traffic[i].key); l.Rule == "per-header-key" && l.Key != want {
			t.Errorf("access log line %d: key %q, want %q", i+1, l.Key, want)
		}
		counts[fmt.Sprintf("%d %s %s", l.Status, l.Decision, l.Rule)]++
	}
	t.Logf("serve answered %v", counts)
	// The traffic must exercise every part, or agreeing proves little.
	for _, want := range exercised {
		n := 0
		for k, c := range counts {
			if strings.HasPrefix(k, want) {
				n += c
			}
		}
		if n < 3 {
			t.Errorf("serve answered %q only %d times: the traffic does not exercise it", want, n)
		}
	}

	inputs := []struct{ name, path string }{{"access log", accessLog}, {"csv", csvPath}}
	if clock == nil {
		inputs = inputs[:1]
	}
	for _, in := range inputs {
		t.Run(in.name, func(t *testing.T) { replayMatches(t, cfgPath, in.path, traffic, lines) })
	}
}

// replayMatches replays log through the configuration and compares every
// decision with serve's access log lines.
func replayMatches(t *testing.T, cfgPath, log string, traffic []planRequest, lines []servedLine) {
	decisions := filepath.Join(t.TempDir(), "decisions.csv")
	out, errOut, code := runCmd(t, "replay", "--config", cfgPath, "--decisions", decisions, log)
	if code != 0 {
		t.Fatalf("replay: exit %d: %s\n%s", code, errOut, out)
	}
	f, err := os.Open(decisions)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	rows = rows[1:]
	if len(rows) != len(lines) {
		t.Fatalf("replay decided %d requests, serve %d\n%s", len(rows), len(lines), out)
	}
	diffs := 0
	for i, l := range lines {
		// Replay says 200 for a request passed on (the upstream answers
		// what it answers: 401 for a wrong password), no-route for one
		// that passed the limits and matched no route.
		want := []string{strconv.Itoa(l.Status), l.Rule, l.Decision}
		if l.Route != "" && (l.Decision == "allowed" || l.Decision == "no-rule") {
			want[0] = "200"
		}
		if l.Route == "" && l.Status == http.StatusNotFound {
			want[2] = "no-route"
		}
		if got := rows[i][5:8]; strings.Join(got, ",") != strings.Join(want, ",") {
			diffs++
			if diffs <= 8 {
				t.Errorf("request %d (%s %s key %.7s… password %q tokens %q): replay %v, serve %v", i+1, traffic[i].method, traffic[i].path,
					traffic[i].key, traffic[i].password, traffic[i].tokens, got, want)
			}
		}
	}
	if diffs > 0 {
		t.Errorf("%d of %d decisions of the replay differ from serve's\n%s", diffs, len(lines), out)
	}
	if strings.Contains(out, "could not be settled") {
		t.Errorf("replay of serve's own log could not settle some requests:\n%s", out)
	}
}

// TestReplaySettlesWhenTheResponseEnds: serve counts a failed login when
// its response ends, so a failure that arrives while an earlier one is
// still in flight does not see it; the replay settles each response at
// the end its log line gives (time + latency) and decides the same. A
// replay that settled at arrival would refuse the second failure.
func TestReplaySettlesWhenTheResponseEnds(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Hold") != "" {
			arrived <- struct{}{}
			<-release
		}
		if r.Header.Get("X-Password") != "right" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	t.Cleanup(up.Close)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "portero.yaml")
	os.WriteFile(cfgPath, []byte(`
upstreams: {app: {url: "`+up.URL+`"}}
routes: [{name: login, upstream: app}]
rules:
  - {name: login-failures, match: {methods: [POST], path: /login}, key: ip, algorithm: sliding-log, limit: 2/min, count_responses: ["401"]}
`), 0o644)
	accessLog := filepath.Join(dir, "access.log")
	clock := &virtualClock{}
	gw, stop := startServe(t, cfgPath, accessLog, clock)
	post := func(password string, hold bool) int {
		req, _ := http.NewRequest("POST", gw+"/login", nil)
		req.Header.Set("X-Password", password)
		if hold {
			req.Header.Set("X-Hold", "1")
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		res.Body.Close()
		return res.StatusCode
	}
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	var served []int
	clock.set(t0)
	served = append(served, post("wrong", false)) // counted: 1 of 2
	clock.set(t0.Add(time.Second))
	held := make(chan int, 1)
	go func() { held <- post("wrong", true) }() // in flight until released
	<-arrived
	clock.set(t0.Add(2 * time.Second))
	served = append(served, post("wrong", false)) // the held one is not counted yet: passes, 2 of 2
	clock.set(t0.Add(3 * time.Second))
	close(release) // the held one ends, counted: 3
	heldStatus := <-held
	clock.set(t0.Add(4 * time.Second))
	served = append(served, post("right", false)) // nothing left: refused
	stop()
	served = append(served[:1], append([]int{heldStatus}, served[1:]...)...) // in arrival order
	if want := []int{401, 401, 401, 429}; fmt.Sprint(served) != fmt.Sprint(want) {
		t.Fatalf("serve answered %v, want %v", served, want)
	}
	decisions := filepath.Join(dir, "decisions.csv")
	out, errOut, code := runCmd(t, "replay", "--config", cfgPath, "--decisions", decisions, accessLog)
	if code != 0 {
		t.Fatalf("replay: exit %d: %s\n%s", code, errOut, out)
	}
	// Passed on (200: the upstream answered 401) three times, then refused.
	if got := readStatuses(t, decisions); fmt.Sprint(got) != "[200 200 200 429]" {
		t.Errorf("replay decided %v, want [200 200 200 429] as serve did\n%s", got, out)
	}
}

// TestReplayCookieKeys: rules keyed on a session cookie and on a query
// argument replay as serve decided them, while the access log holds only
// that cookie and that argument, by their hashes: a session cookie is a
// credential, a query may carry tokens, and the other cookies and
// arguments are not the configuration's business.
func TestReplayCookieKeys(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "portero.yaml")
	os.WriteFile(cfgPath, []byte(`
upstreams: {demo: {type: demo}}
routes: [{name: all, upstream: demo}]
rules:
  - {name: per-session, key: "cookie:sid", limit: 3/min}
  - {name: per-token, key: "query:token", limit: 4/min}
`), 0o644)
	accessLog := filepath.Join(dir, "access.log")
	clock := &virtualClock{}
	gw, stop := startServe(t, cfgPath, accessLog, clock)
	t0 := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	cookies := []string{"sid=session-secret-A; theme=dark", "theme=light; sid=\"session-secret-B\"", "sid=", "theme=dark"}
	queries := []string{"?token=query-secret-1&other=private", "?other=private&token=query-secret%202", "?token=", ""}
	var served []int
	for i := range 24 {
		clock.set(t0.Add(time.Duration(i) * 700 * time.Millisecond))
		req, _ := http.NewRequest("GET", gw+"/"+queries[i/3%len(queries)], nil)
		req.Header.Set("Cookie", cookies[i%len(cookies)])
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		served = append(served, res.StatusCode)
	}
	stop()
	raw, _ := os.ReadFile(accessLog)
	for _, secret := range []string{"session-secret", "theme", "query-secret", "private"} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("the access log holds %q:\n%s", secret, raw)
		}
	}
	for _, key := range []string{"cookie:sid=" + apikey.Hash("session-secret-A"), "query:token=" + apikey.Hash("query-secret 2")} {
		if !strings.Contains(string(raw), `"key":"`+key+`"`) {
			t.Errorf("the access log does not show the key %s by its hash:\n%s", key, raw)
		}
	}
	decisions := filepath.Join(dir, "decisions.csv")
	out, errOut, code := runCmd(t, "replay", "--config", cfgPath, "--decisions", decisions, accessLog)
	if code != 0 {
		t.Fatalf("replay: exit %d: %s\n%s", code, errOut, out)
	}
	got := readStatuses(t, decisions)
	if fmt.Sprint(got) != fmt.Sprint(served) || !slices.Contains(served, 429) {
		t.Errorf("replay decided %v, serve answered %v (which must refuse some)\n%s", got, served, out)
	}
}
