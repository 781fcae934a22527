// Package fileerr formats a problem found in a configuration file the one
// way Portero reports it, whichever reader found it (internal/config for
// Portero's YAML, internal/config/envoyconf for envoyproxy/ratelimit's):
//
//	FILE[:LINE[:COLUMN]]: [FIELD: ]MESSAGE
//
// such as "portero.yaml:12: rules[2].limit: 0/min: ...". It also holds
// what both readers share below their own fields: reading a file with the
// size cap (Read), the one reading of a whole number (Whole), and where a
// tab breaks a file's YAML (TabError). It imports nothing but the standard
// library, so both readers can use it without importing each other.
package fileerr

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// MaxSize bounds one configuration file in bytes (16 MiB): far above any
// real configuration, and low enough that a path such as /dev/zero or a
// runaway generated file is refused before it exhausts memory.
const MaxSize = 16 << 20

// ErrTooLarge is the error Read returns for a file above MaxSize, wrapped
// with the file name.
var ErrTooLarge = fmt.Errorf("larger than %d MiB: not a configuration file", MaxSize>>20)

// Read returns the contents of the file at path, reading at most MaxSize
// bytes: a larger file (or an endless one, such as /dev/zero) is an error
// wrapping ErrTooLarge whose text is Format(path, 0, 0, "", ...).
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

// Format returns the message of a problem in file at line and column (0 when
// unknown; a column is shown only with a line) in field (empty for the whole
// file or a syntax error).
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
// digits, an optional sign, no leading zero. What YAML would also take as
// a number is refused rather than read another way: a decimal ("2.5",
// which a decoder truncates to 2), an exponent ("1e2"), another base
// ("0x10"; "010", octal 8 in YAML 1.1), digits grouped with "_".
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

// The YAML library's messages about a tab in the indentation. It reports
// them at the line where the scalar or block before the tab starts (the
// line above, or further up), not where the tab is.
var tabMessages = []string{
	"found a tab character that violates indentation",
	"found a tab character where an indentation space is expected",
	"found character that cannot start any token",
}

// TabError finds the tab a YAML syntax error msg, reported at line, is
// about: the first tab, from line on, among a line's leading spaces and
// "-" indicators (for a character that cannot start a token, on line
// itself, where the library reports it). It returns the tab's line and
// column and a hint for the message; ok is false when msg is about
// something else, or no such tab is there.
func TabError(data []byte, line int, msg string) (tabLine, column int, hint string, ok bool) {
	last := -1 // the last line to look at; 0 for the end of the file
	for i, m := range tabMessages {
		if strings.Contains(msg, m) {
			last = 0
			if i == len(tabMessages)-1 {
				last = line
			}
		}
	}
	if last < 0 || line < 1 {
		return 0, 0, "", false
	}
	for i, l := range bytes.Split(data, []byte("\n")) {
		n := i + 1
		if n < line {
			continue
		}
		if last > 0 && n > last {
			break
		}
		lead := l[:len(l)-len(bytes.TrimLeft(l, " \t-"))]
		if col := bytes.IndexByte(lead, '\t'); col >= 0 {
			return n, col + 1, "YAML indents with spaces only, never with tabs", true
		}
	}
	return 0, 0, "", false
}
