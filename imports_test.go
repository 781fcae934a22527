package portero_test

import (
	"os/exec"
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
