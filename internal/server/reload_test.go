package server_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/portero-rl/portero/internal/server"
)

// TestReloadReadsWholeNumbers: a reload reads the file as the start does.
// Under traffic, a file whose concurrency.max is 2.5 (once run as 2) is
// refused whole, its error logged at file:line:column, and the running
// rules keep answering; the next good file applies, and its log line says
// the file and what it did to the rules (one added, one removed, one
// changed), so that a file cut short would show at once. Warnings are
// logged at the start and at every reload, with their place.
func TestReloadReadsWholeNumbers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "portero.yaml")
	const head = "upstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\nrules:\n"
	v1 := head + `  - {name: slots, key: ip, concurrency: {max: 2}}
  - {name: a, key: ip, limit: 1000/min}
  - {name: b, key: ip, limit: 1000/min}
  - {name: q, key: ip, algorithm: leaky-queue, limit: 1000/s burst 5, shape: {delay: 9}}
`
	writeFile(t, path, v1)
	reload := make(chan struct{})
	r := start(t, server.Options{ConfigPath: path, Reload: reload})
	if want := "warning=\"" + path + ":7:86: warning: rules[3].shape.delay: 9: the queue has 5 places"; !strings.Contains(r.logs.String(), want) {
		t.Errorf("the start's warning not logged (want %q):\n%s", want, r.logs)
	}
	slots := func() string {
		_, h, _ := get(t, r.gateway+"/")
		return h.Get("RateLimit-Policy")
	}
	if p := slots(); !strings.Contains(p, `"slots";q=2;qu="concurrent-requests"`) {
		t.Fatalf("RateLimit-Policy = %q, want slots of 2", p)
	}

	// Traffic through the reloads: every answer is the running rules'.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad []string
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := http.Get(r.gateway + "/")
			if err != nil {
				bad = append(bad, err.Error())
				return
			}
			resp.Body.Close()
			if p := resp.Header.Get("RateLimit-Policy"); !strings.Contains(p, `"slots";q=2;`) && !strings.Contains(p, `"slots";q=3;`) {
				bad = append(bad, p)
			}
		}
	})
	defer func() {
		close(stop)
		wg.Wait()
		if len(bad) > 0 {
			t.Errorf("answers during the reloads: %q", bad[:min(len(bad), 3)])
		}
	}()

	writeFile(t, path, strings.Replace(v1, "max: 2}", "max: 2.5}", 1))
	reload <- struct{}{}
	refusal := path + `:4:47: rules[0].concurrency.max: want a whole number in decimal digits, found \"2.5\"`
	waitFor(t, "the refusal", func() bool { return strings.Contains(r.logs.String(), "configuration refused") })
	if !strings.Contains(r.logs.String(), refusal) {
		t.Fatalf("the refusal lacks %s:\n%s", refusal, r.logs)
	}
	if strings.Contains(r.logs.String(), "configuration reloaded") {
		t.Errorf("a file with concurrency.max 2.5 was applied:\n%s", r.logs)
	}
	if p := slots(); !strings.Contains(p, `"slots";q=2;`) {
		t.Errorf("after the refusal RateLimit-Policy = %q, want the running slots of 2", p)
	}

	v2 := head + `  - {name: slots, key: ip, concurrency: {max: 3}}
  - {name: a, key: ip, limit: 1000/min}
  - {name: c, key: ip, limit: 1000/min}
overload: {max_in_flight: 100, queue: {size: 10}}
`
	writeFile(t, path, v2)
	reload <- struct{}{}
	waitFor(t, "the reload", func() bool { return strings.Contains(r.logs.String(), "configuration reloaded") })
	logs := r.logs.String()
	for _, want := range []string{
		"source=" + path + " rules=3 added=1 removed=2 changed=1 changes=\"1 added (c), 2 removed (b, q), 1 changed (slots)\"",
		"warning=\"" + path + ":7:39: warning: overload.queue: neither queue.timeout nor deadline is set",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	if p := slots(); !strings.Contains(p, `"slots";q=3;`) {
		t.Errorf("after the reload RateLimit-Policy = %q, want slots of 3", p)
	}
}
