package main

import (
	"os"
	"strings"
	"testing"

	"github.com/portero-rl/portero/internal/accesslog"
)

// shellFields splits a command line as a shell would for the doc's
// commands: words, with '…' and "…" quoting.
func shellFields(s string) []string {
	var out []string
	var cur strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(c)
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}

// TestOperationsDoc runs every `$ portero …` block of docs/operations.md
// from the repository's root and checks that it prints what the doc
// shows, and that the access log line the doc shows reads back.
func TestOperationsDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	var cur *strings.Builder
	for _, line := range strings.SplitAfter(string(doc), "\n") {
		switch {
		case strings.HasPrefix(line, "```") && cur == nil:
			cur = new(strings.Builder)
			cur.WriteString(line)
		case strings.HasPrefix(line, "```"):
			blocks = append(blocks, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line)
		}
	}
	t.Chdir("../..")
	n, jsonLines := 0, 0
	for _, b := range blocks {
		fence, body, _ := strings.Cut(b, "\n")
		if fence == "```json" {
			var e accesslog.Entry
			if err := accesslog.ParseJSON([]byte(body), &e); err != nil || e.Decision == "" || len(e.Header) == 0 {
				t.Errorf("the doc's access log line does not read back: %v %+v", err, e)
			}
			jsonLines++
			continue
		}
		cmdLine, want, ok := strings.Cut(body, "\n")
		if !ok || !strings.HasPrefix(cmdLine, "$ portero ") {
			continue
		}
		n++
		out, errOut, code := runCmd(t, shellFields(strings.TrimPrefix(cmdLine, "$ portero "))...)
		if code != 0 || out != want {
			t.Errorf("%s (exit %d, %s) printed\n%s\ndocs/operations.md shows\n%s", cmdLine, code, errOut, out, want)
		}
	}
	if n < 2 || jsonLines != 1 {
		t.Errorf("found %d command blocks and %d access log lines in docs/operations.md, want at least 2 and 1", n, jsonLines)
	}
}
