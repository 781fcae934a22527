package dashboard

import (
	"bufio"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeSource is a Source the tests change between samples.
type fakeSource struct {
	mu   sync.Mutex
	snap Snapshot
}

func (f *fakeSource) Snapshot() Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.snap
	s.Rules = append([]Rule(nil), s.Rules...)
	for i := range s.Rules {
		c := map[string]float64{}
		for k, v := range s.Rules[i].Counts {
			c[k] = v
		}
		s.Rules[i].Counts = c
	}
	return s
}

func (f *fakeSource) add(rule, outcome string, n float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.snap.Rules {
		if f.snap.Rules[i].Name == rule {
			f.snap.Rules[i].Counts[outcome] += n
		}
	}
	f.snap.Requests += n
}

func newFake() *fakeSource {
	return &fakeSource{snap: Snapshot{
		Service: "portero serve",
		Config:  Config{Source: "portero.yaml", Loaded: time.Unix(1767225600, 0)},
		Rules: []Rule{{Name: "per-ip", Key: "ip", Algorithm: "sliding-counter", Limit: "10/s", Mode: "enforce", Counts: map[string]float64{}},
			{Name: "daily", Key: "header:X-Api-Key", Algorithm: "fixed-window", Limit: "1000/day", Mode: "enforce", Quota: true, Counts: map[string]float64{}}},
		Store: Store{Type: "memory", OnError: "allow", Connected: true,
			Latency: Histogram{Bounds: []float64{0.001, 0.01, 0.1}, Counts: []uint64{0, 0, 0}}},
	}}
}

func get(t *testing.T, c *http.Client, u string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// Rates are counter deltas over the time between samples; the latency
// quantiles come from the histogram's buckets between two samples.
func TestSampleRates(t *testing.T) {
	src := newFake()
	d := New(src, Options{})
	t0 := time.Unix(1767225600, 0)
	d.Sample(t0)
	src.add("per-ip", "allowed", 20)
	src.add("per-ip", "refused", 6)
	src.add("per-ip", "near-limit", 4)
	src.mu.Lock()
	src.snap.Store.Latency = Histogram{Bounds: []float64{0.001, 0.01, 0.1}, Counts: []uint64{50, 99, 100}, Count: 100}
	src.mu.Unlock()
	d.Sample(t0.Add(2 * time.Second))
	var st state
	d.mu.Lock()
	b := d.encode(true)
	d.mu.Unlock()
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	h := st.History.Rules["per-ip"]
	if len(st.History.T) != 1 || h.Allowed[0] != 12 || h.Refused[0] != 3 || st.RPS != 15 {
		t.Errorf("history %+v, rps %v; want one sample: 12 allowed/s (20+4 in 2 s), 3 refused/s, 15 requests/s", h, st.RPS)
	}
	// 100 observations: the 50th is at the first bound, the 99th at the
	// second.
	if p50, p99 := *st.Latency.P50, *st.Latency.P99; math.Abs(p50-1) > 1e-9 || math.Abs(p99-10) > 1e-9 {
		t.Errorf("p50 %v ms, p99 %v ms; want 1 and 10", p50, p99)
	}
	// The ring keeps History samples.
	d2 := New(src, Options{History: 3})
	for i := range 10 {
		d2.Sample(t0.Add(time.Duration(i) * time.Second))
	}
	if got := len(d2.ordered()); got != 3 || !d2.ordered()[2].At.Equal(t0.Add(9*time.Second)) {
		t.Errorf("kept %d samples, want the last 3", got)
	}
}

func TestAuth(t *testing.T) {
	src := newFake()
	d := New(src, Options{Token: func() string { return "s3cret" }})
	d.Sample(time.Now())
	srv := httptest.NewServer(d)
	defer srv.Close()
	c := srv.Client()
	for _, p := range []string{"state", "events", "app.js"} {
		if code, _ := get(t, c, srv.URL+"/dashboard/"+p); code != http.StatusUnauthorized {
			t.Errorf("GET %s without the token = %d, want 401", p, code)
		}
	}
	if code, body := get(t, c, srv.URL+"/dashboard/"); code != http.StatusUnauthorized || !strings.Contains(body, `name="token"`) {
		t.Errorf("GET / without the token = %d, want 401 with the login form:\n%s", code, body)
	}
	// The login page's style sheet, which it links, loads without it.
	if code, body := get(t, c, srv.URL+"/dashboard/app.css"); code != 200 || !strings.Contains(body, ".login-card") {
		t.Errorf("GET app.css without the token = %d, want 200 and the style sheet", code)
	}
	if code, _ := get(t, c, srv.URL+"/dashboard/state", "Authorization", "Bearer s3cret"); code != 200 {
		t.Errorf("GET state with the bearer token = %d, want 200", code)
	}
	if code, _ := get(t, c, srv.URL+"/dashboard/state", "Authorization", "Bearer wrong"); code != 401 {
		t.Errorf("GET state with a wrong token = %d, want 401", code)
	}
	jar, _ := cookiejar.New(nil)
	bc := &http.Client{Jar: jar}
	res, err := bc.PostForm(srv.URL+"/dashboard/login", url.Values{"token": {"wrong"}})
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 401 || !strings.Contains(string(page), "That is not the admin token.") || strings.Contains(string(page), "{{message}}") {
		t.Errorf("login with a wrong token = %d, want 401 and the form saying why:\n%s", res.StatusCode, page)
	}
	res, err = bc.PostForm(srv.URL+"/dashboard/login", url.Values{"token": {"s3cret"}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), `src="app.js"`) {
		t.Errorf("login then redirect = %d, want the dashboard:\n%s", res.StatusCode, body)
	}
	u, _ := url.Parse(srv.URL + "/dashboard/")
	var ck *http.Cookie
	for _, c := range jar.Cookies(u) {
		if c.Name == cookieName {
			ck = c
		}
	}
	if ck == nil || strings.Contains(ck.Value, "s3cret") {
		t.Fatalf("session cookie %+v: want one that is not the token", ck)
	}
	if code, _ := get(t, bc, srv.URL+"/dashboard/state"); code != 200 {
		t.Errorf("GET state with the session cookie = %d, want 200", code)
	}
	// A new token logs the cookie out.
	d.opts.Token = func() string { return "other" }
	if code, _ := get(t, bc, srv.URL+"/dashboard/state"); code != 401 {
		t.Errorf("GET state with the old session after a token change = %d, want 401", code)
	}
}

// Each sample reaches a page watching /events as one event carrying the
// new state and the new point.
func TestEvents(t *testing.T) {
	src := newFake()
	d := New(src, Options{})
	t0 := time.Unix(1767225600, 0)
	d.Sample(t0)
	srv := httptest.NewServer(d)
	defer srv.Close()
	res, err := srv.Client().Get(srv.URL + "/dashboard/events")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	br := bufio.NewReader(res.Body)
	readEvent := func() point {
		t.Helper()
		var data string
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				data = d
			}
			if line == "\n" && data != "" {
				var p point
				if err := json.Unmarshal([]byte(data), &p); err != nil {
					t.Fatal(err)
				}
				return p
			}
		}
	}
	// The subscription is in place once the first bytes arrived.
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	src.add("per-ip", "refused", 7)
	d.Sample(t0.Add(time.Second))
	p := readEvent()
	var st state
	json.Unmarshal(p.State, &st)
	if p.Rules["per-ip"][1] != 7 || st.Rules[0].Counts["refused"] != 7 || p.T != t0.Add(time.Second).UnixMilli() {
		t.Errorf("event %+v (state rules %+v): want 7 refused/s and 7 refused in all", p.Rules, st.Rules)
	}
}

func TestUsage(t *testing.T) {
	u := NewUsage(2)
	u.SetRules([]string{"a", "b"})
	now := time.Unix(1000, 0)
	a := u.Rule(0)
	a.Observe("k1", 5, 10, time.Minute, now)
	a.Observe("k2", 9, 10, time.Minute, now)
	a.Observe("k3", 1, 10, time.Minute, now) // below both: not kept
	a.Observe("k4", 7, 10, time.Minute, now) // replaces k1
	a.Observe("k2", 10, 10, 10*time.Second, now)
	u.Rule(1).Observe("q", 500, 1000, time.Hour, now)
	if u.Rule(2) != nil {
		t.Error("Rule(2) of two rules is not nil")
	}
	top := u.Top(now.Add(time.Second))
	var got []string
	for _, e := range top {
		got = append(got, e.Rule+"/"+e.Key)
	}
	if strings.Join(got, " ") != "a/k2 a/k4 b/q" {
		t.Errorf("Top = %v, want a/k2 a/k4 b/q (most used share first)", got)
	}
	// k2 is whole again after 10 s: it drops out, and a lower key fits.
	top = u.Top(now.Add(11 * time.Second))
	if len(top) != 2 || top[0].Key != "k4" {
		t.Errorf("Top after k2's reset = %+v", top)
	}
	a.Observe("k3", 1, 10, time.Minute, now.Add(11*time.Second))
	if top = u.Top(now.Add(12 * time.Second)); len(top) != 3 {
		t.Errorf("Top after a free place = %+v, want k4, q and k3", top)
	}
	u.SetRules([]string{"b"}) // a reload keeps b's keys
	if top = u.Top(now.Add(12 * time.Second)); len(top) != 1 || top[0].Key != "q" {
		t.Errorf("Top after SetRules(b) = %+v", top)
	}
}

// TestWindowCounts: the rule cards count the decisions of the samples kept
// (the window the charts show): all of them while the history has not
// wrapped, then only those of the samples still held — never the counters
// since the start once those reach further back. Samples on the test's
// clock.
func TestWindowCounts(t *testing.T) {
	src := newFake()
	d := New(src, Options{History: 3})
	t0 := time.Unix(1_700_000_000, 0)
	window := func() [3]float64 {
		t.Helper()
		d.mu.Lock()
		defer d.mu.Unlock()
		var st state
		if err := json.Unmarshal(d.encode(false), &st); err != nil {
			t.Fatal(err)
		}
		return st.Window["per-ip"]
	}
	src.add("per-ip", "allowed", 2) // before the first sample: since the start
	d.Sample(t0)
	src.add("per-ip", "refused", 5)
	src.add("per-ip", "near-limit", 1)
	d.Sample(t0.Add(700 * time.Millisecond))
	if got := window(); got != [3]float64{3, 5, 0} {
		t.Errorf("before the history wraps: window %v, want [3 5 0] (every decision since the start)", got)
	}
	for i := range 3 {
		src.add("per-ip", "shadow-refused", 1)
		d.Sample(t0.Add(time.Duration(i+2) * time.Second))
	}
	if got := window(); got != [3]float64{0, 0, 3} {
		t.Errorf("the history of 3 samples wrapped: window %v, want [0 0 3] (the last three samples' only)", got)
	}
}
