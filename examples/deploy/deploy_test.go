// Package deploy holds no code: its test checks the packaging files beside
// it (the repository's Dockerfile, the systemd unit and the Kubernetes
// manifest) as far as a machine without a Docker engine or a cluster allows.
package deploy

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/testenv"
)

const root = "../.."

// dockerfile is what the test reads from the Dockerfile.
type dockerfile struct {
	env        []string // ENV lines of the build stage, as KEY=VALUE
	buildArgs  []string // the arguments of the build stage's `make build`
	runEnv     []string // the -e KEY=VALUE of the header's `docker run` line
	runBase    string   // FROM of the last stage
	user       string   // USER of the last stage
	copies     []string // sources of COPY lines without --from
	entrypoint []string
	cmd        []string
	// stages are the ENTRYPOINT and CMD of each named stage (FROM … AS
	// name), the targets of docker build --target.
	stages map[string]*stageRun
}

// stageRun is what a stage runs: its ENTRYPOINT and CMD (nil when it has
// none).
type stageRun struct{ entrypoint, cmd []string }

func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	d := dockerfile{stages: map[string]*stageRun{}}
	stage := 0
	cur := &stageRun{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if run, ok := strings.CutPrefix(line, "#   docker run "); ok {
			d.runEnv = dockerRunEnv(t, run)
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		word, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(word) {
		case "FROM":
			stage++
			f := strings.Fields(rest)
			d.runBase, cur = f[0], &stageRun{}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				d.stages[f[2]] = cur
			}
		case "ENV":
			if stage == 1 {
				d.env = append(d.env, rest)
			}
		case "RUN":
			if f := shellWords(t, rest); stage == 1 && len(f) > 1 && f[0] == "make" && f[1] == "build" {
				d.buildArgs = f[1:]
			}
		case "USER":
			d.user = rest
		case "COPY":
			f := strings.Fields(rest)
			if !strings.HasPrefix(f[0], "--from") {
				d.copies = append(d.copies, f[:len(f)-1]...)
			}
		case "ENTRYPOINT":
			d.entrypoint = jsonArray(t, rest)
			cur.entrypoint = d.entrypoint
		case "CMD":
			d.cmd = jsonArray(t, rest)
			cur.cmd = d.cmd
		}
	}
	return d
}

// dockerRunEnv returns the environment a `docker run` command line gives
// the container: its -e KEY=VALUE options.
func dockerRunEnv(t *testing.T, line string) []string {
	var env []string
	f := shellWords(t, line)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "-e" {
			env = append(env, f[i+1])
		}
	}
	return env
}

// shellWords splits a RUN line the way sh would for the simple quoting the
// Dockerfile uses ("…" around one word).
func shellWords(t *testing.T, s string) []string {
	var out []string
	var cur strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			quoted = !quoted
			inWord = true
		case c == ' ' && !quoted:
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("Dockerfile: unbalanced quote in %q", s)
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}

func jsonArray(t *testing.T, s string) []string {
	var v []string
	if err := yaml.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("Dockerfile: %q: want a JSON array: %v", s, err)
	}
	return v
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
	buildDir  string
)

// TestMain removes the binary the tests share.
func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// buildAsDockerfile builds the binary the way the Dockerfile's build stage
// does (make build), once for all the tests, and returns its path.
func buildAsDockerfile(t *testing.T, d dockerfile) string {
	t.Helper()
	buildOnce.Do(func() { builtBin, buildErr = build(d) })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

func build(d dockerfile) (string, error) {
	var err error
	if buildDir, err = os.MkdirTemp("", "portero-deploy-"); err != nil {
		return "", err
	}
	out := filepath.Join(buildDir, "portero")
	return out, makeBuild(root, out, d)
}

// makeBuild runs the Dockerfile's `make build` in dir, with the build
// stage's environment, writing the binary to out.
func makeBuild(dir, out string, d dockerfile) error {
	if len(d.buildArgs) == 0 {
		return errors.New("Dockerfile: no RUN make build in the build stage")
	}
	args := slices.Clone(d.buildArgs)
	for i, a := range args {
		if strings.HasPrefix(a, "BIN=") {
			args[i] = "BIN=" + out
		}
	}
	cmd := exec.Command("make", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), d.env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("make %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}

func TestDockerfile(t *testing.T) {
	d := readDockerfile(t)
	if !strings.HasPrefix(d.runBase, "gcr.io/distroless/static") && d.runBase != "scratch" {
		t.Errorf("run stage FROM %q: want distroless/static or scratch", d.runBase)
	}
	if d.user == "" || strings.HasPrefix(d.user, "0") || strings.HasPrefix(d.user, "root") {
		t.Errorf("run stage USER %q: want a non-root user", d.user)
	}
	for _, src := range d.copies {
		if src == "." || strings.HasPrefix(src, "go.") {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, src)); err != nil {
			t.Errorf("COPY %s: %v", src, err)
		}
	}
	if len(d.entrypoint) != 1 || len(d.cmd) == 0 || d.cmd[0] != "serve" {
		t.Fatalf("ENTRYPOINT %q CMD %q: want the binary, then serve …", d.entrypoint, d.cmd)
	}

	bin := buildAsDockerfile(t, d)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a dynamic loader (PT_INTERP): not static, distroless/static cannot run it", bin)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s needs shared libraries %q", bin, libs)
	}

	// The image's command, with the image's configuration file, run for real
	// on loopback: it starts, answers its probes, and stops cleanly on
	// SIGTERM as `docker stop` sends it.
	conf := filepath.Join(root, "examples/deploy/portero.yaml")
	args := rewrite(d.cmd, map[string]string{"/etc/portero/portero.yaml": conf})
	gw, admin := freeAddr(t), freeAddr(t)
	args = append(args, "--listen", gw, "--admin-listen", admin)
	// The environment is only what the header's `docker run` line gives
	// the container: the configuration's token must be among it.
	cmd := exec.Command(bin, args...)
	cmd.Env = d.runEnv
	exited, stderr := start(t, cmd)
	waitStatus(t, "http://"+gw+"/readyz", 200, exited, stderr)
	if code := status(t, "http://"+gw+"/healthz"); code != 200 {
		t.Errorf("/healthz = %d, want 200", code)
	}
	if code := status(t, "http://"+admin+"/metrics"); code != http.StatusUnauthorized {
		t.Errorf("admin /metrics without the token = %d, want 401", code)
	}
	stop(t, cmd, exited, stderr)
}

// start starts cmd with its standard error kept, killed at the end of the
// test; exited receives what Wait returns.
func start(t *testing.T, cmd *exec.Cmd) (exited <-chan error, stderr *bytes.Buffer) {
	t.Helper()
	stderr = &bytes.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return done, stderr
}

// stop sends cmd SIGTERM and fails the test unless it exits cleanly
// within a minute.
func stop(t *testing.T, cmd *exec.Cmd, exited <-chan error, stderr *bytes.Buffer) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("still running 60 s after SIGTERM\n%s", stderr.String())
	}
}

func rewrite(args []string, m map[string]string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if r, ok := m[a]; ok {
			a = r
		}
		out[i] = a
	}
	return out
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func status(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func waitStatus(t *testing.T, url string, want int, exited <-chan error, stderr *bytes.Buffer) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if status(t, url) == want {
			return
		}
		select {
		case err := <-exited:
			t.Fatalf("portero exited before %s answered %d: %v\n%s", url, want, err, stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never answered %d\n%s", url, want, stderr.String())
		}
	}
}

// shutdownTimeout reads how long the gateway may take to stop from a
// configuration file: server.drain_period (5s when absent), during which
// /readyz answers 503 and requests are still served, plus
// server.shutdown_timeout for the requests in flight.
func shutdownTimeout(t *testing.T, data []byte) time.Duration {
	var f struct {
		Server struct {
			ShutdownTimeout string `yaml:"shutdown_timeout"`
			DrainPeriod     string `yaml:"drain_period"`
		} `yaml:"server"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	d, err := time.ParseDuration(f.Server.ShutdownTimeout)
	if err != nil {
		t.Fatalf("shutdown_timeout %q: %v", f.Server.ShutdownTimeout, err)
	}
	drain := 5 * time.Second
	if f.Server.DrainPeriod != "" {
		if drain, err = time.ParseDuration(f.Server.DrainPeriod); err != nil {
			t.Fatalf("drain_period %q: %v", f.Server.DrainPeriod, err)
		}
	}
	return drain + d
}

func TestSystemdUnit(t *testing.T) {
	unit, err := os.ReadFile("portero.service")
	if err != nil {
		t.Fatal(err)
	}
	conf, err := os.ReadFile("portero.yaml")
	if err != nil {
		t.Fatal(err)
	}
	kv := map[string][]string{}
	for _, line := range strings.Split(string(unit), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			kv[k] = append(kv[k], v)
		}
	}
	if got := kv["ExecReload"]; len(got) != 1 || !strings.Contains(got[0], "-HUP") {
		t.Errorf("ExecReload = %q: want SIGHUP, which reloads the configuration", got)
	}
	if got := kv["DynamicUser"]; len(got) != 1 || got[0] != "yes" {
		t.Errorf("DynamicUser = %q: want yes (never root)", got)
	}
	stop, err := time.ParseDuration(strings.Join(kv["TimeoutStopSec"], ""))
	if err != nil {
		t.Fatalf("TimeoutStopSec: %v", err)
	}
	if st := shutdownTimeout(t, conf); stop <= st {
		t.Errorf("TimeoutStopSec %v ≤ drain_period + shutdown_timeout %v: systemd would kill a draining gateway", stop, st)
	}

	// systemd's own check, on a copy whose paths point at this checkout.
	analyze := testenv.NeedCommand(t, "systemd-analyze")
	bin := buildAsDockerfile(t, readDockerfile(t))
	dir := t.TempDir()
	confAbs, _ := filepath.Abs("portero.yaml")
	text := strings.ReplaceAll(string(unit), "/usr/local/bin/portero", bin)
	text = strings.ReplaceAll(text, "/etc/portero/portero.yaml", confAbs)
	path := filepath.Join(dir, "portero.service")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	// verify prints warnings about the host's own units too; only lines
	// naming our unit count.
	var ours []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "portero.service") {
			ours = append(ours, l)
		}
	}
	if err != nil || len(ours) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, strings.Join(ours, "\n"))
	}
}

func TestKubernetesManifest(t *testing.T) {
	data, err := os.ReadFile("kubernetes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]map[string]any{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			if err.Error() == "EOF" {
				break
			}
			t.Fatalf("kubernetes.yaml: %v", err)
		}
		kind, _ := doc["kind"].(string)
		if kind == "" || doc["apiVersion"] == nil || get(doc, "metadata", "name") == nil {
			t.Fatalf("a document without kind, apiVersion or metadata.name: %v", doc)
		}
		docs[kind] = doc
	}
	for _, k := range []string{"ConfigMap", "Deployment", "Service"} {
		if docs[k] == nil {
			t.Fatalf("no %s in the manifest", k)
		}
	}

	// The ConfigMap's file is a configuration Portero accepts.
	t.Setenv("PORTERO_ADMIN_TOKEN", "deploy-test")
	confText, _ := get(docs["ConfigMap"], "data", "portero.yaml").(string)
	cfg, err := config.Parse("kubernetes.yaml:portero.yaml", []byte(confText))
	if err != nil {
		t.Fatalf("the ConfigMap's portero.yaml: %v", err)
	}

	spec := get(docs["Deployment"], "spec", "template", "spec").(map[string]any)
	c := spec["containers"].([]any)[0].(map[string]any)
	args := fmt.Sprint(c["args"])
	if want := "[serve --config /etc/portero/portero.yaml --watch]"; args != want {
		t.Errorf("container args %s, want %s", args, want)
	}
	mount := c["volumeMounts"].([]any)[0].(map[string]any)
	if mount["mountPath"] != "/etc/portero" {
		t.Errorf("config mounted at %v, want /etc/portero (the --config directory)", mount["mountPath"])
	}
	ports := map[string]int{}
	for _, p := range c["ports"].([]any) {
		pm := p.(map[string]any)
		ports[pm["name"].(string)] = pm["containerPort"].(int)
	}
	if want := portOf(t, cfg.Listen); ports["http"] != want {
		t.Errorf("http containerPort %d, want the gateway's %d", ports["http"], want)
	}
	if want := portOf(t, cfg.AdminListen); ports["admin"] != want {
		t.Errorf("admin containerPort %d, want the admin listener's %d", ports["admin"], want)
	}
	for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
		if got := get(c, probe, "httpGet", "path"); got != path {
			t.Errorf("%s path %v, want %s", probe, got, path)
		}
		if got := get(c, probe, "httpGet", "port"); got != "http" {
			t.Errorf("%s port %v, want http", probe, got)
		}
	}
	if get(spec, "securityContext", "runAsNonRoot") != true {
		t.Error("pod securityContext.runAsNonRoot is not true")
	}
	if user := readDockerfile(t).user; fmt.Sprint(get(spec, "securityContext", "runAsUser")) != strings.Split(user, ":")[0] {
		t.Errorf("runAsUser %v, want the image's USER %s", get(spec, "securityContext", "runAsUser"), user)
	}
	if get(c, "securityContext", "readOnlyRootFilesystem") != true {
		t.Error("container readOnlyRootFilesystem is not true")
	}
	env := c["env"].([]any)[0].(map[string]any)
	if env["name"] != "PORTERO_ADMIN_TOKEN" || !regexp.MustCompile(`token_env: PORTERO_ADMIN_TOKEN`).MatchString(confText) {
		t.Errorf("the admin token env %v does not match the configuration's token_env", env["name"])
	}
	grace := spec["terminationGracePeriodSeconds"].(int)
	if st := shutdownTimeout(t, []byte(confText)); time.Duration(grace)*time.Second <= st {
		t.Errorf("terminationGracePeriodSeconds %d ≤ drain_period + shutdown_timeout %v: the kubelet would kill a draining gateway", grace, st)
	}
	if get(docs["Service"], "spec", "ports").([]any)[0].(map[string]any)["targetPort"] != "http" {
		t.Error("the Service does not target the http port")
	}
	checkManifestHeader(t, string(data), docs, c)
	// Prometheus's annotations name a port and a path but no credentials:
	// the admin listener would answer every scrape 401.
	annotations, _ := get(docs["Deployment"], "spec", "template", "metadata", "annotations").(map[string]any)
	for k := range annotations {
		if strings.HasPrefix(k, "prometheus.io/") {
			t.Errorf("pod annotation %s: a scrape without the admin token gets 401 (see prometheus.yaml)", k)
		}
	}
}

// checkManifestHeader holds the manifest's header comment to what the
// manifest is: the objects its first sentence lists are documents of it,
// the image it runs is the one its docker build line tags, and the Secret
// the pod reads is the one its kubectl line creates, with that key.
func checkManifestHeader(t *testing.T, text string, docs map[string]map[string]any, c map[string]any) {
	t.Helper()
	var header strings.Builder
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, "#") {
			break
		}
		header.WriteString(strings.TrimSpace(strings.TrimPrefix(l, "#")) + "\n")
	}
	h := header.String()
	first, _, _ := strings.Cut(h, ".")
	for _, kind := range regexp.MustCompile(`\b(ConfigMap|Secret|Deployment|Service|Ingress|ServiceMonitor)\b`).FindAllString(first, -1) {
		if docs[kind] == nil {
			t.Errorf("the header lists a %s, which the manifest does not contain", kind)
		}
	}
	image, _ := c["image"].(string)
	if !strings.Contains(h, "docker build -t "+image+" .") {
		t.Errorf("image %q: no `docker build -t %s .` in the header, so nothing builds it", image, image)
	}
	ref := get(c["env"].([]any)[0].(map[string]any), "valueFrom", "secretKeyRef").(map[string]any)
	if want := fmt.Sprintf("kubectl create secret generic %s --from-literal=%s=", ref["name"], ref["key"]); !strings.Contains(h, want) {
		t.Errorf("the pod reads Secret %v key %v: the header has no %q", ref["name"], ref["key"], want)
	}
}

func get(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	var n int
	fmt.Sscan(p, &n)
	return n
}
