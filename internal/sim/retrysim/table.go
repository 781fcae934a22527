package retrysim

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// writeRows writes header and rows as CSV ("csv") or aligned columns
// ("table"); "table" first prints the summary lines, each followed by a
// newline, and a blank line.
func writeRows(w io.Writer, format string, summary []string, header []string, rows [][]string) error {
	switch format {
	case "csv":
		cw := csv.NewWriter(w)
		if err := cw.Write(header); err != nil {
			return err
		}
		if err := cw.WriteAll(rows); err != nil {
			return err
		}
		return cw.Error()
	case "table", "":
		for _, s := range summary {
			if _, err := io.WriteString(w, s+"\n"); err != nil {
				return err
			}
		}
		if len(summary) > 0 {
			if _, err := io.WriteString(w, "\n"); err != nil {
				return err
			}
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, strings.Join(header, "\t")+"\t\n")
		for _, r := range rows {
			fmt.Fprint(tw, strings.Join(r, "\t")+"\t\n")
		}
		return tw.Flush()
	}
	return fmt.Errorf("retrysim: unknown format %q: want csv or table", format)
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func fixed(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
