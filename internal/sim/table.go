package sim

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Formats lists the output formats of Table.Write and WriteResults.
var Formats = []string{"csv", "json", "table"}

// Table is what an experiment prints: a few summary lines, then one row per
// measurement under a header.
type Table struct {
	Summary []string
	Header  []string
	Rows    [][]string
}

// Write writes t in format: "table" prints the summary lines, a blank line
// after them, then aligned columns; "csv" and "json" only the rows, as CSV
// with the header first, or as a JSON array of objects whose keys are the
// header's, in its order. In JSON a cell that is a JSON number (such as 120
// or 0.95) is written as a number, any other as a string.
func (t Table) Write(w io.Writer, format string) error {
	switch format {
	case "json":
		return t.writeJSON(w)
	case "csv":
		cw := csv.NewWriter(w)
		if err := cw.Write(t.Header); err != nil {
			return err
		}
		if err := cw.WriteAll(t.Rows); err != nil { // WriteAll flushes
			return err
		}
		return cw.Error()
	case "table":
		var b strings.Builder
		for _, s := range t.Summary {
			b.WriteString(s + "\n")
		}
		if len(t.Summary) > 0 {
			b.WriteString("\n")
		}
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		for _, r := range append([][]string{t.Header}, t.Rows...) {
			io.WriteString(tw, strings.Join(r, "\t")+"\n")
		}
		tw.Flush()
		_, err := io.WriteString(w, b.String())
		return err
	}
	return fmt.Errorf("unknown format %q: want one of %v", format, Formats)
}

func (t Table) writeJSON(w io.Writer) error {
	values := make([][]string, len(t.Rows))
	for i, r := range t.Rows {
		if len(r) != len(t.Header) {
			return fmt.Errorf("row %d has %d cells for %d columns", i, len(r), len(t.Header))
		}
		values[i] = make([]string, len(r))
		for j, cell := range r {
			values[i][j] = cell
			if !isJSONNumber(cell) {
				v, _ := json.Marshal(cell)
				values[i][j] = string(v)
			}
		}
	}
	return writeObjects(w, t.Header, values)
}

// writeObjects writes rows as a JSON array, one object a line, whose keys
// are header's, in its order, and whose values are the rows' cells, each
// already written as JSON.
func writeObjects(w io.Writer, header []string, rows [][]string) error {
	b := []byte{'['}
	for i, r := range rows {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, "\n {"...)
		for j, v := range r {
			if j > 0 {
				b = append(b, ',')
			}
			k, _ := json.Marshal(header[j])
			b = append(append(append(b, k...), ':'), v...)
		}
		b = append(b, '}')
	}
	b = append(b, "\n]\n"...)
	_, err := w.Write(b)
	return err
}

// Number writes v in as few digits as say it exactly ("120", "0.95");
// Fixed with prec decimals. They write the experiments' figures.
func Number(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func Fixed(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }

// isJSONNumber reports whether s is a number in JSON's grammar.
func isJSONNumber(s string) bool {
	if s == "" || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) {
		return false
	}
	var n json.Number
	return json.Unmarshal([]byte(s), &n) == nil
}
