package gatewaylog

import "testing"

// TestRedactKey: the API key header's part of a rule's key shows the
// key's hash, the other parts stay, and a value that merely contains the
// label is left alone.
func TestRedactKey(t *testing.T) {
	const label, hash = "header:X-Key=", "h4sh"
	for _, c := range []struct{ key, want string }{
		{"header:X-Key=secret", "header:X-Key=h4sh"},
		{"ip=192.0.2.1/32+header:X-Key=sec%2Bret", "ip=192.0.2.1/32+header:X-Key=h4sh"},
		{"header:X-Key=sha256:0123+route=api", "header:X-Key=h4sh+route=api"},
		{"header:X-Other=header:X-Key%3Dx", "header:X-Other=header:X-Key%3Dx"},
	} {
		if got := redactKey(c.key, label, hash); got != c.want {
			t.Errorf("redactKey(%q) = %q, want %q", c.key, got, c.want)
		}
	}
}
