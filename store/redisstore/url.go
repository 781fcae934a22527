package redisstore

import (
	"fmt"
	"strings"

	"github.com/redis/rueidis"
)

// ParseURL reads a Redis URL into the client options the store dials
// with: redis://[[user]:password@]host:port[/db] (rediss:// for TLS,
// unix:// for a socket; rueidis.ParseURL) or the sentinel form
// redis-sentinel://host:port[,host:port…]/master[/db] (see sentinel.go).
// Its errors show the URL with its passwords hidden (Redact).
func ParseURL(raw string) (rueidis.ClientOption, error) {
	var opt rueidis.ClientOption
	var err error
	scheme, _, _ := strings.Cut(raw, "://")
	if scheme == SentinelScheme || scheme == SentinelTLSScheme {
		opt, err = parseSentinelURL(raw, scheme)
	} else {
		opt, err = rueidis.ParseURL(raw)
	}
	if err != nil {
		// url.Parse's messages quote the URL: hide its password there too.
		msg := strings.ReplaceAll(err.Error(), raw, Redact(raw))
		return opt, fmt.Errorf("redis URL %q: %s", Redact(raw), msg)
	}
	return opt, nil
}

// Redact returns a Redis URL with its passwords replaced by "xxxxx", the
// server's (user:password@) and the sentinels' (sentinel_password=), for
// errors, logs and the admin API. It reads any text, also one that
// ParseURL refuses.
func Redact(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	rest, query, hasQuery := strings.Cut(rest, "?")
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if user, _, hasPassword := strings.Cut(rest[:at], ":"); hasPassword {
			rest = user + ":xxxxx" + rest[at:]
		}
	}
	out := scheme + "://" + rest
	if !hasQuery {
		return out
	}
	params := strings.Split(query, "&")
	for i, p := range params {
		if name, _, _ := strings.Cut(p, "="); strings.HasSuffix(name, "password") {
			params[i] = name + "=xxxxx"
		}
	}
	return out + "?" + strings.Join(params, "&")
}
