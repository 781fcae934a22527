package main

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/portero-rl/portero/internal/testenv"
)

// readDoc returns a file of docs/ (the tests run in cmd/portero).
func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../../docs", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestEnvoyDocConfigError: the error docs/envoy.md shows for a bad unit is
// the one portero rls prints for that example file with that unit at that
// line and column: the test puts the doc's unit where the doc says it is
// and compares what rls prints with the doc's line.
func TestEnvoyDocConfigError(t *testing.T) {
	m := regexp.MustCompile(`(?m)^((examples/envoy/config/[\w.]+):(\d+):(\d+): \S+: invalid unit "(\w+)".*)$`).FindStringSubmatch(readDoc(t, "envoy.md"))
	if m == nil {
		t.Fatal("docs/envoy.md shows no invalid unit error of an example file")
	}
	want, file, unit := m[1], m[2], m[5]
	line, _ := strconv.Atoi(m[3])
	col, _ := strconv.Atoi(m[4])
	data, err := os.ReadFile(filepath.Join("../..", file))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	if line > len(lines) || col > len(lines[line-1]) {
		t.Fatalf("%s has no line %d column %d", file, line, col)
	}
	l := lines[line-1]
	word := regexp.MustCompile(`^\w+`).FindString(l[col-1:])
	if word == "" {
		t.Fatalf("%s:%d:%d is not a value: %q", file, line, col, l)
	}
	lines[line-1] = l[:col-1] + unit + l[col-1+len(word):]

	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(file)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	_, errOut, code := runCmd(t, "rls", "--config", file, "--grpc-listen", "127.0.0.1:0", "--http-listen", "off", "--admin-listen", "off")
	if code != 2 || errOut != "portero: "+want+"\n" {
		t.Errorf("with %q at %s:%d:%d, portero rls exits %d and prints\n%s\ndocs/envoy.md shows\n%s", unit, file, line, col, code, errOut, want)
	}
}

// TestNginxDocCheck runs every `$ curl … /v1/check` of docs/nginx.md
// against portero rls with the example configuration, as the page starts
// it, and compares each answer with the line the page shows under it: as
// JSON, with reset_after (what is left of the current second) the page's.
func TestNginxDocCheck(t *testing.T) {
	_, httpAddr := startRLS(t)
	lines := strings.Split(readDoc(t, "nginx.md"), "\n")
	n := 0
	for i, l := range lines {
		cmdLine, ok := strings.CutPrefix(l, "$ curl -s localhost:8082/v1/check ")
		if !ok || i+1 == len(lines) {
			continue
		}
		n++
		f := shellFields(cmdLine)
		var body, ctype string
		for j := 0; j+1 < len(f); j++ {
			switch f[j] {
			case "-d":
				body = f[j+1]
			case "-H":
				ctype = strings.TrimPrefix(f[j+1], "Content-Type: ")
			}
		}
		resp, err := http.Post("http://"+httpAddr+"/v1/check", ctype, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := lines[i+1]
		if !sameJSON(got, []byte(want)) {
			t.Errorf("%s answered\n%s\ndocs/nginx.md shows\n%s", l, got, want)
		}
	}
	if n < 3 {
		t.Errorf("found %d /v1/check requests in docs/nginx.md, want at least 3", n)
	}
}

// sameJSON reports whether a and b are the same JSON value once every
// reset_after member of a is b's.
func sameJSON(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	var align func(x, y any)
	align = func(x, y any) {
		switch xv := x.(type) {
		case map[string]any:
			yv, _ := y.(map[string]any)
			for k := range xv {
				if k == "reset_after" && yv != nil {
					if r, ok := yv[k]; ok {
						xv[k] = r
					}
					continue
				}
				align(xv[k], yv[k])
			}
		case []any:
			yv, _ := y.([]any)
			for i := range xv {
				if i < len(yv) {
					align(xv[i], yv[i])
				}
			}
		}
	}
	align(va, vb)
	return reflect.DeepEqual(va, vb)
}

// TestClientDocCompiles compiles every ```go block of docs/client.md
// against this checkout's client package: a block of statements as the
// body of a function of ctx that returns an error (its variables then
// used, as the rest of a program would), an expression as a value.
func TestClientDocCompiles(t *testing.T) {
	var src strings.Builder
	src.WriteString("package docsample\n\nimport (\n\t\"context\"\n\t\"log\"\n\t\"net/http\"\n\t\"time\"\n\n\t\"github.com/portero-rl/portero/client\"\n)\n\n" +
		"var (\n\t_ = log.Printf\n\t_ = time.Second\n\t_ = http.MethodGet\n\t_ context.Context\n)\n")
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(readDoc(t, "client.md"), -1)
	if len(blocks) < 3 {
		t.Fatalf("docs/client.md has %d Go blocks, want at least 3", len(blocks))
	}
	for i, b := range blocks {
		code := b[1]
		if _, err := parser.ParseExpr(code); err == nil {
			fmt.Fprintf(&src, "\nvar _ = %s\n", code)
			continue
		}
		body := "func sample" + strconv.Itoa(i) + "(ctx context.Context) error {\n" + code
		f, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+body+"return nil\n}\n", 0)
		if err != nil {
			t.Fatalf("docs/client.md Go block %d: %v\n%s", i+1, err, code)
		}
		var uses strings.Builder
		for _, st := range f.Decls[0].(*ast.FuncDecl).Body.List {
			if as, ok := st.(*ast.AssignStmt); ok && as.Tok == token.DEFINE {
				for _, l := range as.Lhs {
					if id, ok := l.(*ast.Ident); ok && id.Name != "_" {
						uses.WriteString("_ = " + id.Name + "\n")
					}
				}
			}
		}
		src.WriteString("\n" + body + uses.String() + "return nil\n}\n")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "sample.go")
	if err := os.WriteFile(file, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs("../../internal/docsample/sample.go")
	if err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{abs: file}})
	if err := os.WriteFile(filepath.Join(dir, "overlay.json"), overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-overlay", filepath.Join(dir, "overlay.json"), "./internal/docsample")
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("docs/client.md's Go does not compile: %v\n%s\n%s", err, out, src.String())
	}
}

// TestOperationsTLSDoc runs docs/operations.md's TLS session: its openssl
// commands make the files, `portero serve` runs its configuration (the
// ports moved to free ones), and each curl of the session's console block
// prints what the page shows, as serve's own lines do.
func TestOperationsTLSDoc(t *testing.T) {
	bash := testenv.NeedCommand(t, "bash")
	curl := testenv.NeedCommand(t, "curl")
	testenv.NeedCommand(t, "openssl")
	doc := readDoc(t, "operations.md")
	_, session, ok := strings.Cut(doc, "A session with a CA of your own")
	if !ok {
		t.Fatal("docs/operations.md has no TLS session")
	}
	fence := regexp.MustCompile("(?s)```(sh|yaml|console)\n(.*?)```")
	blocks := fence.FindAllStringSubmatch(session, 3)
	if len(blocks) != 3 || blocks[0][1] != "sh" || blocks[1][1] != "yaml" || blocks[2][1] != "console" {
		t.Fatal("the TLS session is no longer an sh block of openssl commands, the configuration and a console block")
	}
	dir := t.TempDir()
	gw, admin := freePort(t), freePort(t)
	ports := strings.NewReplacer(":8443", ":"+gw, ":9443", ":"+admin)
	unports := strings.NewReplacer(":"+gw, ":8443", ":"+admin, ":9443")
	shell := func(script string) string {
		t.Helper()
		c := exec.Command(bash, "-c", script)
		c.Dir = dir
		c.Env = append(os.Environ(), "PATH="+filepath.Dir(curl)+":"+os.Getenv("PATH"))
		out, _ := c.Output() // curl's exit status is part of the session (000)
		return unports.Replace(string(out))
	}
	shell("set -e\n" + blocks[0][2])
	if err := os.WriteFile(filepath.Join(dir, "portero.yaml"), []byte(ports.Replace(blocks[1][2])), 0o644); err != nil {
		t.Fatal(err)
	}

	console := strings.Split(strings.TrimSuffix(blocks[2][2], "\n"), "\n")
	serveLine := "$ PORTERO_ADMIN_TOKEN=change-me portero serve --config portero.yaml"
	if console[0] != serveLine {
		t.Fatalf("the console block starts %q, want %q", console[0], serveLine)
	}
	t.Setenv("PORTERO_ADMIN_TOKEN", "change-me")
	t.Chdir(dir)
	m := startCommand(t, "portero serve", []string{"serve", "--config", "portero.yaml"}, regexp.MustCompile(`(?s)^(portero: gateway.*\nportero: try: [^\n]*\n)`))
	// Each command, then what it printed: the lines up to the next command.
	var cmds, wants []string
	for _, l := range console {
		if c, ok := strings.CutPrefix(l, "$ "); ok {
			cmds, wants = append(cmds, c), append(wants, "")
			continue
		}
		wants[len(wants)-1] += l + "\n"
	}
	if got := unports.Replace(m[1]); got != wants[0] {
		t.Errorf("portero serve printed\n%s\ndocs/operations.md shows\n%s", got, wants[0])
	}
	for i, c := range cmds[1:] {
		want := strings.ReplaceAll(wants[i+1], "go1.26.8", runtime.Version())
		if got := shell(ports.Replace(c)); got != want {
			t.Errorf("%s printed\n%s\ndocs/operations.md shows\n%s", c, got, want)
		}
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return p
}
