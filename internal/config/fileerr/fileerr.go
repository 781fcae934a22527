// Package fileerr formats a problem found in a configuration file the one
// way Portero reports it, whichever reader found it (internal/config for
// Portero's YAML, internal/config/envoyconf for envoyproxy/ratelimit's):
//
//	FILE[:LINE[:COLUMN]]: [FIELD: ]MESSAGE
//
// such as "portero.yaml:12: rules[2].limit: 0/min: ...". It also reads a
// configuration file with the size cap both readers share (Read). It
// imports nothing but the standard library, so both readers can use it
// without importing each other.
package fileerr

import (
	"fmt"
	"io"
	"os"
	"strconv"
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
