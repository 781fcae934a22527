// Package quote is the one way Portero repeats what a client sent (a
// header value, a query value, a JSON member, a path) in a problem detail
// or an error: quoted, and cut to a short prefix, so that an answer never
// grows with the request (a 64 KiB header gets a detail of a hundred bytes,
// not of 64 KiB). Standard library only.
package quote

import (
	"strconv"
	"unicode/utf8"
)

// MaxInput is the most bytes of a client's value an answer repeats.
const MaxInput = 64

// Input returns s quoted as strconv.Quote does (so that control characters
// and invalid UTF-8 are escaped, never sent raw); a value longer than
// MaxInput bytes is cut at a character boundary before MaxInput and
// followed by "…" and its length, as in "1111…" (65536 bytes).
func Input(s string) string {
	if len(s) <= MaxInput {
		return strconv.Quote(s)
	}
	return strconv.Quote(prefix(s)) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// Cut returns s unquoted when it is at most MaxInput bytes, and otherwise
// its prefix followed by "…": for text built from what a client sent that
// reads better unquoted (a path of JSON member names, such as
// descriptors[0].limit), escaped by the encoder of the answer.
func Cut(s string) string {
	if len(s) <= MaxInput {
		return s
	}
	return prefix(s) + "…"
}

// prefix is s cut at a character boundary at most MaxInput bytes in.
func prefix(s string) string {
	cut := MaxInput
	for cut > MaxInput-utf8.UTFMax && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
