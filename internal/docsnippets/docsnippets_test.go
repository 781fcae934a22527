package docsnippets_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/portero-rl/portero/internal/redistest"
)

var goBlock = regexp.MustCompile("(?s)```go\n(package main\n.*?)```")

// programs returns the Go programs of a document of the repository.
func programs(t *testing.T, doc string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", doc))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range goBlock.FindAllStringSubmatch(string(b), -1) {
		out = append(out, m[1])
	}
	if len(out) == 0 {
		t.Fatalf("%s has no Go program", doc)
	}
	return out
}

// build writes src as a module that requires this one (its go.sum copied)
// and builds it, returning the binary.
func build(t *testing.T, name, src string) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mod := fmt.Sprintf("module snippet\n\ngo 1.26.0\n\nrequire github.com/portero-rl/portero v0.0.0\n\nreplace github.com/portero-rl/portero => %s\n", root)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for f, data := range map[string][]byte{"go.mod": []byte(mod), "go.sum": sum, "main.go": []byte(src)} {
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "prog")
	cmd := exec.Command("go", "build", "-mod=mod", "-o", bin, ".")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s does not build: %v\n%s\n%s", name, err, out, src)
	}
	return bin
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

// serve runs bin until ask succeeds (or 30 s pass), then stops it.
func serve(t *testing.T, name, bin string, ask func() error) {
	t.Helper()
	cmd := exec.Command(bin)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()
	var err error
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		select {
		case werr := <-exited:
			exited <- werr
			t.Fatalf("%s exited (%v) before answering:\n%s", name, werr, out.String())
		default:
		}
		if err = ask(); err == nil {
			return
		}
	}
	t.Fatalf("%s never answered: %v\n%s", name, err, out.String())
}

// TestREADME builds the README's library programs and serves each until a
// real client gets an answer carrying the RateLimit fields.
func TestREADME(t *testing.T) {
	progs := programs(t, "README.md")
	if len(progs) != 3 {
		t.Fatalf("README.md has %d Go programs, want the middleware, the middleware on Redis and the gRPC server", len(progs))
	}
	redis := redistest.Start(t)
	for i, src := range progs {
		name := fmt.Sprintf("README.md program %d", i+1)
		addr := freeAddr(t)
		src = strings.NewReplacer("127.0.0.1:8080", addr, "127.0.0.1:9000", addr, "redis://127.0.0.1:6379", redis.URL()).Replace(src)
		bin := build(t, name, src)
		if strings.Contains(src, "grpclimit") {
			serve(t, name, bin, func() error { return askGRPC(addr) })
			continue
		}
		serve(t, name, bin, func() error { return askHTTP(addr) })
	}
}

func askHTTP(addr string) error {
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") == "" {
		return fmt.Errorf("status %d, RateLimit-Policy %q", resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
	}
	return nil
}

func askGRPC(addr string) error {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var hdr metadata.MD
	_, err = healthpb.NewHealthClient(cc).Check(metadata.AppendToOutgoingContext(ctx, "x-api-key", "k"), &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
	if err != nil {
		return err
	}
	if hdr.Get("ratelimit-policy") == nil {
		return fmt.Errorf("no ratelimit-policy metadata in %v", hdr)
	}
	return nil
}

// TestMigrating builds docs/migrating.md's programs and runs each to its
// end: each checks its own answers and exits non-zero when one is wrong.
func TestMigrating(t *testing.T) {
	progs := programs(t, "docs/migrating.md")
	if len(progs) < 5 {
		t.Fatalf("docs/migrating.md has %d Go programs, want one per Go library", len(progs))
	}
	for i, src := range progs {
		name := fmt.Sprintf("docs/migrating.md program %d", i+1)
		bin := build(t, name, src)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := exec.CommandContext(ctx, bin).CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("%s: %v\n%s", name, err, out)
		}
	}
}
