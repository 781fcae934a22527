package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// perSecond is a fake decider for the report's arithmetic: a rule that
// admits n requests per peer per second (and a shadow rule of half that).
// The real decider, the gateway's, is tested in cmd/portero against a
// running serve.
type perSecond struct {
	n      int
	counts map[string]int
	sec    int64
	dec    Decision
}

func (p *perSecond) Rules() []RuleInfo {
	return []RuleInfo{{Name: "per-ip", Key: "ip", Limit: fmt.Sprintf("%d/s", p.n)}, {Name: "half", Key: "ip", Limit: "1/s", Shadow: true}}
}

func (p *perSecond) Decide(now time.Time, r *Request) (*Decision, error) {
	if now.Unix() != p.sec {
		p.sec, p.counts = now.Unix(), map[string]int{}
	}
	key := "ip=" + r.Peer
	c := p.counts[key]
	p.dec = Decision{Status: 200, Client: netip.MustParseAddr(r.Peer), Rule: 0, Results: p.dec.Results[:0], Decision: "allowed"}
	if c >= p.n {
		p.dec.Status, p.dec.Decision = 429, "refused"
		p.dec.Results = append(p.dec.Results, RuleResult{Rule: 0, Key: key, Outcome: Refused},
			RuleResult{Rule: 1, Key: key, Outcome: NotCounted, Shadow: true})
		return &p.dec, nil
	}
	p.counts[key] = c + 1
	sh := Allowed
	if c >= 1 {
		sh = ShadowRefused
	}
	p.dec.Results = append(p.dec.Results, RuleResult{Rule: 0, Key: key, Outcome: Allowed}, RuleResult{Rule: 1, Key: key, Outcome: sh, Shadow: true})
	return &p.dec, nil
}

func TestReplayReport(t *testing.T) {
	dir := t.TempDir()
	var log strings.Builder
	// Second 0: 192.0.2.1 sends 5 (3 refused), 192.0.2.2 sends 1. A
	// malformed line in the middle. Second 1: 192.0.2.1 sends 2.
	line := func(ip string, sec int, path string) {
		fmt.Fprintf(&log, `%s - - [01/Jan/2026:00:00:%02d +0000] "GET %s HTTP/1.1" 200 0 "-" "-"`+"\n", ip, sec, path)
	}
	for i := range 5 {
		line("192.0.2.1", 0, fmt.Sprintf("/a,%d", i))
	}
	log.WriteString("garbage\n")
	line("192.0.2.2", 0, "/b")
	line("192.0.2.1", 1, "/c")
	line("192.0.2.1", 1, "/c")
	p := write(t, dir, "access.log", log.String())
	rd, err := Open([]string{p}, InputOptions{}, openFile)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var decisions bytes.Buffer
	rep, err := Replay(context.Background(), rd, &perSecond{n: 2}, Options{Decisions: &decisions})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 8 || rep.Malformed != 1 || len(rep.Examples) != 1 || !strings.HasPrefix(rep.Examples[0], p+":6: ") {
		t.Errorf("requests %d, malformed %d %v; want 8, 1 on line 6", rep.Requests, rep.Malformed, rep.Examples)
	}
	r := rep.Rules[0]
	if r.Applied != 8 || r.Allowed != 5 || r.Refused != 3 || r.PeakN != 3 || !r.Peak.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("per-ip: %+v; want applied 8, allowed 5, refused 3, peak 3 at second 0", r)
	}
	if s := rep.Rules[1]; s.WouldRefuse != 2 || s.NotCounted != 3 || s.Allowed != 3 {
		t.Errorf("shadow: %+v; want 2 shadow refusals (one per busy second), 3 not counted, 3 allowed", s)
	}
	if len(rep.Statuses) != 2 || rep.Statuses[0] != (Count{200, 5}) || rep.Statuses[1] != (Count{429, 3}) {
		t.Errorf("statuses %v", rep.Statuses)
	}
	if len(rep.TopKeys) != 2 || rep.TopKeys[0].Key != "ip=192.0.2.1" || rep.TopKeys[0].Refused != 3 || rep.TopKeys[0].Rule != "per-ip" ||
		rep.TopKeys[1].Refused != 2 || !rep.TopKeys[1].Shadow {
		t.Errorf("top keys %+v", rep.TopKeys)
	}
	rows := strings.Split(strings.TrimSpace(decisions.String()), "\n")
	if len(rows) != 9 || rows[0] != "line,time,client,method,path,status,rule,decision" ||
		rows[3] != `3,2026-01-01T00:00:00Z,192.0.2.1,GET,"/a,2",429,per-ip,refused` || rows[6] != "7,2026-01-01T00:00:00Z,192.0.2.2,GET,/b,200,per-ip,allowed" {
		t.Errorf("decisions:\n%s", decisions.String())
	}
	for _, f := range ReportFormats {
		var out bytes.Buffer
		if err := rep.Write(&out, f); err != nil {
			t.Fatalf("Write(%s): %v", f, err)
		}
		if !strings.Contains(out.String(), "192.0.2.1") {
			t.Errorf("Write(%s) does not name the refused key:\n%s", f, out.String())
		}
	}
	var out bytes.Buffer
	rep.Write(&out, "json")
	var back Report
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back.Rules[0].Refused != 3 || len(back.Timeline.Refused[0]) != 2 {
		t.Errorf("JSON report does not read back: %v %+v", err, back.Timeline)
	}
	for _, name := range []string{"c.png", "c.svg"} {
		path := filepath.Join(dir, name)
		if err := rep.Chart(path); err != nil {
			t.Fatal(err)
		}
		if name == "c.png" {
			f, _ := os.Open(path)
			img, err := png.Decode(f)
			f.Close()
			if err != nil || img.Bounds().Dx() < 100 {
				t.Errorf("chart %s: %v", name, err)
			}
		}
	}
}

// Every key refused more than total/capacity times is kept, and a kept
// key's count is within its Error of the truth: checked against exact
// counts on a skewed random stream.
func TestTopKeys(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tk := newTopKeys(50)
	exact := map[string]int64{}
	for range 100000 {
		var k string
		if rng.IntN(2) == 0 {
			k = fmt.Sprintf("heavy-%d", rng.IntN(10))
		} else {
			k = fmt.Sprintf("tail-%d", rng.IntN(5000))
		}
		exact[k]++
		tk.add(0, k, time.Time{})
	}
	type kc struct {
		k string
		n int64
	}
	var truth []kc
	for k, n := range exact {
		truth = append(truth, kc{k, n})
	}
	sort.Slice(truth, func(i, j int) bool { return truth[i].n > truth[j].n })
	got := tk.top(10)
	for i, c := range got {
		real := exact[c.key]
		if real > c.count || real < c.count-c.err {
			t.Errorf("key %s: count %d ± %d, true %d", c.key, c.count, c.err, real)
		}
		if !strings.HasPrefix(c.key, "heavy-") {
			t.Errorf("top[%d] = %s (%d), want one of the heavy keys", i, c.key, c.count)
		}
	}
	if len(tk.byKey) != 50 || len(tk.h) != 50 {
		t.Errorf("kept %d counters, want the capacity 50", len(tk.byKey))
	}
}

// A timeline that outgrows its buckets widens them and keeps every count.
func TestTimeline(t *testing.T) {
	tl := newTimeline(1)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var total int64
	for s := 0; s < 7*24*3600; s += 7 {
		tl.add(start.Add(time.Duration(s)*time.Second), 0, 1)
		total++
	}
	var sum int64
	for _, c := range tl.counts {
		sum += c[0]
	}
	if sum != total || len(tl.counts) > MaxBuckets || tl.width != 5*time.Minute {
		t.Errorf("sum %d of %d, %d buckets of %v; want all, at most %d, of 5m", sum, total, len(tl.counts), tl.width, MaxBuckets)
	}
}

// TestReplayCountsDroppedApart: where serve's access log says it dropped
// entries, the replay counts them as Dropped, not Malformed, and lists
// both kinds among the examples.
func TestReplayCountsDroppedApart(t *testing.T) {
	p := write(t, t.TempDir(), "access.json", `{"time":"2026-01-01T00:00:00Z","method":"GET","path":"/a","peer":"192.0.2.1"}
{"dropped":3}
not json
{"time":"2026-01-01T00:00:01Z","method":"GET","path":"/b","peer":"192.0.2.1"}
`)
	rd, err := Open([]string{p}, InputOptions{Format: "json"}, openFile)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	rep, err := Replay(context.Background(), rd, &perSecond{n: 2}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 2 || rep.Dropped != 1 || rep.Malformed != 1 || len(rep.Examples) != 2 ||
		!strings.Contains(rep.Examples[0], "dropped 3 entries") || !strings.HasPrefix(rep.Examples[1], p+":3: ") {
		t.Errorf("requests %d, dropped %d, malformed %d, examples %q; want 2, 1 (line 2), 1 (line 3)", rep.Requests, rep.Dropped, rep.Malformed, rep.Examples)
	}
}
