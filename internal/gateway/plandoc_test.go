package gateway_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/gateway"
	"github.com/portero-rl/portero/store/memstore"
)

// docClock is the instant of the walk-through in docs/plans.md: Monday 1
// June 2026, 12:00:00 UTC.
var docClock = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

var (
	curlHeader = regexp.MustCompile(`-H '([^:']+): ([^']*)'`)
	curlMethod = regexp.MustCompile(`-X (\w+)`)
	curlWrite  = regexp.MustCompile(`-w '([^']*)'`)
	curlURL    = regexp.MustCompile(`http://127\.0\.0\.1:8080(\S*)`)
)

// TestPlanDocWalkthrough runs the curl commands of docs/plans.md's
// walk-through, in order, against examples/usage-plans.yaml served by the
// gateway (its upstream a test server, its clock fixed at docClock), and
// compares what each prints with what the page shows.
func TestPlanDocWalkthrough(t *testing.T) {
	doc, err := os.ReadFile("../../docs/plans.md")
	if err != nil {
		t.Fatal(err)
	}
	const file = "../../examples/usage-plans.yaml"
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// The page shows the file whole.
	if !strings.Contains(string(doc), "```yaml\n"+string(data)+"```\n") {
		t.Error("docs/plans.md does not show examples/usage-plans.yaml as it is")
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"ok":true}`+"\n")
	}))
	t.Cleanup(up.Close)
	cfg, err := config.Parse(file, []byte(strings.Replace(string(data), "http://127.0.0.1:3000", up.URL, 1)))
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New(memstore.Config{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(context.Background()) })
	g, err := gateway.New(cfg, store, gateway.Hooks{Now: func() time.Time { return docClock }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)

	n := 0
	for i, block := range strings.Split(string(doc), "```") {
		if i%2 == 0 {
			continue // between fences
		}
		cmd, want, ok := strings.Cut(strings.TrimPrefix(block, "\n"), "\n")
		if !ok || !strings.HasPrefix(cmd, "$ curl ") {
			continue
		}
		n++
		method := "GET"
		if m := curlMethod.FindStringSubmatch(cmd); m != nil {
			method = m[1]
		}
		u := curlURL.FindStringSubmatch(cmd)
		if u == nil {
			t.Fatalf("no URL in %s", cmd)
		}
		req, _ := http.NewRequest(method, srv.URL+u[1], nil)
		for _, h := range curlHeader.FindAllStringSubmatch(cmd, -1) {
			if h[1] == "Host" {
				req.Host = h[2]
				continue
			}
			req.Header.Set(h[1], h[2])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got := ""
		if !strings.Contains(cmd, "-o /dev/null") {
			got = string(body)
		}
		if w := curlWrite.FindStringSubmatch(cmd); w != nil {
			out := strings.ReplaceAll(w[1], `\n`, "\n")
			out = strings.ReplaceAll(out, "%{http_code}", resp.Status[:3])
			out = regexp.MustCompile(`%header\{([^}]+)\}`).ReplaceAllStringFunc(out, func(s string) string {
				return strings.Join(resp.Header.Values(s[len("%header{"):len(s)-1]), ", ")
			})
			got += out
		}
		if got != want {
			t.Errorf("%s printed\n%s\ndocs/plans.md shows\n%s", cmd, got, want)
		}
	}
	if n < 6 {
		t.Errorf("found %d curl blocks in docs/plans.md, want the 6 of the walk-through", n)
	}
}
