package sms_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portero-rl/portero/examples/sms"
	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/internal/server"
	"github.com/portero-rl/portero/internal/testenv"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/redisstore"
)

// provider is a fake SMS provider that bills what it is sent: it counts the
// messages of each batch from the batch itself, not from the cost header.
type provider struct {
	billed   atomic.Int64
	requests atomic.Int64
	badCost  atomic.Int64
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var b sms.Batch
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil || r.URL.Path != "/sms/send" {
		http.Error(w, "bad batch", 400)
		return
	}
	if r.Header.Get(sms.CostHeader) != strconv.FormatInt(sms.Messages(b), 10) {
		p.badCost.Add(1)
	}
	p.billed.Add(sms.Messages(b))
	p.requests.Add(1)
	io.WriteString(w, `{"status":"queued"}`)
}

// startGateway runs the gateway of examples/sms/portero.yaml (what
// `portero serve --config` runs) with its Redis and upstream pointed at the
// test's, and returns its URL and the config file it wrote.
func startGateway(t *testing.T, redisURL, providerURL string) (string, string) {
	t.Helper()
	raw, err := os.ReadFile("portero.yaml")
	if err != nil {
		t.Fatal(err)
	}
	yaml := string(raw)
	// A deadline generous enough that a loaded test machine is not taken
	// for an outage: under on_error: deny a missed 50 ms deadline is a 503,
	// which this test would count as a refusal (the deadline includes the
	// wait for a batch since issue 10.6).
	for old, repl := range map[string]string{"redis://127.0.0.1:6379/0": redisURL, "http://127.0.0.1:9000": providerURL,
		"  on_error: deny": "  timeout: 5s\n  on_error: deny"} {
		if strings.Count(yaml, old) != 1 {
			t.Fatalf("examples/sms/portero.yaml no longer has %q once: update this test", old)
		}
		yaml = strings.Replace(yaml, old, repl, 1)
	}
	path := filepath.Join(t.TempDir(), "portero.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := &testenv.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, server.Options{ConfigPath: path, Listen: "127.0.0.1:0", AdminListen: "off", Stdout: out,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("gateway: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("gateway did not stop")
		}
	})
	re := regexp.MustCompile(`gateway listening on (http://\S+)`)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m[1], path
		}
		select {
		case err := <-done:
			t.Fatalf("gateway stopped: %v", err)
		default:
		}
	}
	t.Fatalf("the gateway printed no address: %s", out)
	return "", ""
}

// batch returns a batch of n recipients and a text of the given length.
func batch(n, length int) sms.Batch {
	b := sms.Batch{Text: strings.Repeat("x", length)}
	for i := range n {
		b.To = append(b.To, fmt.Sprintf("+1555%07d", i))
	}
	return b
}

// TestGatewayAndJobShareTheLimit is the seed's SMS provider: a real
// gateway from examples/sms/portero.yaml on a real redis-server, and the
// nightly job calling the library (redisstore) with the same rule, straight
// to the provider. They interleave batches of weighted cost (recipients ×
// segments), then flood it together from six goroutines; every admission
// is the one a single counter would make, and the provider bills exactly
// the 1000 messages of the hour, no more, however they were sent.
func TestGatewayAndJobShareTheLimit(t *testing.T) {
	rs := redistest.Start(t)
	prov := &provider{}
	provSrv := httptest.NewServer(prov)
	defer provSrv.Close()
	gw, path := startGateway(t, rs.URL(), provSrv.URL)

	// The job's rule is the gateway's: same store rule, key, cost, match.
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	_, rule := sms.Rule()
	gr := cfg.Policy.Rule("sms-provider")
	if gr == nil || gr.StoreRule() != rule.StoreRule() || gr.Key.String() != rule.Key.String() || gr.Cost.String() != rule.Cost.String() || gr.Match.String() != rule.Match.String() {
		t.Fatalf("the job's rule %+v differs from the gateway's %+v", rule, gr)
	}
	req := &policy.Request{Method: "POST", Path: "/sms/send"}
	if k, _ := cfg.Policy.KeyOf(gr.Key, &gr.Match, req); k != sms.Key() {
		t.Fatalf("key: gateway %q, job %q", k, sms.Key())
	}

	store, err := redisstore.New(redisstore.Config{URL: rs.URL(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(context.Background())
	lim, err := store.Limiter(rule.StoreRule())
	if err != nil {
		t.Fatal(err)
	}
	job := sms.NewJob(lim, provSrv.URL+"/sms/send")
	night := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), time.Minute)
	}

	// One counter of 1000 admits a batch when its messages fit: that is
	// what every answer below must be, whichever path sent it.
	const budget = 1000
	left := int64(budget)
	sent := map[string]int64{}
	refused := map[string]int{}
	send := func(t *testing.T, via string, b sms.Batch) bool {
		t.Helper()
		if via == "gateway" {
			status, err := sms.Post(context.Background(), http.DefaultClient, gw+"/sms/send", b)
			if err != nil || (status != 200 && status != 429) {
				t.Fatalf("gateway: %d, %v", status, err)
			}
			return status == 200
		}
		ctx, cancel := night()
		defer cancel()
		err := job.Send(ctx, b)
		if err != nil && (!errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil) {
			t.Fatalf("job: %v, want sent or DeadlineExceeded before the night ends", err)
		}
		return err == nil
	}
	rng := rand.New(rand.NewPCG(7, 13))
	step := func(t *testing.T, i int, b sms.Batch) {
		t.Helper()
		via := [2]string{"gateway", "job"}[rng.IntN(2)]
		cost := sms.Messages(b)
		want := cost <= left
		if got := send(t, via, b); got != want {
			t.Fatalf("event %d via the %s: %d messages with %d left: admitted %v, want %v", i, via, cost, left, got, want)
		}
		if want {
			left -= cost
			sent[via] += cost
		} else {
			refused[via]++
		}
	}

	// Phase 1: weighted batches (recipients × segments), interleaved.
	i := 0
	for ; left > 200; i++ {
		step(t, i, batch(1+rng.IntN(12), 1+rng.IntN(400)))
	}
	// Phase 2: both paths at once, six goroutines, 120 one-message batches:
	// every one fits, and every one must be counted.
	var wg sync.WaitGroup
	var lost atomic.Int64
	for g := range 6 {
		via := [2]string{"gateway", "job"}[g%2]
		wg.Go(func() {
			for range 20 {
				ok := false
				if via == "gateway" {
					status, err := sms.Post(context.Background(), http.DefaultClient, gw+"/sms/send", batch(1, 20))
					ok = err == nil && status == 200
				} else {
					ctx, cancel := night()
					ok = job.Send(ctx, batch(1, 20)) == nil
					cancel()
				}
				if !ok {
					lost.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if lost.Load() != 0 {
		t.Fatalf("%d of 120 concurrent one-message batches refused with %d messages left", lost.Load(), left)
	}
	left -= 120
	sent["concurrent"] = 120
	// Phase 3: weighted again until the budget is spent (refusals, then
	// small batches that still fit), then single messages to the last one.
	for end := i + 80; i < end; i++ {
		step(t, i, batch(1+rng.IntN(12), 1+rng.IntN(400)))
	}
	for ; left > 0; i++ {
		step(t, i, batch(1, 10))
	}
	step(t, i, batch(1, 10)) // one more: refused
	if refused["gateway"] == 0 || refused["job"] == 0 {
		t.Fatalf("refusals %v: want both paths refused at least once", refused)
	}
	var total int64
	for _, n := range sent {
		total += n
	}
	if total != budget || prov.billed.Load() != budget {
		t.Errorf("admitted %d messages (%v), provider billed %d; want exactly %d", total, sent, prov.billed.Load(), budget)
	}
	if prov.badCost.Load() != 0 {
		t.Errorf("%d requests carried a cost header that was not their messages", prov.badCost.Load())
	}

	// The hour's budget is spent for both.
	body, _ := json.Marshal(batch(1, 5))
	r, _ := http.NewRequest("POST", gw+"/sms/send", bytes.NewReader(body))
	r.Header.Set(sms.CostHeader, "1")
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); resp.StatusCode != 429 || ra < 3000 {
		t.Errorf("gateway after the budget: %d, Retry-After %q; want 429 for most of an hour", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	ctx, cancel := night()
	defer cancel()
	if err := job.Send(ctx, batch(1, 5)); !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Errorf("job after the budget: %v, want DeadlineExceeded at once", err)
	}
	t.Logf("messages admitted %v, refused batches %v; provider billed %d in %d requests", sent, refused, prov.billed.Load(), prov.requests.Load())
}
