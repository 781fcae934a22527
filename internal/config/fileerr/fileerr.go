// Package fileerr says what is wrong in a configuration file, and where,
// the one way every reader of Portero's files does:
// FILE[:LINE[:COLUMN]]: [FIELD: ]MESSAGE. It also holds what the readers
// share: Read with a size cap, Whole, and the one "did you mean" (Suggest).
package fileerr

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/agnivade/levenshtein"
)

// Error is one problem at a place in a configuration file.
type Error struct {
	File         string
	Line, Column int    // 1-based, 0 when unknown
	Field        string // such as rules[2].limit; empty for the whole file
	Msg          string
}

func (e *Error) Error() string { return Format(e.File, e.Line, e.Column, e.Field, e.Msg) }

// MaxSize bounds one configuration file (16 MiB), so that /dev/zero or a
// runaway generated file is refused before it exhausts memory.
const MaxSize = 16 << 20

// ErrTooLarge is the error Read returns for a file above MaxSize, wrapped
// with the file name.
var ErrTooLarge = fmt.Errorf("larger than %d MiB: not a configuration file", MaxSize>>20)

// Read returns the contents of the file at path, or an error wrapping
// ErrTooLarge past MaxSize bytes.
func Read(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > MaxSize {
		return nil, fmt.Errorf("%s: %w", path, ErrTooLarge)
	}
	return data, nil
}

// Format returns the message of a problem in file at line and column (0
// when unknown; a column only with a line) in field.
func Format(file string, line, column int, field, msg string) string {
	b := make([]byte, 0, len(file)+len(field)+len(msg)+16)
	b = append(b, file...)
	if line > 0 {
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(line), 10)
		if column > 0 {
			b = append(b, ':')
			b = strconv.AppendInt(b, int64(column), 10)
		}
	}
	b = append(b, ": "...)
	if field != "" {
		b = append(b, field...)
		b = append(b, ": "...)
	}
	b = append(b, msg...)
	return string(b)
}

// Whole reads a whole number as a configuration writes one: decimal
// digits, an optional sign, no leading zero; "2.5", "1e2", "0x10", "010"
// and "1_000" are refused rather than read another way.
func Whole(s string) (int64, bool) {
	digits := strings.TrimLeft(s, "+-")
	if len(s)-len(digits) > 1 || digits == "" || len(digits) > 1 && digits[0] == '0' {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// Suggest returns the name of known closest to typed when it is close
// enough to be a misspelling (a third of the longer name, at least two
// edits: "kye" for key), or ""; ties go to the first.
func Suggest(typed string, known []string) string {
	best, bestD := "", 0
	for _, n := range known {
		d := levenshtein.ComputeDistance(typed, n)
		if limit := max(2, max(len(typed), len(n))/3); d <= limit && (best == "" || d < bestD) {
			best, bestD = n, d
		}
	}
	return best
}

// Unknown is the message for a field typed where only known are: "unknown
// field; did you mean NAME?", or the known names when none is close.
func Unknown(typed string, known []string) string {
	if s := Suggest(typed, known); s != "" {
		return "unknown field; did you mean " + s + "?"
	}
	return "unknown field (known here: " + strings.Join(known, ", ") + ")"
}
