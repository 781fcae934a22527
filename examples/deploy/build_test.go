package deploy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/portero-rl/portero/internal/testenv"
)

// TestBuildNamesItsRevision: from a clean checkout (a clone of this one's
// HEAD), the ways README gives to get the binary — `make build`, which the
// Dockerfile runs, and `go install ./cmd/portero` — make a binary whose
// --version names the version Go derives from git and the revision. The
// image's build context keeps .git, which the revision comes from.
func TestBuildNamesItsRevision(t *testing.T) {
	git := testenv.NeedCommand(t, "git")
	head, err := exec.Command(git, "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	rev := strings.TrimSpace(string(head))
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if out, err := exec.Command(git, "clone", "--quiet", root, src).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	names := func(bin string) {
		t.Helper()
		out, err := exec.Command(bin, "--version").Output()
		v := strings.TrimSpace(string(out))
		if err != nil || strings.Contains(v, "(devel)") || !strings.Contains(v, "revision "+rev) || strings.Contains(v, "(modified)") {
			t.Errorf("%s --version = %q, %v; want a version and revision %s", bin, v, err, rev)
		}
	}

	bin := filepath.Join(dir, "make", "portero")
	if err := makeBuild(src, bin, readDockerfile(t)); err != nil {
		t.Fatal(err)
	}
	names(bin)

	// GOFLAGS as on a machine with Go's defaults (this one's go env may
	// turn VCS stamping off).
	install := exec.Command("go", "install", "./cmd/portero")
	install.Dir = src
	install.Env = append(os.Environ(), "GOBIN="+filepath.Join(dir, "gobin"), "GOFLAGS=-buildvcs=auto")
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("go install ./cmd/portero: %v\n%s", err, out)
	}
	names(filepath.Join(dir, "gobin", "portero"))

	ignore, err := os.Open(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer ignore.Close()
	for sc := bufio.NewScanner(ignore); sc.Scan(); {
		p := strings.TrimSpace(sc.Text())
		if ok, _ := filepath.Match(strings.TrimPrefix(p, "/"), ".git"); ok && !strings.HasPrefix(p, "#") {
			t.Errorf(".dockerignore: %q leaves .git out of the build context: the image's binary would name no revision", p)
		}
	}
}

// TestPrometheusScrapeJob: prometheus.yaml's job, run by a real Prometheus
// against portero serve with the image's configuration, scrapes it: the
// token from its credentials file goes as a bearer token to the admin
// port's /metrics. Debian's Prometheus has no Kubernetes discovery, so the
// copy run here finds the pod as a static target (and without the
// relabelling, which reads discovery's labels); the test checks that the
// relabelling keeps the manifest's admin port.
func TestPrometheusScrapeJob(t *testing.T) {
	prometheus := testenv.NeedCommand(t, "prometheus")
	promtool := testenv.NeedCommand(t, "promtool")
	data, err := os.ReadFile("prometheus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var conf map[string]any
	if err := yaml.Unmarshal(data, &conf); err != nil {
		t.Fatal(err)
	}
	jobs, _ := conf["scrape_configs"].([]any)
	if len(jobs) != 1 {
		t.Fatalf("prometheus.yaml: %d scrape configs, want 1", len(jobs))
	}
	job := jobs[0].(map[string]any)
	keepsAdmin := false
	for _, r := range job["relabel_configs"].([]any) {
		rm := r.(map[string]any)
		keepsAdmin = keepsAdmin || fmt.Sprint(rm["source_labels"]) == "[__meta_kubernetes_pod_container_port_name]" && rm["regex"] == "admin"
	}
	if !keepsAdmin {
		t.Error("the job's relabelling does not keep the container port named admin")
	}

	bin := buildAsDockerfile(t, readDockerfile(t))
	gw, admin := freeAddr(t), freeAddr(t)
	const token = "scrape-test"
	cmd := exec.Command(bin, "serve", "--config", "portero.yaml", "--listen", gw, "--admin-listen", admin)
	cmd.Env = []string{"PORTERO_ADMIN_TOKEN=" + token}
	exited, stderr := start(t, cmd)
	waitStatus(t, "http://"+gw+"/readyz", 200, exited, stderr)

	dir := t.TempDir()
	auth := job["authorization"].(map[string]any)
	cred := filepath.Join(dir, "token")
	if err := os.WriteFile(cred, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auth["credentials_file"] = cred
	delete(job, "kubernetes_sd_configs")
	delete(job, "relabel_configs")
	job["static_configs"] = []any{map[string]any{"targets": []string{admin}}}
	job["scrape_interval"] = "1s"
	out, err := yaml.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "prometheus.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "config", path).CombinedOutput(); err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
	web := freeAddr(t)
	prom := exec.Command(prometheus, "--config.file="+path, "--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+web)
	promExited, promErr := start(t, prom)
	var health string
	for deadline := time.Now().Add(60 * time.Second); health != "up" && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		select {
		case err := <-promExited:
			t.Fatalf("prometheus exited: %v\n%s", err, promErr)
		default:
		}
		health = targetHealth(web)
	}
	if health != "up" {
		t.Errorf("the scrape target's health is %q, want up\n%s", health, promErr)
	}
	stop(t, cmd, exited, stderr)
}

// targetHealth is the health of Prometheus's one active target, and its
// last error, as its API at addr reports them ("" before the first scrape).
func targetHealth(addr string) string {
	resp, err := http.Get("http://" + addr + "/api/v1/targets?state=active")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			ActiveTargets []struct {
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	if json.NewDecoder(resp.Body).Decode(&r) != nil || len(r.Data.ActiveTargets) != 1 {
		return ""
	}
	tg := r.Data.ActiveTargets[0]
	if tg.Health == "unknown" {
		return ""
	}
	return strings.TrimSpace(tg.Health + " " + tg.LastError)
}

// TestDocumentedDockerRun: every `docker run` of the image that README and
// docs/operations.md show gives the container the environment the
// Dockerfile's own line gives it (which TestDockerfile starts the image's
// command with): without the admin token it would exit 2.
func TestDocumentedDockerRun(t *testing.T) {
	names := func(env []string) []string {
		var out []string
		for _, kv := range env {
			k, _, _ := strings.Cut(kv, "=")
			out = append(out, k)
		}
		return out
	}
	want := names(readDockerfile(t).runEnv)
	if len(want) == 0 {
		t.Fatal("the Dockerfile's docker run line gives no environment")
	}
	for _, doc := range []string{"README.md", "docs/operations.md"} {
		data, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, l := range strings.Split(string(data), "\n") {
			_, run, ok := strings.Cut(l, "docker run ")
			if !ok {
				continue
			}
			n++
			if got := names(dockerRunEnv(t, run)); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: %q gives the container %v, want %v", doc, strings.TrimSpace(l), got, want)
			}
		}
		if n == 0 {
			t.Errorf("%s shows no docker run", doc)
		}
	}
}
