package checkapi

import (
	"fmt"
	"testing"
	"time"

	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/internal/config/envoyconf"
)

// TestCheckExtension: /v1/check decides Portero's extension of the Envoy
// configuration as the gRPC door does (the same compiler and engine): an
// address range matched by CIDR, the monitoring range unlimited, and a
// calendar quota per Madrid day from 06:00 that resets at 06:00.
func TestCheckExtension(t *testing.T) {
	lim, err := envoyconf.Load("../config/envoyconf/testdata/extension.yaml", envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	madrid, err := time.LoadLocation("Europe/Madrid")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 6, 1, 5, 0, 0, 0, madrid) // an hour before the day starts
	f := newFixture(t, func(c *Config) {
		c.Compiler = descriptor.NewCompiler(lim, descriptor.Options{})
		c.Now = func() time.Time { return now }
	})
	addr := func(ip string) string {
		return fmt.Sprintf(`{"domain":"gateway","descriptors":[{"entries":[{"key":"remote_address","value":%q}]}]}`, ip)
	}
	for i := range 10 {
		_, out, raw := f.post(t, addr(fmt.Sprintf("198.51.100.%d", i)))
		if !out.Allowed || out.Rule != "abusive" || out.Remaining != int64(9-i) {
			t.Fatalf("abusive request %d: %s", i+1, raw)
		}
	}
	if _, out, raw := f.post(t, addr("198.51.100.250")); out.Allowed || out.Rule != "abusive" {
		t.Fatalf("11th address of the abusive range: %s", raw)
	}
	if _, out, raw := f.post(t, addr("2001:db8:100::9")); !out.Allowed || out.Rule != "" || out.Descriptors[0].Code != "OK" {
		t.Fatalf("monitoring: %s", raw)
	}
	quota := `{"domain":"gateway","descriptors":[{"entries":[{"key":"plan","value":"gold"},{"key":"api_key","value":"k"}]}]}`
	resp, out, raw := f.post(t, quota)
	if !out.Allowed || out.Rule != "gold-daily" || out.Remaining != 499999 || out.ResetAfter != 3600 || out.Descriptors[0].Unit != "day" {
		t.Fatalf("quota: %s", raw)
	}
	if got, want := resp.Header.Get("RateLimit-Policy"), `"gold-daily";q=500000;w=86400`; got != want {
		t.Errorf("RateLimit-Policy = %q, want %q", got, want)
	}
}
