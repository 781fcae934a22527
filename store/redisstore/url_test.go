package redisstore_test

import (
	"strings"
	"testing"

	"github.com/portero-rl/portero/store/redisstore"
)

// TestRedact hides every password a Redis URL can carry, the server's and
// the sentinels', also in a URL that does not parse, and keeps the rest.
func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://127.0.0.1:6379/0":                 "redis://127.0.0.1:6379/0",
		"redis://u:pw@h:1/0":                       "redis://u:xxxxx@h:1/0",
		"rediss://:pw@h:1":                         "rediss://:xxxxx@h:1",
		"redis://user@h:1":                         "redis://user@h:1",
		"unix://:s3cr@t@/run/redis.sock":           "unix://:xxxxx@/run/redis.sock",
		"redis-sentinel://u:pw@h1:26379,h2/master": "redis-sentinel://u:xxxxx@h1:26379,h2/master",
		"redis-sentinel://h1,h2/m?sentinel_username=su&sentinel_password=sp": "redis-sentinel://h1,h2/m?sentinel_username=su&sentinel_password=xxxxx",
		"h:1": "h:1",
	} {
		if got := redisstore.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestParseURLErrorsHidePasswords: a URL that does not parse is quoted in
// the error with its passwords hidden.
func TestParseURLErrorsHidePasswords(t *testing.T) {
	for _, u := range []string{
		"redis://user:secret@127.0.0.1:bad/0",
		"redis-sentinel://u:secret@h:1/m?sentinel_password=secret&bogus=1",
		"ftp://u:secret@h",
	} {
		_, err := redisstore.ParseURL(u)
		if err == nil {
			t.Errorf("ParseURL(%q) succeeded, want an error", u)
			continue
		}
		if strings.Contains(err.Error(), "secret") || !strings.Contains(err.Error(), "xxxxx") {
			t.Errorf("ParseURL(%q) = %v: want the URL quoted with its passwords hidden", u, err)
		}
	}
}
