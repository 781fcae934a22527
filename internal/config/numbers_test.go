package config_test

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/portero-rl/portero/internal/config"
	"github.com/portero-rl/portero/overload"
)

// wholeFields puts V in every whole-number field of the file, one file
// each: the field's path, and the file's lines (V marks the value).
var wholeFields = []struct{ field, src string }{
	{"server.max_in_flight", "server: {max_in_flight: V}"},
	{"store.max_keys", "store: {max_keys: V}"},
	{"client_ip.ipv4_prefix", "client_ip: {ipv4_prefix: V}"},
	{"client_ip.ipv6_prefix", "client_ip: {ipv6_prefix: V}"},
	{"upstreams.u.max_idle_conns", "upstreams: {u: {url: 'http://127.0.0.1:1', max_idle_conns: V}}"},
	{"rules[0].concurrency.max", "rules: [{name: a, key: ip, concurrency: {max: V}}]"},
	{"rules[0].queue.size", "rules: [{name: a, key: ip, concurrency: {max: 1}, queue: {size: V, timeout: 1s}}]"},
	{"rules[0].shape.delay", "rules: [{name: a, key: ip, algorithm: leaky-queue, limit: 10/s, shape: {delay: V}}]"},
	{"rules[0].reserve", "rules: [{name: a, key: ip, limit: 100/s, cost: response-bytes, reserve: V}]"},
	{"overload.max_in_flight", "overload: {max_in_flight: V}"},
	{"overload.reserve.critical", "overload: {max_in_flight: 100, reserve: {critical: V}}"},
	{"overload.reserve.default", "overload:\n  max_in_flight: 100\n  reserve:\n    default: V"},
	{"overload.queue.size", "overload: {max_in_flight: 100, queue: {size: V, timeout: 1s}}"},
	{"rate_rules[0].limit", "rate_rules: [{name: r, limit: V}]"},
	{"levels.global.burst", "levels: {global: {rate: 100, burst: V}}"},
	{"levels.stages[0].burst", "levels: {stages: [{name: s, rate: 100, burst: V}]}"},
	{"plans.gold.burst", "plans: {gold: {rate: 10, burst: V}}\napi_keys: {keys: [{id: k, plan: gold, sha256: '" + strings.Repeat("ab", 32) + "'}]}"},
}

// brokenFile is base plus lines with V replaced by value, and where the
// value is (line, column).
func brokenFile(lines, value string) (src string, line, col int) {
	src = "routes: [{upstream: d}]\nupstreams: {d: {type: demo}}\n"
	if strings.HasPrefix(lines, "upstreams:") {
		src = "routes: [{upstream: u}]\n"
	}
	before := strings.Count(src, "\n")
	for i, l := range strings.Split(lines, "\n") {
		if c := strings.Index(l, "V"); c >= 0 && strings.HasSuffix(l[:c], ": ") {
			line, col = before+i+1, c+1
		}
	}
	return src + strings.Replace(lines, ": V", ": "+value, 1) + "\n", line, col
}

// TestWholeNumbersAreWhole: every whole-number field takes decimal digits
// and nothing else. A decimal was truncated (concurrency.max: 2.5 ran as
// 2, rate_rules.limit: 10.9 as 10) and an exponent, another base or
// grouped digits read as some number; each is now an error at its line
// and column, through the one reader of whole numbers, alone in its file.
func TestWholeNumbersAreWhole(t *testing.T) {
	for _, f := range wholeFields {
		for _, v := range []string{"2.5", "10.9", "1e2", "0x10", "010", "1_000", "12abc", "'12'"} {
			src, line, col := brokenFile(f.src, v)
			_, err := config.Parse("x.yaml", []byte(src))
			want := `x.yaml:` + strconv.Itoa(line) + `:` + strconv.Itoa(col) + `: ` + f.field + `: want a whole number in decimal digits, found "` + v + `"`
			if v == "12abc" || v == "'12'" {
				want = `x.yaml:` + strconv.Itoa(line) + `:` + strconv.Itoa(col) + `: ` + f.field + `: want a whole number, found "` + strings.Trim(v, "'") + `"`
			}
			if err == nil || err.Error() != want {
				t.Errorf("%s: %s:\n got %v\nwant %s", f.field, v, err, want)
			}
		}
	}
}

// TestWholeNumbersRead: what is a whole number is read as one, signs and
// the limits of the field included.
func TestWholeNumbersRead(t *testing.T) {
	src := "routes: [{upstream: d}]\nupstreams: {d: {type: demo}}\n" +
		"overload: {max_in_flight: 12, reserve: {critical: +3, default: 0}, queue: {size: 40, timeout: 1s}}\n" +
		"rules: [{name: a, key: ip, concurrency: {max: 7}}, {name: q, key: ip, algorithm: leaky-queue, limit: 10/s, shape: {delay: 3}}]\n" +
		"rate_rules: [{name: r, limit: 600}]\nstore: {max_keys: 9223372036854775807}\n"
	c, err := config.Parse("x.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if g := c.Overload.Gate; g.MaxInFlight != 12 || g.Reserve != (overload.Reserve{Critical: 3}) || g.QueueSize != 40 {
		t.Errorf("gate %+v", g)
	}
	if m := c.Policy.Rule("a").Concurrency.Max; m != 7 || c.Shapes["q"].Delay != 3 || c.File.RateRules[0].Limit != 600 || c.MaxKeys != 1<<63-1 {
		t.Errorf("max %d, delay %d, limit %d, max keys %d", m, c.Shapes["q"].Delay, c.File.RateRules[0].Limit, c.MaxKeys)
	}
	_, err = config.Parse("x.yaml", []byte(strings.Replace(src, "9223372036854775807", "9223372036854775808", 1)))
	if err == nil || !strings.Contains(err.Error(), `store.max_keys: want a whole number`) {
		t.Errorf("a number past int64: %v", err)
	}
}

// TestZeroIsNotTheDefault: a 0 written where the field's zero value means
// its default (a lease's lifetime, a reservation, the local share, the
// store's deadline and key cap, the address prefixes) was taken as the
// default in silence; it is checked as the value it says, and refused.
func TestZeroIsNotTheDefault(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"rules: [{name: a, key: ip, concurrency: {max: 1, ttl: 0s}}]",
			"x.yaml:3:55: rules[0].concurrency.ttl: 0s: want a lease lifetime from 1ms to 24h (default 10s)"},
		{"rules: [{name: a, key: ip, limit: 100/s, cost: response-bytes, reserve: 0}]",
			"x.yaml:3:73: rules[0].reserve: 0: want the units counted at the decision, at least 1 (leave reserve out for 1)"},
		{"store: {type: redis, url: 'redis://127.0.0.1:1', on_error: local, local_share: 0}",
			"x.yaml:3:80: store.local_share: 0: want a share in (0, 1], with on_error: local"},
		{"store: {type: redis, url: 'redis://127.0.0.1:1', timeout: 0s}",
			"x.yaml:3:59: store.timeout: 0s: want how long one decision may wait for the store, more than zero (leave timeout out for the default)"},
		{"store: {max_keys: 0}",
			"x.yaml:3:19: store.max_keys: 0: want the most keys per rule, at least 1 (leave max_keys out for the default)"},
		{"client_ip: {ipv6_prefix: 0}", "x.yaml:3:26: client_ip.ipv6_prefix: 0: want 1 to 128 (default 64)"},
		{"client_ip: {ipv4_prefix: 0}", "x.yaml:3:26: client_ip.ipv4_prefix: 0: want 1 to 32 (default 32)"},
	} {
		src := "routes: [{upstream: d}]\nupstreams: {d: {type: demo}}\n" + tc.src + "\n"
		if _, err := config.Parse("x.yaml", []byte(src)); err == nil || err.Error() != tc.want {
			t.Errorf("%s:\n got %v\nwant %s", tc.src, err, tc.want)
		}
		left := regexp.MustCompile(`, (ttl|reserve|local_share|timeout): 0s?|(max_keys|ipv6_prefix|ipv4_prefix): 0`).ReplaceAllString(tc.src, "")
		if _, err := config.Parse("x.yaml", []byte("routes: [{upstream: d}]\nupstreams: {d: {type: demo}}\n"+left+"\n")); err != nil {
			t.Errorf("%s, the field left out: %v", left, err)
		}
	}
}

// TestWarnings: settings that load but may not do what they seem to say
// come back with the configuration, each at its line: a shape whose delay
// lets every place of the queue pass at once (nothing is held), and an
// overload queue whose wait nothing bounds (no queue.timeout, no deadline:
// a request once waited 11.5 s behind a service that answers in 4 s).
func TestWarnings(t *testing.T) {
	base := "routes: [{upstream: d}]\nupstreams: {d: {type: demo}}\n"
	for _, tc := range []struct{ src, want string }{
		{"rules: [{name: q, key: ip, algorithm: leaky-queue, limit: 10/s burst 5, shape: {delay: 5}}]",
			"x.yaml:3:88: warning: rules[0].shape.delay: 5: the queue has 5 places and every one passes at once, so nothing is held (nginx's nodelay); want less than 5 to shape"},
		{"rules: [{name: q, key: ip, algorithm: leaky-queue, limit: 10/s, shape: {delay: 40}}]",
			"x.yaml:3:80: warning: rules[0].shape.delay: 40: the queue has 10 places and every one passes at once, so nothing is held (nginx's nodelay); want less than 10 to shape"},
		{"overload:\n  max_in_flight: 4\n  queue: {size: 100}",
			"x.yaml:5:10: warning: overload.queue: neither queue.timeout nor deadline is set: a request waits for a slot until one frees or its client gives up, however long the service takes"},
		{"overload:\n  max_in_flight: 4\n  queue: {size: 100, timeout: 0s}",
			"x.yaml:5:10: warning: overload.queue: neither queue.timeout nor deadline is set: a request waits for a slot until one frees or its client gives up, however long the service takes"},
		{"rules: [{name: q, key: ip, algorithm: leaky-queue, limit: 10/s burst 5, shape: {delay: 4}}]", ""},
		{"overload: {max_in_flight: 4, queue: {size: 100}, deadline: 4s}", ""},
		{"overload: {max_in_flight: 4, queue: {size: 100, timeout: 2s}}", ""},
	} {
		c, err := config.Parse("x.yaml", []byte(base+tc.src+"\n"))
		if err != nil {
			t.Errorf("%s: %v", tc.src, err)
			continue
		}
		var got []string
		for _, w := range c.Warnings {
			got = append(got, w.String())
		}
		if strings.Join(got, "\n") != tc.want {
			t.Errorf("%s: warnings\n%s\nwant\n%s", tc.src, strings.Join(got, "\n"), tc.want)
		}
	}
}

// TestTabIsFound: YAML's errors about a tab in the indentation named the
// line of the value before it (one line early, or more after a value over
// several lines) and not the tab. Read from real files, they now name the
// tab's line and column and say that YAML indents with spaces.
func TestTabIsFound(t *testing.T) {
	const hint = ": YAML indents with spaces only, never with tabs"
	for _, tc := range []struct{ src, want string }{
		{"server:\n  listen: 127.0.0.1:8080\n\tread_timeout: 5s\n",
			"3:1: found a tab character that violates indentation" + hint},
		{"server:\n  listen: 127.0.0.1:8080\n  \tread_timeout: 5s\n",
			"3:3: found a tab character that violates indentation" + hint},
		{"rules:\n  - name: a\n    key: ip\n    limit: 10/min\n\t\tburst 20\n",
			"5:1: found a tab character that violates indentation" + hint},
		{"server:\n\tlisten: 127.0.0.1:8080\n",
			"2:1: found character that cannot start any token" + hint},
		{"routes:\n  -\tupstream: d\n", "2:4: found character that cannot start any token" + hint},
		{"admin:\n  token: |\n    one\n\ttwo\n",
			"4:1: found a tab character where an indentation space is expected" + hint},
	} {
		path := filepath.Join(t.TempDir(), "tab.yaml")
		if err := os.WriteFile(path, []byte(tc.src), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := config.Load(path)
		if err == nil || err.Error() != path+":"+tc.want {
			t.Errorf("%q:\n got %v\nwant %s:%s", tc.src, err, path, tc.want)
		}
	}
	// Another syntax error is left as the library says it, with no hint.
	_, err := config.Parse("x.yaml", []byte("server:\n  listen: [a\n"))
	if err == nil || strings.Contains(err.Error(), "tab") {
		t.Errorf("unclosed list: %v", err)
	}
}

// goFieldNames are the Go names of the fields a configuration fills: those
// of File's types and of the Gate's overload.Config.
func goFieldNames() map[string]bool {
	names := map[string]bool{}
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() {
				names[f.Name] = true
				walk(f.Type)
			}
		}
	}
	walk(reflect.TypeFor[config.File]())
	walk(reflect.TypeFor[overload.Config]())
	return names
}

// TestErrorsNameYAMLFields: a configuration's errors name the YAML path,
// never a Go field name. A section whose field the walker refused went on
// to the Gate's own checks with the zero left there ("overload: MaxInFlight
// is 0" beside the real error). Every broken file of these tests is read,
// and no error may hold a Go field name of the configuration (one word in
// CamelCase, such as MaxInFlight or QueueSize).
func TestErrorsNameYAMLFields(t *testing.T) {
	names := goFieldNames()
	var srcs []string
	for _, f := range wholeFields {
		for _, v := range []string{"2.5", "many", "-1", "0", "[1]"} {
			src, _, _ := brokenFile(f.src, v)
			srcs = append(srcs, src)
		}
	}
	for _, s := range []string{"overload: {max_in_flight: many}", "overload: {max_in_flight: 4, reserve: {critical: x, default: 4}}",
		"overload: {max_in_flight: 2, queue: {size: [], timeout: 1s}}", "overload: {max_in_flight: 2, retry_after: -1s, service_time: x}",
		"overload: {max_in_flight: x, queue: {order: sideways}, shedding: nice}"} {
		srcs = append(srcs, "routes: [{upstream: d}]\nupstreams: {d: {type: demo}}\n"+s+"\n")
	}
	camel := regexp.MustCompile(`\b[A-Z][a-z]+[A-Z][A-Za-z]*\b`)
	for _, src := range srcs {
		_, err := config.Parse("x.yaml", []byte(src))
		if err == nil {
			continue
		}
		for _, w := range camel.FindAllString(err.Error(), -1) {
			if names[w] {
				t.Errorf("%q: an error names the Go field %s:\n%v", src, w, err)
			}
		}
	}
	_, err := config.Parse("x.yaml", []byte("routes: [{upstream: d}]\nupstreams: {d: {type: demo}}\noverload: {max_in_flight: many}\n"))
	if want := `x.yaml:3:27: overload.max_in_flight: want a whole number, found "many"`; err == nil || err.Error() != want {
		t.Errorf("max_in_flight: many:\n got %v\nwant %s", err, want)
	}
}
