package h2grpc

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/summerwind/h2spec/config"
	"github.com/summerwind/h2spec/generic"
	h2spechpack "github.com/summerwind/h2spec/hpack"
	h2spechttp2 "github.com/summerwind/h2spec/http2"
	"github.com/summerwind/h2spec/spec"
)

// TestH2Spec runs h2spec's conformance suite (RFC 7540 / 9113 and HPACK,
// strict cases included) against the server. h2spec sends plain HTTP
// requests to "/" (GET and POST without a gRPC content-type): they are
// answered 405 and 415 with a short text body, which is what its cases on
// flow control, stream states and concurrency need. Every case must pass:
// a failure names h2spec's case id, e.g. "http2/6.9.1/3".
//
// The same run by hand, against a server you start yourself:
//
//	go run github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible -h 127.0.0.1 -p PORT -S -v
func TestH2Spec(t *testing.T) {
	if testing.Short() {
		t.Skip("h2spec conformance suite: not in -short")
	}
	ts := startServer(t, newServer(Options{}))
	_, port, err := net.SplitHostPort(ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	c := &config.Config{
		Host:         "127.0.0.1",
		Port:         p,
		Path:         "/",
		Timeout:      5 * time.Second, // per wait; passing cases take milliseconds
		MaxHeaderLen: 4000,
		Strict:       true,
	}
	groups := []*spec.TestGroup{generic.Spec(), h2spechttp2.Spec(), h2spechpack.Spec()}

	// h2spec prints its report on os.Stdout; it goes to a file, shown when
	// the test fails or runs with -v.
	report, err := os.CreateTemp(t.TempDir(), "h2spec")
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = report
	func() {
		defer func() { os.Stdout = stdout }()
		for _, g := range groups {
			g.Test(c)
		}
	}()

	var passed, failed, skipped int
	var walk func(g *spec.TestGroup)
	walk = func(g *spec.TestGroup) {
		for i, tc := range append(append([]*spec.TestCase{}, g.Tests...), g.StrictTests...) {
			r := tc.Result
			id := fmt.Sprintf("%s/%d", g.ID(), i+1)
			switch {
			case r == nil:
				t.Errorf("h2spec %s did not run: %s", id, tc.Desc)
			case r.Failed:
				failed++
				t.Errorf("h2spec %s failed: %s\n%s\n%v", id, tc.Desc, tc.Requirement, indent(r.Error))
			case r.Skipped:
				skipped++
				t.Errorf("h2spec %s skipped: %s", id, tc.Desc)
			default:
				passed++
			}
		}
		for _, sub := range g.Groups {
			walk(sub)
		}
	}
	for _, g := range groups {
		walk(g)
	}
	t.Logf("h2spec: %d passed, %d failed, %d skipped", passed, failed, skipped)
	if passed < 140 {
		t.Errorf("only %d h2spec cases passed; the suite has 146 with the strict ones", passed)
	}
	if t.Failed() || testing.Verbose() {
		if b, err := os.ReadFile(report.Name()); err == nil {
			t.Logf("h2spec report:\n%s", b)
		}
	}
}

func indent(err error) string {
	return "    " + strings.ReplaceAll(fmt.Sprint(err), "\n", "\n    ")
}
