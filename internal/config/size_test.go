package config_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/internal/config/envoyconf"
)

// TestLoadTooLarge: a file above 16 MiB, or an endless one such as
// /dev/zero (which `config validate` once read until it was killed), is
// refused with one clear error before it is parsed, by both readers.
func TestLoadTooLarge(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, bytes.Repeat([]byte("# padding\n"), 17<<20/10), 0o644); err != nil {
		t.Fatal(err)
	}
	paths := []string{big}
	if _, err := os.Stat("/dev/zero"); err == nil {
		paths = append(paths, "/dev/zero")
	}
	for _, p := range paths {
		want := p + ": larger than 16 MiB: not a configuration file"
		_, err := config.Load(p)
		if err == nil || err.Error() != want {
			t.Errorf("config.Load(%s) = %v, want %q", p, err, want)
		}
		_, err = envoyconf.Load(p, envoyconf.Options{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("envoyconf.Load(%s) = %v, want %q", p, err, want)
		}
	}
}
