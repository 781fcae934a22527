package config_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/portero-rl/portero/internal/config"
)

// TestAllErrorsAtOnce: every error of a file comes at once, once, each
// with file:line:column and the field: an unknown field hides none of the
// others (here a typo beside 0/min and an unknown algorithm), a type error
// names its field rather than "cannot unmarshal !!str into int", and a
// misspelt field gets a suggestion.
func TestAllErrorsAtOnce(t *testing.T) {
	src := `server:
  listn: 127.0.0.1:8080
  max_in_flight: many
upstreams:
  d: {type: demo, timeot: 5s}
routes:
  - upstream: d
    match: {path: nope}
rules:
  - name: a
    key: ip
    limit: 0/min
    algorithm: magic
  - name: b
    key: ip
    limit: 1/s
    match: {path: login, method: [GET]}
  - name: c
    kye: ip
    limit: [1, 2]
`
	_, err := config.Parse("bad.yaml", []byte(src))
	var es config.Errors
	if !errors.As(err, &es) {
		t.Fatalf("err = %v, want Errors", err)
	}
	want := []string{
		`bad.yaml:2:3: server.listn: unknown field; did you mean listen?`,
		`bad.yaml:3:18: server.max_in_flight: want a whole number, found "many"`,
		`bad.yaml:5:19: upstreams.d.timeot: unknown field; did you mean timeout?`,
		`bad.yaml:8:19: routes[0].match.path: "nope": a path pattern starts with /`,
		`bad.yaml:12:12: rules[0].limit: 0/min: invalid limit: count 0: must be positive`,
		`bad.yaml:13:16: rules[0].algorithm: unknown algorithm "magic": want one of [fixed-window fixed-window-anchored sliding-log sliding-counter token-bucket leaky-meter gcra leaky-queue]`,
		`bad.yaml:17:19: rules[1].match.path: "login": a path pattern starts with /`,
		`bad.yaml:17:26: rules[1].match.method: unknown field; did you mean methods?`,
		`bad.yaml:19:5: rules[2].kye: unknown field; did you mean key?`,
		`bad.yaml:20:12: rules[2].limit: want text, found a list`,
	}
	got := err.Error()
	lines := strings.Split(got, "\n")
	if len(lines) != len(want) {
		t.Errorf("%d errors, want %d:\n%s", len(lines), len(want), got)
	}
	for i, w := range want {
		if i >= len(lines) || lines[i] != w {
			t.Errorf("error %d:\n got %q\nwant %q", i, strings.Join(lines[min(i, len(lines)-1):min(i+1, len(lines))], ""), w)
		}
	}
	for _, e := range es {
		if e.Line == 0 || e.Column == 0 {
			t.Errorf("%v: no line or column", e)
		}
	}
}

func TestEmptyFileHasALine(t *testing.T) {
	for _, src := range []string{"", "\n\n", "# only a comment\n"} {
		_, err := config.Parse("empty.yaml", []byte(src))
		if err == nil || !strings.HasPrefix(err.Error(), "empty.yaml:1:1: routes: ") {
			t.Errorf("Parse(%q) = %v, want an error at empty.yaml:1:1 about routes", src, err)
		}
	}
	_, err := config.Parse("list.yaml", []byte("- a\n- b\n"))
	if err == nil || err.Error() != "list.yaml:1:1: want a mapping of sections (server, admin, store, client_ip, identity, headers, upstreams, routes, rules, address_lists, levels, plans, api_keys, rate_rules, limits_endpoint, overload), found a list" {
		t.Errorf("a list: %v", err)
	}
}

// TestEnvAtValidation: config validate runs where the production secrets
// are not (CI): an unset admin.token_env is no error for Check, which lists
// what the file needs from the environment; Load, what serve runs, still
// refuses to start without it.
func TestEnvAtValidation(t *testing.T) {
	src := []byte("admin: {token_env: PORTERO_TEST_UNSET_TOKEN}\nupstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\n")
	os.Unsetenv("PORTERO_TEST_UNSET_TOKEN")
	if _, err := config.Parse("e.yaml", src); err == nil || !strings.Contains(err.Error(), "e.yaml:1:20: admin.token_env: environment variable PORTERO_TEST_UNSET_TOKEN is empty or unset") {
		t.Errorf("Parse with the variable unset: %v, want an error", err)
	}
	c, err := config.ParseWith("e.yaml", src, config.Options{AllowUnsetEnv: true})
	if err != nil {
		t.Fatalf("ParseWith(AllowUnsetEnv): %v", err)
	}
	if len(c.Env) != 1 || c.Env[0].Name != "PORTERO_TEST_UNSET_TOKEN" || c.Env[0].Set || c.Env[0].String() != "e.yaml:1:20: admin.token_env: needs environment variable PORTERO_TEST_UNSET_TOKEN (unset here)" {
		t.Errorf("Env = %+v", c.Env)
	}
	t.Setenv("PORTERO_TEST_UNSET_TOKEN", "s3cret")
	c, err = config.Parse("e.yaml", src)
	if err != nil || c.AdminToken != "s3cret" || len(c.Env) != 1 || !c.Env[0].Set {
		t.Errorf("Parse with the variable set: %+v, %v", c, err)
	}
}

// TestAliasesBounded: YAML aliases (here merge keys, each repeating the
// one before ten times: 10⁹ merges) expand to a bounded number of nodes,
// with an error: the walk stops there, whatever the file stands for.
func TestAliasesBounded(t *testing.T) {
	src := "m0: &m0 {name: x}\n"
	for i := 1; i <= 9; i++ {
		src += fmt.Sprintf("m%d: &m%d {<<: [%s]}\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*m%d, ", i-1), 10), ", "))
	}
	src += "upstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\nrules:\n  - <<: *m9\n    key: ip\n    limit: 1/s\n"
	_, err := config.Parse("bomb.yaml", []byte(src))
	if err == nil || !strings.Contains(err.Error(), "rules[0]: more than 1000000 values once YAML aliases are expanded") {
		t.Errorf("alias bomb: %v", err)
	}
	if strings.Contains(err.Error(), "required") {
		t.Errorf("alias bomb: errors after the cut:\n%v", err)
	}
}

// TestMergeKeys: a rule that merges another's fields with << keeps its own
// where it gives them, whole: its own match replaces the merged one rather
// than adding to its lists, and of two merged mappings the first that has
// a field gives it.
func TestMergeKeys(t *testing.T) {
	src := `upstreams: {d: {type: demo}}
routes: [{upstream: d}]
rules:
  - &base {name: base, key: ip, limit: 1/s, match: {methods: [GET], headers: {X-A: a}}}
  - &other {name: other, key: ip, limit: 9/s, algorithm: gcra}
  - <<: [*base, *other]
    name: own
    match: {methods: [POST]}
`
	c, err := config.Parse("m.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Policy.Rule("own")
	// The limit is base's, the algorithm other's: base has none.
	if got := fmt.Sprintf("%v %v %v %v", r.Match.Methods, r.Match.Headers, r.Limit, r.Algorithm); got != "[POST] map[] 1/s gcra" {
		t.Errorf("merged rule: %s, want [POST] map[] 1/s gcra", got)
	}
}
