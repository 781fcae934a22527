package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// serveMemoryPolicy is a small policy: a per-client bucket keyed by the
// address a trusted proxy (127.0.0.1) forwards, a global counter, and a
// memory store that keeps at most 10,000 keys per rule.
const serveMemoryPolicy = `server:
  listen: 127.0.0.1:0
store:
  type: memory
  max_keys: 10000
client_ip:
  trusted_proxies: [127.0.0.1]
upstreams:
  demo:
    type: demo
routes:
  - upstream: demo
rules:
  - name: per-client
    key: ip
    algorithm: token-bucket
    limit: 5/s burst 10
  - name: global
    key: global
    algorithm: sliding-counter
    limit: 1000000/s
`

// TestServePeakMemory runs the `portero serve` binary, as built for
// release (no race detector) and with the runtime's settings left to it
// (no GOGC, GOMEMLIMIT or GODEBUG), on a small policy, and drives 20,000
// requests through it from 127.0.0.1: 15,000 from distinct forwarded
// addresses (a flood past max_keys) and 5,000 from one client (refused
// past its burst). The process's peak resident memory (VmHWM) stays under
// 80 MB: the gateway's live heap is a few MB, and the collector's heap
// target follows it. Raising a floor under the heap target by setting GOGC
// would fail it: GOGC scales the runtime's 4 MiB minimum heap too (to
// 97 MB here; CHANGELOG.md has the figures).
func TestServePeakMemory(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "portero")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	conf := writeFile(t, "portero.yaml", serveMemoryPolicy)
	cmd := exec.Command(bin, "serve", "--config", conf, "--admin-listen", "off", "--log-level", "warn")
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); name != "GOGC" && name != "GOMEMLIMIT" && name != "GODEBUG" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	gw := gatewayURL(t, stdout, &stderr)

	const distinct, same = 15000, 5000
	var next, refused atomic.Int64
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: time.Minute}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > distinct+same {
					return
				}
				req, _ := http.NewRequest("GET", gw+"/", nil)
				xff := "192.0.2.1"
				if i <= distinct {
					xff = fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
				}
				req.Header.Set("X-Forwarded-For", xff)
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
				case http.StatusTooManyRequests:
					refused.Add(1)
				default:
					t.Errorf("request %d (X-Forwarded-For %s): %d", i, xff, resp.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	if n := refused.Load(); n < same/2 {
		t.Errorf("%d refused, want most of the one client's %d: the policy did not apply", n, same)
	}
	peak := procStatusKB(t, cmd.Process.Pid, "VmHWM")
	t.Logf("peak RSS %.1f MB after %d requests", float64(peak)/1000, distinct+same)
	if peak >= 80000 {
		t.Errorf("peak RSS %.1f MB, want under 80 MB", float64(peak)/1000)
	}
}

// gatewayURL reads the address `portero serve` prints from its standard
// output, and keeps reading (discarding) so that the process never blocks.
func gatewayURL(t *testing.T, stdout io.Reader, stderr fmt.Stringer) string {
	t.Helper()
	found := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`gateway listening on (http://\S+)`)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		close(found)
	}()
	select {
	case u, ok := <-found:
		if !ok {
			t.Fatalf("portero serve exited without an address:\n%s", stderr)
		}
		return u
	case <-time.After(time.Minute):
		t.Fatalf("portero serve printed no address in a minute:\n%s", stderr)
	}
	return ""
}

// procStatusKB reads a field in kB from /proc/PID/status.
func procStatusKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("/proc/%d/status: %s: %v", pid, line, err)
			}
			return n
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}
