// Package alerts holds Portero's example Prometheus alerting rules; its
// test checks them with promtool (check rules, and test rules: series fed,
// alerts asserted). internal/server's TestAlertMetricsExist checks that
// every metric they name is one Portero exports.
package alerts

import (
	"os/exec"
	"testing"

	"github.com/portero-rl/portero/internal/testenv"
)

func TestRules(t *testing.T) {
	promtool := testenv.NeedCommand(t, "promtool")
	for _, args := range [][]string{{"check", "rules", "portero.rules.yml"}, {"test", "rules", "portero.rules.test.yml"}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
