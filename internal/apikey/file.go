package apikey

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/portero-rl/portero/internal/config/fileerr"
)

// A keys file (api_keys.file) may hold millions of keys, so it is read as
// it streams, a line at a time, each key handed to add as its item ends.
// yaml.v3 has no token stream: its Decoder builds the whole document's
// tree, and decoding item by item is far slower (BenchmarkKeysFile). The
// shape read is the one `portero keys` writes and the docs show:
//
//	keys:
//	  - {id: acme, plan: gold, sha256: 64 hex digits}
//	  - id: globex          # or a block mapping, one field per line
//	    plan: basic
//	    sha256: ...
//
// with comments, blank lines, a leading "---", and plain, 'single-' or
// "double-quoted" (without escapes) values. What it accepts means what
// yaml.v3 reads (FuzzKeysFile); YAML beyond that shape is refused with its
// line.

// MaxKeysFileSize bounds a keys file (1 GiB, about ten million keys), so
// that /dev/zero or a runaway generator is refused.
const MaxKeysFileSize = 1 << 30

// maxKeysLine bounds one line; maxKeysErrors the errors reported, the
// rest counted in a last one.
const (
	maxKeysLine   = 64 << 10
	maxKeysErrors = 1000
)

// keysFields are the fields of a key, in the order errors list them.
var keysFields = []string{"id", "plan", "sha256"}

// keysReader reads one keys file into a set.
type keysReader struct {
	file      string
	line      int
	errs      []*fileerr.Error
	more      int // errors past maxKeysErrors
	state     int
	seen      bool // a line other than a comment and a first "---"
	started   bool // the "---" that may start the document
	keys      bool // the keys field
	seqIndent int  // of the sequence's dashes; -1 before the first
	item      *keyItem
	n         int // items begun
	add       func(k Entry) (field string, err error)
}

// The states of a keysReader: before keys:, in its sequence, in another
// top-level field (skipped, reported), after keys: [] (nothing may follow).
const (
	keysTop = iota
	keysSeq
	keysSkip
	keysClosed
)

// keyItem is one key being read: its fields and where each is.
type keyItem struct {
	index      int
	line, col  int // of its dash
	indent     int // of its block mapping's keys; -1 until known
	key        Entry
	at         [3][2]int // line and column of each field's value
	have       [3]bool
	flowClosed bool
	errsBefore int // errors reported before it began
}

// Entry is one key as a configuration or a keys file writes it: the
// caller's ID, its plan, and the SHA-256 of the key (Hash).
type Entry struct {
	ID     string `yaml:"id"`
	Plan   string `yaml:"plan"`
	SHA256 string `yaml:"sha256"`
}

// ReadFile streams the keys file at path, calling add for every key read
// without error (add says the field a key is wrong in, and why). It
// returns the file's problems, each at its line, and the error that kept
// it from being read at all.
func ReadFile(path string, add func(Entry) (field string, err error)) ([]*fileerr.Error, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	kr := &keysReader{file: path, seqIndent: -1, add: add}
	err = kr.read(f)
	return kr.errs, err
}

func (kr *keysReader) read(r io.Reader) error {
	br := bufio.NewReaderSize(io.LimitReader(r, MaxKeysFileSize+1), maxKeysLine)
	size := 0
	for {
		b, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			kr.errorAt(kr.line+1, 1, "", "a line longer than %d KiB: not a keys file", maxKeysLine>>10)
			return kr.finish()
		}
		if size += len(b); size > MaxKeysFileSize {
			kr.errs = []*fileerr.Error{{File: kr.file, Msg: fmt.Sprintf("larger than %d MiB: not a keys file", MaxKeysFileSize>>20)}}
			return nil
		}
		if len(b) > 0 {
			kr.line++
			b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
			if kr.line == 1 {
				b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark
			}
			kr.handle(b)
		}
		if err == io.EOF {
			return kr.finish()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", kr.file, err)
		}
	}
}

func (kr *keysReader) finish() error {
	kr.endItem()
	if !kr.seen {
		kr.errorAt(1, 1, "", "empty keys file: want keys: [{id: ..., plan: ..., sha256: ...}]")
	}
	if kr.more > 0 {
		kr.errs = append(kr.errs, &fileerr.Error{File: kr.file, Msg: fmt.Sprintf("and %d more errors", kr.more)})
	}
	return nil
}

// reported returns how many errors have been reported.
func (kr *keysReader) reported() int { return len(kr.errs) + kr.more }

// errorAt reports a problem at line and column (1-based) in field.
func (kr *keysReader) errorAt(line, col int, field, format string, args ...any) {
	if len(kr.errs) >= maxKeysErrors {
		kr.more++
		return
	}
	kr.errs = append(kr.errs, &fileerr.Error{File: kr.file, Line: line, Column: col, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// handle reads one line.
func (kr *keysReader) handle(b []byte) {
	if col := unprintable(b); col > 0 {
		kr.errorAt(kr.line, col, "", "a control character or invalid UTF-8: YAML is printable text")
		return
	}
	if col := tabOutsideComment(b); col > 0 {
		kr.errorAt(kr.line, col, "", "a tab: a keys file separates and indents with spaces")
		return
	}
	c := &cursor{b: b}
	c.space()
	if c.end() {
		return
	}
	indent := c.i
	if indent == 0 && kr.state != keysSeq || indent == 0 && !c.dash() {
		kr.endItem()
		kr.top(c)
		return
	}
	switch kr.state {
	case keysTop, keysClosed:
		kr.errorAt(kr.line, indent+1, "", "want keys: at the start of the line, then one - {id: ..., plan: ..., sha256: ...} per key")
		return
	case keysSkip:
		return // inside a field already reported unknown
	}
	if c.dash() && (kr.seqIndent < 0 || indent == kr.seqIndent) {
		kr.endItem()
		kr.seqIndent = indent
		kr.beginItem(c)
		return
	}
	it := kr.item
	if it != nil && it.indent < 0 && indent > kr.seqIndent {
		it.indent = indent
	}
	if it == nil || it.flowClosed || indent != it.indent {
		kr.errorAt(kr.line, indent+1, kr.itemField(), "want one - {id: ..., plan: ..., sha256: ...} per key, or its fields one per line under the first (a value continued on another line is not read in a keys file)")
		return
	}
	kr.blockField(c)
}

// top reads a line of the top-level mapping: keys, or "---" first.
func (kr *keysReader) top(c *cursor) {
	if !kr.seen && !kr.started && bytes.HasPrefix(c.b, []byte("---")) {
		c.i = 3
		if c.end() {
			kr.started = true
			return
		}
		c.i = 0
	}
	kr.seen = true
	name, _, problem := c.scalar(false)
	if problem == "" && !c.colon() {
		problem = "want keys: at the start of the line, then one - {id: ..., plan: ..., sha256: ...} per key"
	}
	if problem != "" {
		kr.errorAt(kr.line, c.i+1, "", "%s", problem)
		kr.state = keysSkip
		return
	}
	if string(name) != "keys" {
		kr.errorAt(kr.line, 1, string(name), "%s", fileerr.Unknown(string(name), []string{"keys"}))
		kr.state = keysSkip
		return
	}
	if kr.keys {
		kr.errorAt(kr.line, 1, "keys", "given twice")
		kr.state = keysSkip
		return
	}
	kr.keys, kr.state = true, keysSeq
	if c.end() {
		return
	}
	at := c.i
	kr.state = keysClosed
	if c.b[c.i] == '[' {
		c.i++
		c.space()
		if c.i < len(c.b) && c.b[c.i] == ']' {
			c.i++
			if c.end() {
				return // keys: [] — no keys
			}
		}
	}
	c.i = at
	if _, null, problem := c.scalar(false); problem == "" && null && c.end() {
		return // keys: null — no keys
	}
	kr.errorAt(kr.line, at+1, "keys", "want one - {id: ..., plan: ..., sha256: ...} per line below keys: (a flow sequence [...] is not read in a keys file)")
}

// itemField returns the field name of the item being read, or keys.
func (kr *keysReader) itemField() string {
	if kr.item == nil {
		return "keys"
	}
	return fmt.Sprintf("keys[%d]", kr.item.index)
}

// beginItem reads the line of an item's dash; c is at the dash.
func (kr *keysReader) beginItem(c *cursor) {
	it := &keyItem{index: kr.n, line: kr.line, col: c.i + 1, indent: -1, errsBefore: kr.reported()}
	kr.n++
	kr.item = it
	c.i++ // the dash
	c.space()
	if c.end() {
		return // a block mapping on the lines below
	}
	if c.b[c.i] == '{' {
		kr.flowMapping(c)
		return
	}
	it.indent = c.i
	kr.blockField(c)
}

// blockField reads a "field: value" line of a block mapping item.
func (kr *keysReader) blockField(c *cursor) {
	kr.field(c, false, "want field: value (id, plan or sha256), or - {id: ..., plan: ..., sha256: ...}")
}

// field reads one "name: value" of the current item and sets it: inside
// {…} when flow, else the whole rest of the line. A problem is reported at
// its column, and ok is false.
func (kr *keysReader) field(c *cursor, flow bool, wantColon string) (name []byte, ok bool) {
	keyCol := c.i
	name, _, problem := c.scalar(flow)
	if problem == "" && !c.colon() {
		problem = wantColon
	}
	if problem != "" {
		kr.errorAt(kr.line, c.i+1, kr.itemField(), "%s", problem)
		return name, false
	}
	c.space()
	valCol := c.i
	v, _, problem := c.scalar(flow)
	if problem == "" && !flow && !c.end() {
		problem = "unexpected text after the value"
	}
	if problem != "" {
		kr.errorAt(kr.line, c.i+1, kr.itemField()+"."+string(name), "%s", problem)
		return name, false
	}
	kr.set(kr.item, name, v, keyCol, valCol)
	return name, true
}

// flowMapping reads an item written {id: ..., plan: ..., sha256: ...}; c
// is at the brace.
func (kr *keysReader) flowMapping(c *cursor) {
	it := kr.item
	it.flowClosed = true
	c.i++
	for {
		c.space()
		if c.i >= len(c.b) {
			kr.errorAt(kr.line, c.i+1, kr.itemField(), "unclosed {: a key's {id: ..., plan: ..., sha256: ...} closes on its line")
			return
		}
		if c.b[c.i] == '}' {
			c.i++
			if !c.end() {
				kr.errorAt(kr.line, c.i+1, kr.itemField(), "unexpected text after }")
			}
			return
		}
		name, ok := kr.field(c, true, "want field: value (id, plan or sha256)")
		if !ok {
			return
		}
		c.space()
		if c.i < len(c.b) && c.b[c.i] == ',' {
			c.i++
			continue
		}
		if c.i < len(c.b) && c.b[c.i] == '}' {
			continue
		}
		if c.end() {
			kr.errorAt(kr.line, c.i+1, kr.itemField(), "unclosed {: a key's {id: ..., plan: ..., sha256: ...} closes on its line")
			return
		}
		kr.errorAt(kr.line, c.i+1, kr.itemField(), "want , or } after %s's value", name)
		return
	}
}

// set records field name of it.
func (kr *keysReader) set(it *keyItem, name, v []byte, keyCol, valCol int) {
	i := -1
	for j, f := range keysFields {
		if f == string(name) {
			i = j
		}
	}
	if i < 0 {
		kr.errorAt(kr.line, keyCol+1, kr.itemField()+"."+string(name), "%s", fileerr.Unknown(string(name), keysFields))
		return
	}
	if it.have[i] {
		kr.errorAt(kr.line, keyCol+1, kr.itemField()+"."+string(name), "given twice")
		return
	}
	it.have[i], it.at[i] = true, [2]int{kr.line, valCol + 1}
	switch i {
	case 0:
		it.key.ID = string(v)
	case 1:
		it.key.Plan = string(v)
	default:
		it.key.SHA256 = string(v)
	}
}

// endItem checks and adds the item being read, if any.
func (kr *keysReader) endItem() {
	it := kr.item
	if it == nil {
		return
	}
	kr.item = nil
	if kr.reported() > it.errsBefore {
		return // its problem is said: what it holds is no key to check
	}
	if !it.flowClosed && it.have == [3]bool{} {
		kr.errorAt(it.line, it.col, kr.fieldOf(it), "an empty item: want {id: ..., plan: ..., sha256: ...}")
		return
	}
	field, err := kr.add(it.key)
	if err == nil {
		return
	}
	line, col := it.line, it.col
	for i, f := range keysFields {
		if f == field && it.have[i] {
			line, col = it.at[i][0], it.at[i][1]
		}
	}
	kr.errorAt(line, col, kr.fieldOf(it)+"."+field, "%v", err)
}

func (kr *keysReader) fieldOf(it *keyItem) string { return fmt.Sprintf("keys[%d]", it.index) }

// cursor reads one line of a keys file.
type cursor struct {
	b []byte
	i int
}

func (c *cursor) space() {
	for c.i < len(c.b) && c.b[c.i] == ' ' {
		c.i++
	}
}

// end skips spaces and reports whether the line ends there (or a comment
// starts).
func (c *cursor) end() bool {
	c.space()
	return c.i >= len(c.b) || c.b[c.i] == '#' && (c.i == 0 || c.b[c.i-1] == ' ')
}

// dash reports whether a sequence item starts at c: "-" then a space or
// the end of the line.
func (c *cursor) dash() bool {
	return c.i < len(c.b) && c.b[c.i] == '-' && (c.i+1 == len(c.b) || c.b[c.i+1] == ' ')
}

// colon reads the ":" after a mapping key: followed by a space or the
// end.
func (c *cursor) colon() bool {
	c.space()
	if c.i >= len(c.b) || c.b[c.i] != ':' {
		return false
	}
	if c.i+1 < len(c.b) {
		next := c.b[c.i+1]
		if next != ' ' {
			return false
		}
	}
	c.i++
	return true
}

// scalar reads a plain, single- or double-quoted scalar: its value, whether
// it is YAML's null (empty, ~, null), and what is wrong when it is not a
// scalar this reader takes. In a flow mapping a plain scalar ends at , or }.
func (c *cursor) scalar(flow bool) (v []byte, null bool, problem string) {
	if c.i >= len(c.b) {
		return nil, true, ""
	}
	switch q := c.b[c.i]; q {
	case '\'', '"':
		var out []byte
		for j := c.i + 1; j < len(c.b); j++ {
			switch {
			case q == '"' && c.b[j] == '\\':
				return nil, false, "an escape (\\) is not read in a keys file: write the value plainly or in single quotes"
			case c.b[j] != q:
				out = append(out, c.b[j])
			case q == '\'' && j+1 < len(c.b) && c.b[j+1] == '\'':
				out = append(out, '\'')
				j++
			default:
				c.i = j + 1
				return out, false, ""
			}
		}
		return nil, false, "unclosed quote: a value ends on its line in a keys file"
	case ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '%', '@', '`':
		if q == ',' || q == '}' {
			if flow {
				return nil, true, ""
			}
		}
		return nil, false, fmt.Sprintf("%q starts no value a keys file reads: write the value plainly or in quotes", q)
	case '-', '?', ':':
		if c.i+1 == len(c.b) || c.b[c.i+1] == ' ' || flow && q != '-' {
			return nil, false, fmt.Sprintf("%q starts no value a keys file reads: write the value plainly or in quotes", q)
		}
	}
	start, end := c.i, c.i
	for j := c.i; j < len(c.b); j++ {
		ch := c.b[j]
		if ch == '#' && c.b[j-1] == ' ' {
			break
		}
		if ch == ':' && (j+1 == len(c.b) || c.b[j+1] == ' ' || flow && (c.b[j+1] == ',' || c.b[j+1] == '}')) {
			break
		}
		if flow && (ch == ',' || ch == '}') {
			break
		}
		if ch == ' ' {
			continue
		}
		if !plainByte(ch) {
			c.i = j
			return nil, false, fmt.Sprintf("%q in a plain value: write the value in quotes", ch)
		}
		end = j + 1
	}
	c.i = end
	v = c.b[start:end]
	switch string(v) {
	case "~", "null", "Null", "NULL":
		return nil, true, ""
	}
	return v, false, ""
}

// plainByte reports whether ch may be in a plain value of a keys file:
// what names and hashes are made of, read alike by every YAML reader.
func plainByte(ch byte) bool {
	return ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || strings.IndexByte("-_.:/~", ch) >= 0
}

// unprintable returns the 1-based column of the first byte of b that YAML
// does not take (a control character other than a tab, invalid UTF-8, or
// a character outside YAML's printable set), or 0.
func unprintable(b []byte) int {
	for i := 0; i < len(b); {
		ch := b[i]
		if ch < utf8.RuneSelf {
			if ch < ' ' && ch != '\t' || ch == 0x7f {
				return i + 1
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError || r < 0xA0 && r != 0x85 || r >= 0xD800 && r <= 0xDFFF || r == 0xFEFF || r == 0xFFFE || r == 0xFFFF {
			return i + 1
		}
		i += size
	}
	return 0
}

// tabOutsideComment returns the 1-based column of the first tab of b
// before a comment, or 0: YAML readers differ on tabs between tokens, so a
// keys file has none.
func tabOutsideComment(b []byte) int {
	for i, ch := range b {
		switch {
		case ch == '#' && (i == 0 || b[i-1] == ' '):
			return 0
		case ch == '\t':
			return i + 1
		}
	}
	return 0
}
