// Package apikey maps API keys to the callers and usage plans they belong
// to. A key identifies a caller for counting; it does not authenticate it
// (it travels in a header, does not expire and authorizes nothing).
//
// Keys are kept hashed, as configuration and keys files hold them: the
// SHA-256 of the key, in hexadecimal (Hash; `portero keys hash`). A lookup
// hashes the key a request presents, finds its entry by that hash and
// compares the two in constant time.
//
// ReadFile (file.go) streams a keys file of millions of keys, key by key.
package apikey

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
)

// MaxKeyLen is the longest key a request may present; a longer one is
// unknown without being hashed.
const MaxKeyLen = 4096

// Hash returns the SHA-256 of key in lower-case hexadecimal: the form in
// which keys are stored.
func Hash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// ParseHash reads a hash as Hash writes it (upper case accepted).
func ParseHash(s string) ([32]byte, error) {
	var h [32]byte
	if len(s) == 64 {
		if _, err := hex.Decode(h[:], []byte(s)); err == nil { // either case
			return h, nil
		}
	}
	return [32]byte{}, fmt.Errorf("%q: want the 64 hexadecimal digits of a SHA-256 (portero keys hash KEY)", s)
}

// Key is what a key identifies: the caller's ID (the name its counters are
// kept under, never the key itself) and its plan.
type Key struct {
	ID, Plan string
}

type entry struct {
	hash [32]byte
	key  Key
}

// Set maps hashed keys to callers; once built, it is safe for concurrent
// use.
type Set struct {
	byHash map[[32]byte]*entry
}

// NewSet returns an empty set with room for n keys.
func NewSet(n int) *Set { return &Set{byHash: make(map[[32]byte]*entry, n)} }

// Add adds a key by its hash; it fails when the hash is already there.
// Add is for building a set, before it is shared.
func (s *Set) Add(hash [32]byte, k Key) error {
	if _, dup := s.byHash[hash]; dup {
		return fmt.Errorf("key hash %s given twice", hex.EncodeToString(hash[:8]))
	}
	s.byHash[hash] = &entry{hash: hash, key: k}
	return nil
}

// Len returns the number of keys.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.byHash)
}

// Lookup returns the caller that raw, a key presented by a request,
// identifies.
func (s *Set) Lookup(raw string) (Key, bool) {
	if s == nil || raw == "" || len(raw) > MaxKeyLen {
		return Key{}, false
	}
	return s.lookup(sha256.Sum256([]byte(raw)))
}

// TooLong is what Logged records for a key longer than MaxKeyLen, which
// Lookup finds unknown without hashing it.
const TooLong = "too-long"

// Logged is how a log records raw, a key a request presented, so that the
// request can be decided again (LookupLogged) without the key ever being
// written: its Hash; TooLong for a key longer than MaxKeyLen; "" for none.
func Logged(raw string) string {
	switch {
	case raw == "":
		return ""
	case len(raw) > MaxKeyLen:
		return TooLong
	}
	return Hash(raw)
}

// LookupLogged returns the caller of a key recorded as Logged records it:
// what Lookup answers for the key itself.
func (s *Set) LookupLogged(logged string) (Key, bool) {
	h, err := ParseHash(logged)
	if s == nil || err != nil {
		return Key{}, false
	}
	return s.lookup(h)
}

func (s *Set) lookup(sum [32]byte) (Key, bool) {
	e, ok := s.byHash[sum]
	if !ok || subtle.ConstantTimeCompare(e.hash[:], sum[:]) != 1 {
		return Key{}, false
	}
	return e.key, true
}
