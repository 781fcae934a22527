package apikey_test

import (
	"strings"
	"testing"

	"github.com/portero-rl/portero/internal/apikey"
)

func TestLookup(t *testing.T) {
	// echo -n 'secret-key-1' | sha256sum
	const hash = "b6f4c4b96b29fd5e6e55e1c8c8d3a4c6b6b1d0e6a30db1ad8d0d52c2e6e24a0b"
	if got := apikey.Hash("abc"); got != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Fatalf("Hash(abc) = %s, want the SHA-256 test vector", got)
	}
	s := apikey.NewSet(2)
	h, err := apikey.ParseHash(strings.ToUpper(apikey.Hash("secret-key-1")))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Add(h, apikey.Key{ID: "acme", Plan: "gold"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(h, apikey.Key{ID: "other", Plan: "basic"}); err == nil {
		t.Error("a hash added twice was accepted")
	}
	if k, ok := s.Lookup("secret-key-1"); !ok || k != (apikey.Key{ID: "acme", Plan: "gold"}) {
		t.Errorf("Lookup(secret-key-1) = %v, %v", k, ok)
	}
	for _, bad := range []string{"", "secret-key-2", apikey.Hash("secret-key-1"), strings.Repeat("x", apikey.MaxKeyLen+1)} {
		if k, ok := s.Lookup(bad); ok {
			t.Errorf("Lookup(%.20q) = %v: the set holds only the hash of secret-key-1", bad, k)
		}
	}
	for _, bad := range []string{"", "abc", hash[:63], strings.Repeat("g", 64)} {
		if _, err := apikey.ParseHash(bad); err == nil {
			t.Errorf("ParseHash(%q) succeeded", bad)
		}
	}
}

// TestLookupLogged: a key recorded as Logged records it is found exactly
// when the key itself is, and the record never holds the key.
func TestLookupLogged(t *testing.T) {
	s := apikey.NewSet(1)
	h, _ := apikey.ParseHash(apikey.Hash("secret-key-1"))
	if err := s.Add(h, apikey.Key{ID: "acme", Plan: "gold"}); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("k", apikey.MaxKeyLen+1)
	for _, raw := range []string{"", "secret-key-1", "secret-key-2", long} {
		logged := apikey.Logged(raw)
		if raw != "" && strings.Contains(logged, raw) {
			t.Errorf("Logged(%.20q) = %.20q: holds the key", raw, logged)
		}
		wk, wok := s.Lookup(raw)
		if k, ok := s.LookupLogged(logged); k != wk || ok != wok {
			t.Errorf("LookupLogged(Logged(%.20q)) = %v, %v, want what Lookup answers: %v, %v", raw, k, ok, wk, wok)
		}
	}
	if got := apikey.Logged(long); got != apikey.TooLong {
		t.Errorf("Logged(a key over MaxKeyLen) = %q, want %q", got, apikey.TooLong)
	}
}
