package header_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/engine/header"
	"github.com/portero-rl/portero/store/storetest"
)

func rule(t testing.TB, name string, alg portero.Algorithm, limit string, shadow bool, unit string) *engine.Rule {
	t.Helper()
	r := engine.Rule{Rule: portero.Rule{Name: name, Algorithm: alg, Limit: portero.MustParseLimit(limit)}, Shadow: shadow, Unit: unit}
	ann, err := header.Announce(&r)
	if err != nil {
		t.Fatal(err)
	}
	r.Announce = ann
	out, err := engine.NewRule(r)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestAnnounce(t *testing.T) {
	for _, tt := range []struct {
		alg    portero.Algorithm
		limit  string
		unit   string
		name   string
		policy string
	}{
		{portero.FixedWindow, "100/min", "", "per-ip", `"per-ip";q=100;w=60`},
		{portero.SlidingCounter, "5/1500ms", "", "a", `"a";q=5;w=2`}, // w rounded up
		{portero.SlidingLog, "3/h", "", "login", `"login";q=3;w=3600`},
		{portero.TokenBucket, "10/s burst 40", "", "api", `"api";q=40;w=4`}, // q = B, w = B/r
		{portero.GCRA, "2/s", "", "g", `"g";q=2;w=1`},
		{portero.LeakyMeter, "1000/s", "content-bytes", "upload", `"upload";q=1000;qu="content-bytes";w=1`},
		{portero.LeakyQueue, "1/s burst 5", "", "queue", `"queue";q=5;w=5`},
		{portero.FixedWindow, "1/s", "", `we"ird\`, `"we\"ird\\";q=1;w=1`},
	} {
		r := rule(t, tt.name, tt.alg, tt.limit, false, tt.unit)
		if r.Announce.Policy != tt.policy {
			t.Errorf("Announce(%s %s).Policy = %s, want %s", tt.alg, tt.limit, r.Announce.Policy, tt.policy)
		}
		if got, err := httpsfv.UnmarshalItem([]string{r.Announce.Name}); err != nil || got.Value != tt.name {
			t.Errorf("Announce(%q).Name = %s, which parses as %v, %v", tt.name, r.Announce.Name, got.Value, err)
		}
	}
	// A name that cannot be an sf-string is an error, never a '?'.
	for _, name := range []string{"café", "tab\there", "new\nline"} {
		r := engine.Rule{Rule: portero.Rule{Name: name, Algorithm: portero.FixedWindow, Limit: portero.PerSecond(1)}}
		if ann, err := header.Announce(&r); err == nil || !strings.Contains(err.Error(), "printable ASCII") {
			t.Errorf("Announce(%q) = %+v, %v; want an error", name, ann, err)
		}
	}
	huge := engine.Rule{Rule: portero.Rule{Name: "huge", Algorithm: portero.FixedWindow, Limit: portero.Limit{Count: 1 << 52, Window: time.Hour}}}
	if _, err := header.Announce(&huge); err == nil {
		t.Error("Announce with q = 2^52 (16 digits) = nil error, want one: an sf-integer has at most 15")
	}
}

func concRule(t testing.TB, name string, max int64, service bool) *engine.Rule {
	t.Helper()
	r, err := engine.NewRule(engine.Rule{Rule: portero.Rule{Name: name}, Concurrency: portero.ConcurrencyRule{Max: max}, Service: service})
	if err != nil {
		t.Fatal(err)
	}
	if r.Announce, err = header.Announce(r); err != nil {
		t.Fatal(err)
	}
	return r
}

// A concurrency limit is announced with its unit and without a window.
func TestAnnounceConcurrency(t *testing.T) {
	r := concRule(t, "per-client", 4, false)
	if r.Announce.Name != `"per-client"` || r.Announce.Policy != `"per-client";q=4;qu="concurrent-requests"` {
		t.Errorf("Announce(concurrency 4) = %+v", r.Announce)
	}
	bad, err := engine.NewRule(engine.Rule{Rule: portero.Rule{Name: "café"}, Concurrency: portero.ConcurrencyRule{Max: 4}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := header.Announce(bad); err == nil {
		t.Error("Announce(café) = nil error")
	}
}

// The rate limits and the concurrency limits of one request are written in
// the same fields by the one writer: both kinds in RateLimit-Policy and in
// RateLimit when admitted (the concurrency item with r, the slots still
// free, and no t), and only the refusing concurrency rule's item when it
// refuses, with Retry-After.
func TestConcurrencyAndRateFields(t *testing.T) {
	rate := rule(t, "per-ip", portero.FixedWindow, "10/min", false, "")
	conc := concRule(t, "in-flight", 1, false)
	st := storetest.NewReference()
	e, err := engine.New(engine.Options{Store: st, Leases: storetest.NewLeaseReference()})
	if err != nil {
		t.Fatal(err)
	}
	w := header.NewWriter([]*engine.Rule{rate, conc}, false)
	hits := []engine.Hit{{Rule: rate, Key: "a", Cost: 1}, {Rule: conc, Key: "a", Cost: 1}}
	fields := func(v *engine.Verdict) map[string]string {
		fs, buf := w.Append(nil, nil, v)
		m := map[string]string{}
		for _, f := range fs {
			m[f.Name] = f.Value(buf)
		}
		return m
	}
	var first engine.Verdict
	if err := e.Admit(context.Background(), storetest.Base, hits, &first); err != nil || !first.Allowed {
		t.Fatalf("Admit = %v, allowed %v", err, first.Allowed)
	}
	got := fields(&first)
	want := map[string]string{
		"RateLimit-Policy": `"per-ip";q=10;w=60, "in-flight";q=1;qu="concurrent-requests"`,
		"RateLimit":        `"per-ip";r=9;t=60, "in-flight";r=0`,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("admitted: %s = %q, want %q", k, got[k], v)
		}
	}
	var second engine.Verdict
	if err := e.Admit(context.Background(), storetest.Base, hits, &second); err != nil || second.Allowed {
		t.Fatalf("Admit with the slot held = %v, allowed %v", err, second.Allowed)
	}
	got = fields(&second)
	want = map[string]string{
		"RateLimit-Policy": `"per-ip";q=10;w=60, "in-flight";q=1;qu="concurrent-requests"`,
		"RateLimit":        `"in-flight";r=0`,
		"Retry-After":      "1",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("refused: %s = %q, want %q", k, got[k], v)
		}
	}
}

// flaky fails while down.
type flaky struct {
	portero.Store
	down atomic.Bool
}

func (f *flaky) AllowAll(ctx context.Context, now time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	if f.down.Load() {
		return nil, portero.ErrStoreUnavailable
	}
	return f.Store.AllowAll(ctx, now, hits)
}

func (f *flaky) Peek(ctx context.Context, r portero.Rule, k string, now time.Time, cost int64) (portero.Decision, error) {
	if f.down.Load() {
		return portero.Decision{}, portero.ErrStoreUnavailable
	}
	return f.Store.Peek(ctx, r, k, now, cost)
}

// fields formats the fields as "Name: value" lines.
func fields(fs []header.Field, buf []byte) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(f.Name + ": " + f.Value(buf) + "\n")
	}
	return b.String()
}

func TestAppend(t *testing.T) {
	ip := rule(t, "per-ip", portero.FixedWindow, "3/min", false, "")
	bucket := rule(t, "api", portero.TokenBucket, "10/s burst 40", false, "")
	dark := rule(t, "dark", portero.FixedWindow, "1/min", true, "")
	up := rule(t, "upload", portero.TokenBucket, "1000/s", false, "content-bytes")
	h := func(r *engine.Rule, key string, cost int64) engine.Hit {
		return engine.Hit{Rule: r, Key: key, Cost: cost}
	}
	at := storetest.Base.Add(15 * time.Second) // 45 s before the minute's end
	for _, tt := range []struct {
		name   string
		policy portero.FailurePolicy
		down   bool
		prime  []engine.Hit
		hits   []engine.Hit
		legacy bool
		want   string
	}{
		{name: "allowed: every enforced rule, shadow ones never",
			hits: []engine.Hit{h(ip, "a", 1), h(dark, "a", 1), h(bucket, "a", 4)},
			want: "RateLimit-Policy: \"per-ip\";q=3;w=60, \"api\";q=40;w=4\n" +
				"RateLimit: \"per-ip\";r=2;t=45, \"api\";r=36;t=1\n"},
		{name: "refused: only the rule that refused, and Retry-After", prime: []engine.Hit{h(ip, "a", 3)},
			hits: []engine.Hit{h(ip, "a", 1), h(bucket, "a", 4)},
			want: "RateLimit-Policy: \"per-ip\";q=3;w=60, \"api\";q=40;w=4\n" +
				"RateLimit: \"per-ip\";r=0;t=45\nRetry-After: 45\n"},
		{name: "a cost that can never pass: no Retry-After", hits: []engine.Hit{h(up, "a", 5000)},
			want: "RateLimit-Policy: \"upload\";q=1000;qu=\"content-bytes\";w=1\nRateLimit: \"upload\";r=1000;t=0\n"},
		{name: "legacy fields describe the rule closest to exhaustion", legacy: true,
			hits: []engine.Hit{h(bucket, "a", 4), h(ip, "a", 2)},
			want: "RateLimit-Policy: \"api\";q=40;w=4, \"per-ip\";q=3;w=60\n" +
				"RateLimit: \"api\";r=36;t=1, \"per-ip\";r=1;t=45\n" +
				"X-RateLimit-Limit: 3\nX-RateLimit-Remaining: 1\nX-RateLimit-Reset: 45\n"},
		{name: "legacy fields of a refusal describe the refusing rule", legacy: true, prime: []engine.Hit{h(ip, "a", 3)},
			hits: []engine.Hit{h(bucket, "a", 4), h(ip, "a", 1)},
			want: "RateLimit-Policy: \"api\";q=40;w=4, \"per-ip\";q=3;w=60\nRateLimit: \"per-ip\";r=0;t=45\nRetry-After: 45\n" +
				"X-RateLimit-Limit: 3\nX-RateLimit-Remaining: 0\nX-RateLimit-Reset: 45\n"},
		{name: "one rule on two keys is announced once, by its most telling state",
			prime: []engine.Hit{h(ip, "b", 2)}, hits: []engine.Hit{h(ip, "a", 1), h(ip, "b", 1)},
			want: "RateLimit-Policy: \"per-ip\";q=3;w=60\nRateLimit: \"per-ip\";r=0;t=45\n"},
		{name: "fail-open: the policy stays, no made-up figures", policy: portero.FailAllow, down: true, legacy: true,
			hits: []engine.Hit{h(ip, "a", 1), h(bucket, "a", 1)},
			want: "RateLimit-Policy: \"per-ip\";q=3;w=60, \"api\";q=40;w=4\n"},
		{name: "fail-closed: the policy stays, Retry-After of the failure", policy: portero.FailDeny, down: true,
			hits: []engine.Hit{h(ip, "a", 1)},
			want: "RateLimit-Policy: \"per-ip\";q=3;w=60\nRetry-After: 1\n"},
		{name: "local: decided in memory, still no figures", policy: portero.FailLocal, down: true,
			hits: []engine.Hit{h(ip, "a", 1)},
			want: "RateLimit-Policy: \"per-ip\";q=3;w=60\n"},
		{name: "only shadow rules: nothing", hits: []engine.Hit{h(dark, "a", 1)}, want: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := &flaky{Store: storetest.NewReference()}
			e, err := engine.New(engine.Options{Store: st, OnError: tt.policy})
			if err != nil {
				t.Fatal(err)
			}
			v := new(engine.Verdict)
			ctx := context.Background()
			if tt.prime != nil {
				if err := e.Decide(ctx, at, tt.prime, v); err != nil {
					t.Fatal(err)
				}
			}
			st.down.Store(tt.down)
			if err := e.Decide(ctx, at, tt.hits, v); err != nil {
				t.Fatal(err)
			}
			w := &header.Writer{Legacy: tt.legacy}
			fs, buf := w.Append(nil, nil, v)
			if got := fields(fs, buf); got != tt.want {
				t.Errorf("Append =\n%s\nwant\n%s", got, tt.want)
			}
			// The same with a writer that knows a rule set.
			w = header.NewWriter([]*engine.Rule{ip, dark, bucket, up}, tt.legacy)
			fs, buf = w.Append(nil, nil, v)
			if got := fields(fs, buf); got != tt.want {
				t.Errorf("NewWriter(...).Append =\n%s\nwant\n%s", got, tt.want)
			}
			for _, f := range fs {
				switch f.Name {
				case header.RateLimitPolicy, header.RateLimit:
					if _, err := httpsfv.UnmarshalList([]string{f.Value(buf)}); err != nil {
						t.Errorf("%s: %s does not parse as an sf-list: %v", f.Name, f.Value(buf), err)
					}
				}
				if f.Key != canonical(f.Name) {
					t.Errorf("field %s: Key %q, want %q", f.Name, f.Key, canonical(f.Name))
				}
			}
		})
	}
}

// canonical is http.CanonicalHeaderKey for the names at hand.
func canonical(s string) string {
	b := []byte(strings.ToLower(s))
	up := true
	for i, c := range b {
		if up && c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
		up = c == '-'
	}
	return string(b)
}

// When exactly the set's enforced rules apply, RateLimit-Policy is the
// text joined once; in another order it is joined per request, equally.
func TestWriterSet(t *testing.T) {
	a := rule(t, "a", portero.FixedWindow, "10/s", false, "")
	b := rule(t, "b", portero.FixedWindow, "10/s", false, "")
	st := storetest.NewReference()
	e, err := engine.New(engine.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	w := header.NewWriter([]*engine.Rule{a, b}, false)
	v := new(engine.Verdict)
	for _, tt := range []struct {
		hits    []engine.Hit
		static  bool
		wantPol string
	}{
		{[]engine.Hit{{Rule: a, Key: "k", Cost: 1}, {Rule: b, Key: "k", Cost: 1}}, true, `"a";q=10;w=1, "b";q=10;w=1`},
		{[]engine.Hit{{Rule: b, Key: "k", Cost: 1}, {Rule: a, Key: "k", Cost: 1}}, false, `"b";q=10;w=1, "a";q=10;w=1`},
		{[]engine.Hit{{Rule: b, Key: "k", Cost: 1}}, true, `"b";q=10;w=1`},
	} {
		if err := e.Decide(context.Background(), storetest.Base, tt.hits, v); err != nil {
			t.Fatal(err)
		}
		fs, buf := w.Append(nil, nil, v)
		if fs[0].Name != header.RateLimitPolicy || fs[0].Value(buf) != tt.wantPol || fs[0].Dynamic == tt.static {
			t.Errorf("RateLimit-Policy = %+v %q, want %q (static %v)", fs[0], fs[0].Value(buf), tt.wantPol, tt.static)
		}
	}
}

// Rules built without Announce are announced all the same.
func TestAppendUnprepared(t *testing.T) {
	r, err := engine.NewRule(engine.Rule{Rule: portero.Rule{Name: "raw", Algorithm: portero.FixedWindow, Limit: portero.PerSecond(5)}})
	if err != nil {
		t.Fatal(err)
	}
	bad, err := engine.NewRule(engine.Rule{Rule: portero.Rule{Name: "café", Algorithm: portero.FixedWindow, Limit: portero.PerSecond(5)}})
	if err != nil {
		t.Fatal(err)
	}
	e, _ := engine.New(engine.Options{Store: storetest.NewReference()})
	v := new(engine.Verdict)
	if err := e.Decide(context.Background(), storetest.Base, []engine.Hit{{Rule: r, Key: "k", Cost: 1}, {Rule: bad, Key: "k", Cost: 1}}, v); err != nil {
		t.Fatal(err)
	}
	fs, buf := new(header.Writer).Append(nil, nil, v)
	if got, want := fields(fs, buf), "RateLimit-Policy: \"raw\";q=5;w=1\nRateLimit: \"raw\";r=4;t=1\n"; got != want {
		t.Errorf("Append =\n%s\nwant\n%s", got, want)
	}
}

func TestAppendAllocations(t *testing.T) {
	ip := rule(t, "per-ip", portero.FixedWindow, "100/min", false, "")
	g := rule(t, "global", portero.TokenBucket, "1000/s", false, "")
	e, _ := engine.New(engine.Options{Store: storetest.NewReference()})
	v := new(engine.Verdict)
	if err := e.Decide(context.Background(), storetest.Base, []engine.Hit{{Rule: ip, Key: "k", Cost: 1}, {Rule: g, Key: "k", Cost: 1}}, v); err != nil {
		t.Fatal(err)
	}
	w := header.NewWriter([]*engine.Rule{ip, g}, true)
	fs, buf := make([]header.Field, 0, 8), make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() { fs, buf = w.Append(fs[:0], buf[:0], v) }); n != 0 {
		t.Errorf("Append allocates %v times with reused buffers, want 0", n)
	}
}

// Announce either refuses a name or writes one that parses back to it.
func FuzzAnnounce(f *testing.F) {
	for _, s := range []string{"per-ip", `"\`, "\x00\xff", "café", "a b", ""} {
		f.Add(s, "")
		f.Add(s, "content-bytes")
	}
	f.Fuzz(func(t *testing.T, name, unit string) {
		r := engine.Rule{Rule: portero.Rule{Name: name, Algorithm: portero.GCRA, Limit: portero.PerSecond(7)}, Unit: unit}
		ann, err := header.Announce(&r)
		if err != nil {
			return
		}
		item, err := httpsfv.UnmarshalItem([]string{ann.Name})
		if err != nil || item.Value != name {
			t.Fatalf("Announce(%q).Name = %s, parsed as %v, %v", name, ann.Name, item.Value, err)
		}
		pol, err := httpsfv.UnmarshalItem([]string{ann.Policy})
		if err != nil || pol.Value != name {
			t.Fatalf("Announce(%q).Policy = %s, parsed as %v, %v", name, ann.Policy, pol.Value, err)
		}
		if q, _ := pol.Params.Get("q"); q != int64(7) {
			t.Fatalf("Announce(%q).Policy = %s: q = %v, want 7", name, ann.Policy, q)
		}
		if qu, ok := pol.Params.Get("qu"); (unit != "") != ok || ok && qu != unit {
			t.Fatalf("Announce(%q, unit %q).Policy = %s: qu = %v", name, unit, ann.Policy, qu)
		}
	})
}
