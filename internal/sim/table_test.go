package sim

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestTableJSON: keys in the header's order, numbers as numbers, any
// other cell (a name, an empty cell, "01", "1 2") as a string.
func TestTableJSON(t *testing.T) {
	var b bytes.Buffer
	rows := [][]string{{"fair", "120", "-0.5e3", ""}, {"random", "01", "1 2", "NaN"}}
	if err := (Table{Header: []string{"policy", "a", "b", "c"}, Rows: rows}).Write(&b, "json"); err != nil {
		t.Fatal(err)
	}
	want := `[
 {"policy":"fair","a":120,"b":-0.5e3,"c":""},
 {"policy":"random","a":"01","b":"1 2","c":"NaN"}
]
`
	if b.String() != want {
		t.Errorf("Table.Write json =\n%s\nwant\n%s", b.String(), want)
	}
	if !json.Valid(b.Bytes()) {
		t.Error("not valid JSON")
	}
	if err := (Table{Header: []string{"a"}, Rows: [][]string{{"1", "2"}}}).Write(&b, "json"); err == nil {
		t.Error("a row longer than the header was written")
	}
	if err := (Table{}).Write(&b, "xml"); err == nil {
		t.Error("an unknown format was accepted")
	}
}
