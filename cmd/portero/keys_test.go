package main

import (
	"strings"
	"testing"

	"github.com/portero-rl/portero/internal/apikey"
	"github.com/portero-rl/portero/internal/config"
)

func TestKeysHash(t *testing.T) {
	// echo -n abc | sha256sum
	out, errOut, code := runCmd(t, "keys", "hash", "abc")
	if code != 0 || out != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n" {
		t.Errorf("keys hash abc = %q (exit %d, %s)", out, code, errOut)
	}
	out, _, code = runCmd(t, "keys", "hash", "--id", "acme", "--plan", "gold", "demo-gold-key")
	if want := "  - {id: acme, plan: gold, sha256: f47cad35f6f99d49f4a2e8ad6da5b64cf93b99bc9b02abed86bcf8095c575352}\n"; code != 0 || out != want {
		t.Errorf("keys hash --id --plan = %q, want %q", out, want)
	}
	if _, _, code := runCmd(t, "keys", "hash", "--id", "acme", "k"); code != 2 {
		t.Errorf("--id without --plan: exit %d, want 2", code)
	}
	out, _, code = runCmd(t, "keys", "new", "--id", "acme", "--plan", "gold")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 {
		t.Fatalf("keys new = %q (exit %d)", out, code)
	}
	key := lines[0][strings.LastIndex(lines[0], " ")+1:]
	if len(key) != 43 || !strings.Contains(lines[1], apikey.Hash(key)) {
		t.Errorf("keys new: key %q, line %q: the line must hold the key's hash", key, lines[1])
	}
	// The line is a valid keys-file entry.
	yaml := "upstreams: {d: {type: demo}}\nroutes: [{upstream: d}]\nplans: {gold: {rate: 10}}\napi_keys:\n  keys:\n" + lines[1] + "\n"
	c, err := config.Parse("k.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := c.Gateway.Keys.Lookup(key); !ok || k.ID != "acme" {
		t.Errorf("the new key does not identify acme: %v %v", k, ok)
	}
}
