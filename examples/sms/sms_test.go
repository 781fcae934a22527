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
	// wait for a batch).
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

// TestGatewayAndJobShareTheLimit is an SMS provider behind one limit: a real
// gateway from examples/sms/portero.yaml on a real redis-server, and the
// nightly job calling the library (redisstore) with the same rule, straight
// to the provider. They interleave batches of weighted cost (recipients ×
// segments), then flood it together from six goroutines; every admission
// is the one a single counter would make, and the provider bills exactly
// the 1000 messages of the hour, no more, however they were sent.
func TestGatewayAndJobShareTheLimit(t *testing.T) {
	s := startSharedLimit(t)

	// Phase 1: weighted batches (recipients × segments), interleaved.
	i := 0
	for ; s.left > 200; i++ {
		s.step(t, i, batch(1+s.rng.IntN(12), 1+s.rng.IntN(400)))
	}
	// Phase 2: both paths at once.
	s.flood(t)
	// Phase 3: weighted again until the budget is spent (refusals, then
	// small batches that still fit), then single messages to the last one.
	for end := i + 80; i < end; i++ {
		s.step(t, i, batch(1+s.rng.IntN(12), 1+s.rng.IntN(400)))
	}
	for ; s.left > 0; i++ {
		s.step(t, i, batch(1, 10))
	}
	s.step(t, i, batch(1, 10)) // one more: refused
	if s.refused["gateway"] == 0 || s.refused["job"] == 0 {
		t.Fatalf("refusals %v: want both paths refused at least once", s.refused)
	}
	s.checkBilled(t)
	s.checkSpent(t)
	t.Logf("messages admitted %v, refused batches %v; provider billed %d in %d requests", s.sent, s.refused, s.prov.billed.Load(), s.prov.requests.Load())
}

// budget is the provider's messages an hour, the rule's limit.
const budget = 1000

// sharedLimit is the gateway and the nightly job in front of one provider,
// and what a single counter of the budget would have admitted so far.
type sharedLimit struct {
	gw   string // the gateway's URL
	job  *sms.Job
	prov *provider

	rng     *rand.Rand
	left    int64            // messages a single counter still admits
	sent    map[string]int64 // admitted messages by path
	refused map[string]int   // refused batches by path
}

// startSharedLimit starts redis-server, the provider and the gateway, checks
// that the job's rule is the gateway's, and builds the job on the library.
func startSharedLimit(t *testing.T) *sharedLimit {
	t.Helper()
	rs := redistest.Start(t)
	prov := &provider{}
	provSrv := httptest.NewServer(prov)
	t.Cleanup(provSrv.Close)
	gw, path := startGateway(t, rs.URL(), provSrv.URL)
	rule := jobRuleIsGateways(t, path)

	store, err := redisstore.New(redisstore.Config{URL: rs.URL(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(context.Background()) })
	lim, err := store.Limiter(rule.StoreRule())
	if err != nil {
		t.Fatal(err)
	}
	return &sharedLimit{
		gw: gw, job: sms.NewJob(lim, provSrv.URL+"/sms/send"), prov: prov,
		rng: rand.New(rand.NewPCG(7, 13)), left: budget, sent: map[string]int64{}, refused: map[string]int{},
	}
}

// jobRuleIsGateways checks that the job's rule is the gateway's in the
// configuration at path (same store rule, key, cost, match) and returns it.
func jobRuleIsGateways(t *testing.T, path string) *policy.Rule {
	t.Helper()
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
	return rule
}

// night is the job's patience for one batch.
func night() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Minute)
}

// send sends b through the gateway or the job and reports whether it was
// admitted.
func (s *sharedLimit) send(t *testing.T, via string, b sms.Batch) bool {
	t.Helper()
	if via == "gateway" {
		status, err := sms.Post(context.Background(), http.DefaultClient, s.gw+"/sms/send", b)
		if err != nil || (status != 200 && status != 429) {
			t.Fatalf("gateway: %d, %v", status, err)
		}
		return status == 200
	}
	ctx, cancel := night()
	defer cancel()
	err := s.job.Send(ctx, b)
	if err != nil && (!errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil) {
		t.Fatalf("job: %v, want sent or DeadlineExceeded before the night ends", err)
	}
	return err == nil
}

// step sends b through a path drawn at random and checks the answer is the
// one a single counter of the budget gives: admitted when its messages fit.
func (s *sharedLimit) step(t *testing.T, i int, b sms.Batch) {
	t.Helper()
	via := [2]string{"gateway", "job"}[s.rng.IntN(2)]
	cost := sms.Messages(b)
	want := cost <= s.left
	if got := s.send(t, via, b); got != want {
		t.Fatalf("event %d via the %s: %d messages with %d left: admitted %v, want %v", i, via, cost, s.left, got, want)
	}
	if want {
		s.left -= cost
		s.sent[via] += cost
	} else {
		s.refused[via]++
	}
}

// flood sends 120 one-message batches from six goroutines, three through
// each path: every one fits, and every one must be counted.
func (s *sharedLimit) flood(t *testing.T) {
	t.Helper()
	var wg sync.WaitGroup
	var lost atomic.Int64
	for g := range 6 {
		via := [2]string{"gateway", "job"}[g%2]
		wg.Go(func() {
			for range 20 {
				ok := false
				if via == "gateway" {
					status, err := sms.Post(context.Background(), http.DefaultClient, s.gw+"/sms/send", batch(1, 20))
					ok = err == nil && status == 200
				} else {
					ctx, cancel := night()
					ok = s.job.Send(ctx, batch(1, 20)) == nil
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
		t.Fatalf("%d of 120 concurrent one-message batches refused with %d messages left", lost.Load(), s.left)
	}
	s.left -= 120
	s.sent["concurrent"] = 120
}

// checkBilled checks that exactly the budget was admitted and billed, and
// that every request's cost header was its messages.
func (s *sharedLimit) checkBilled(t *testing.T) {
	t.Helper()
	var total int64
	for _, n := range s.sent {
		total += n
	}
	if total != budget || s.prov.billed.Load() != budget {
		t.Errorf("admitted %d messages (%v), provider billed %d; want exactly %d", total, s.sent, s.prov.billed.Load(), budget)
	}
	if s.prov.badCost.Load() != 0 {
		t.Errorf("%d requests carried a cost header that was not their messages", s.prov.badCost.Load())
	}
}

// checkSpent checks that the hour's budget is spent for both paths: the
// gateway refuses for most of an hour, the job gives up at once.
func (s *sharedLimit) checkSpent(t *testing.T) {
	t.Helper()
	body, _ := json.Marshal(batch(1, 5))
	r, _ := http.NewRequest("POST", s.gw+"/sms/send", bytes.NewReader(body))
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
	if err := s.job.Send(ctx, batch(1, 5)); !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Errorf("job after the budget: %v, want DeadlineExceeded at once", err)
	}
}
