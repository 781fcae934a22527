package portero_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestImportsFlowDownward enforces the layering of ARCHITECTURE.md: the
// vocabulary (this package), the pure algorithms, the in-memory store and
// the engine import only the standard library and the module's packages
// below them, so that a program embedding Portero's core pulls in nothing
// else and no lower layer can reach up into a door, a config format or a
// backend. The header writer adds only httpsfv, which quotes rule names.
func TestImportsFlowDownward(t *testing.T) {
	const mod = "github.com/portero-rl/portero"
	for _, tc := range []struct {
		pkg     string
		allowed []string // non-standard packages it may depend on, besides itself
	}{
		{mod, nil},
		{mod + "/algorithm", []string{mod}},
		{mod + "/store/memstore", []string{mod, mod + "/algorithm"}},
		{mod + "/store/budget", []string{mod}},
		{mod + "/overload", nil},
		{mod + "/iolimit", []string{mod, mod + "/algorithm"}},
		{mod + "/engine", []string{mod, mod + "/algorithm", mod + "/store/memstore"}},
		{mod + "/engine/header", []string{mod, mod + "/algorithm", mod + "/store/memstore", mod + "/engine", "github.com/dunglas/httpsfv"}},
	} {
		name := strings.TrimPrefix(strings.TrimPrefix(tc.pkg, mod), "/")
		if name == "" {
			name = "portero"
		}
		t.Run(name, func(t *testing.T) {
			goTool, err := exec.LookPath("go")
			if err != nil {
				t.Fatalf("the go command is needed to list dependencies: %v", err)
			}
			out, err := exec.Command(goTool, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", tc.pkg).CombinedOutput()
			if err != nil {
				t.Fatalf("go list -deps %s: %v\n%s", tc.pkg, err, out)
			}
			allowed := map[string]bool{tc.pkg: true}
			for _, a := range tc.allowed {
				allowed[a] = true
			}
			deps := strings.Fields(string(out))
			if len(deps) == 0 {
				t.Fatalf("go list -deps %s listed nothing, not even the package itself", tc.pkg)
			}
			for _, d := range deps {
				if !allowed[d] {
					t.Errorf("%s depends on %s; it may import only the standard library and %v", tc.pkg, d, tc.allowed)
				}
			}
		})
	}
}

// TestDoorsDoNotImportDoors enforces the rest of ARCHITECTURE.md's layering
// over every package of the module, with one `go list -deps`:
//
//   - a door (httplimit, grpclimit, internal/rls, internal/checkapi)
//     imports no other door and nothing above the doors: each only
//     translates its protocol to and from the engine;
//   - internal/gateway, the middleware in front of a reverse proxy, may
//     import httplimit and no other door;
//   - internal/server may import the gateway and the doors, not cmd; the
//     pieces it wires (internal/admin, internal/servemetrics,
//     internal/gatewaylog) import none of them;
//   - a compiler (policy, descriptor) imports no other compiler: they are
//     peers, and what they share (clientip.AddrSet) lives below both;
//   - every other package (the vocabulary, algorithm, the stores, engine,
//     engine/header, the compilers policy and descriptor, config, sim, the
//     polite clients client and client/grpcclient …) imports no door and
//     nothing above them: so config, for one, imports no door.
func TestDoorsDoNotImportDoors(t *testing.T) {
	const mod = "github.com/portero-rl/portero"
	doors := []string{mod + "/httplimit", mod + "/grpclimit", mod + "/internal/rls", mod + "/internal/checkapi"}
	above := []string{mod + "/internal/gateway", mod + "/internal/server", mod + "/cmd/portero"}
	// allowed[p] lists what p may import among doors and above.
	allowed := map[string][]string{
		mod + "/internal/gateway": {mod + "/httplimit"},
		mod + "/internal/server":  append([]string{mod + "/internal/gateway"}, doors...),
		mod + "/cmd/portero":      append(append([]string(nil), doors...), above...),
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list dependencies: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps=false", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list ./...: %v\n%s", err, out)
	}
	restricted := append(append([]string(nil), doors...), above...)
	compilers := []string{mod + "/policy", mod + "/descriptor"}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		pkg, deps := f[0], f[1:]
		ok := map[string]bool{pkg: true}
		for _, a := range allowed[pkg] {
			ok[a] = true
		}
		checked++
		for _, d := range deps {
			for _, r := range restricted {
				if d == r && !ok[d] {
					t.Errorf("%s depends on %s: a door or what is above the doors", pkg, d)
				}
			}
			for _, c := range compilers {
				if d == c && slices.Contains(compilers, pkg) {
					t.Errorf("%s depends on %s: the compilers are peers", pkg, d)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("go list ./... listed %d packages: the test no longer sees the module", checked)
	}
}

// TestEcosystemAtTheEdge keeps what envoyproxy/ratelimit's users run
// beside it at the edge: the statsd and DogStatsD clients (internal/rlsstats), the xDS
// client and its resources (internal/rlsxds) and OpenTelemetry
// (internal/rlstrace), its local cache (internal/rlscache, on freecache)
// are linked by `portero rls` (internal/server, cmd) only, never by the
// library's packages, the RLS door itself, nor the pieces `portero serve`
// shares or wires (the admin listener, serve's metrics and access log).
func TestEcosystemAtTheEdge(t *testing.T) {
	const mod = "github.com/portero-rl/portero"
	heavy := []string{"github.com/lyft/gostats", "go.opentelemetry.io/", "github.com/envoyproxy/go-control-plane/pkg/",
		"github.com/envoyproxy/go-control-plane/ratelimit/", mod + "/internal/rlsstats", mod + "/internal/rlsxds", mod + "/internal/rlstrace",
		mod + "/internal/rlscache", "github.com/coocood/freecache", "github.com/DataDog/datadog-go/"}
	pkgs := []string{mod, mod + "/engine", mod + "/store/memstore", mod + "/store/redisstore", mod + "/policy", mod + "/descriptor",
		mod + "/httplimit", mod + "/client", mod + "/internal/rls", mod + "/internal/checkapi", mod + "/internal/config/envoyconf",
		mod + "/internal/admin", mod + "/internal/servemetrics", mod + "/internal/gatewaylog"}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list dependencies: %v", err)
	}
	for _, p := range pkgs {
		out, err := exec.Command(goTool, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", p).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", p, err, out)
		}
		for _, d := range strings.Fields(string(out)) {
			for _, h := range heavy {
				if strings.HasPrefix(d, h) {
					t.Errorf("%s depends on %s: keep it to portero rls", p, d)
				}
			}
		}
	}
}
