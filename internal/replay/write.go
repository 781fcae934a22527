package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/portero-rl/portero/internal/chart"
)

// ReportFormats are the formats of Write.
var ReportFormats = []string{"table", "csv", "json"}

// Write writes the report in format: "table" for people; "csv", the rules
// table, a blank line and the refused-keys table; "json", the whole report
// (with the timeline).
func (rep *Report) Write(w io.Writer, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	case "csv":
		var b []byte
		b = append(b, "rule,mode,key,limit,applied,allowed,refused,shadow_refused,can_never_pass,bad_cost,not_counted,first_refusal,last_refusal,peak,peak_refusals\n"...)
		for _, r := range rep.Rules {
			cells := []string{r.Name, mode(r.Shadow), r.Key, r.Limit, itoa(r.Applied), itoa(r.Allowed), itoa(r.Refused),
				itoa(r.WouldRefuse), itoa(r.CanNeverPass), itoa(r.BadCost), itoa(r.NotCounted), stamp(r.FirstRefusal), stamp(r.LastRefusal),
				stamp(r.Peak), itoa(r.PeakN)}
			b = appendRow(b, cells)
		}
		b = append(b, "\nrule,key,refused,max_overcount,first,last\n"...)
		for _, k := range rep.TopKeys {
			b = appendRow(b, []string{k.Rule, k.Key, itoa(k.Refused), itoa(k.Error), stamp(&k.First), stamp(&k.Last)})
		}
		_, err := w.Write(b)
		return err
	case "table":
		return rep.writeTable(w)
	}
	return fmt.Errorf("report format %q: want one of %s", format, strings.Join(ReportFormats, ", "))
}

func appendRow(b []byte, cells []string) []byte {
	for i, c := range cells {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendCSV(b, c)
	}
	return append(b, '\n')
}

func mode(shadow bool) string {
	if shadow {
		return "shadow"
	}
	return "enforce"
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func stamp(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// human formats a time to the second for the table.
func human(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

// thousands writes n with thin separators: 1,234,567.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func share(n, of int64) string {
	if of == 0 {
		return "-"
	}
	return strconv.FormatFloat(100*float64(n)/float64(of), 'f', 2, 64) + "%"
}

func (rep *Report) writeTable(w io.Writer) error {
	var sb strings.Builder
	fmt.Fprintf(&sb, "replayed %s requests from %s", thousands(rep.Requests), strings.Join(rep.Files, ", "))
	if rep.Requests > 0 {
		fmt.Fprintf(&sb, ", %s to %s UTC", human(&rep.First), human(&rep.Last))
	}
	sb.WriteString("\n")
	if rep.Malformed > 0 || rep.Dropped > 0 {
		fmt.Fprintf(&sb, "skipped %s malformed lines", thousands(rep.Malformed))
		if rep.Dropped > 0 {
			fmt.Fprintf(&sb, "; the log itself says it dropped entries at %s lines", thousands(rep.Dropped))
		}
		sb.WriteString(":\n")
		for _, e := range rep.Examples {
			sb.WriteString("  " + e + "\n")
		}
		if n := rep.Malformed + rep.Dropped - int64(len(rep.Examples)); n > 0 {
			fmt.Fprintf(&sb, "  … and %s more\n", thousands(n))
		}
	}
	if rep.Unsettled > 0 {
		fmt.Fprintf(&sb, "%s requests passed on could not be settled after their response (count_responses, a cost from the response): the log does not record the response\n", thousands(rep.Unsettled))
	}
	if rep.Late > 0 {
		fmt.Fprintf(&sb, "%s lines arrived later than the reorder window allows and were decided at the replay's clock\n", thousands(rep.Late))
	}
	sb.WriteString("\n")
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rule\tmode\tapplied\tallowed\trefused\tshare\tshadow-refused\tcan-never-pass\tfirst refusal\tlast refusal\tpeak\t")
	for _, r := range rep.Rules {
		peak := "-"
		if r.Peak != nil {
			peak = fmt.Sprintf("%s at %s", thousands(r.PeakN), human(r.Peak))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Name, mode(r.Shadow), thousands(r.Applied), thousands(r.Allowed),
			thousands(r.Refused), share(r.Refused+r.WouldRefuse, r.Applied), thousands(r.WouldRefuse), thousands(r.CanNeverPass),
			human(r.FirstRefusal), human(r.LastRefusal), peak)
	}
	tw.Flush()
	if rep.Timeline != nil {
		fmt.Fprintf(&sb, "(share: refused or shadow-refused of applied; peak: most refusals in one bucket of the timeline, %s wide)\n", widthName(rep.Timeline.Width))
	}
	sb.WriteString("\nstatuses:")
	for _, c := range rep.Statuses {
		fmt.Fprintf(&sb, "  %d: %s", c.Status, thousands(c.N))
	}
	sb.WriteString("\n\n")
	if len(rep.TopKeys) == 0 {
		sb.WriteString("no key refused\n")
	} else {
		sb.WriteString("keys refused most:\n")
		tw = tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "rule\tkey\trefused\tfirst\tlast")
		for _, k := range rep.TopKeys {
			n := thousands(k.Refused)
			if k.Error > 0 {
				n += " (at most " + thousands(k.Error) + " too many)"
			}
			name := k.Rule
			if k.Shadow {
				name += " (shadow)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, k.Key, n, human(&k.First), human(&k.Last))
		}
		tw.Flush()
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

// widthName names a bucket width: "second", "minute", "5 minutes", "hour",
// "6 hours", "day", "week".
func widthName(sec float64) string {
	d := time.Duration(sec * float64(time.Second))
	one := map[time.Duration]string{time.Second: "second", time.Minute: "minute", time.Hour: "hour", 24 * time.Hour: "day", 7 * 24 * time.Hour: "week"}
	if n, ok := one[d]; ok {
		return n
	}
	switch {
	case d >= time.Hour:
		return fmt.Sprintf("%d hours", d/time.Hour)
	case d >= time.Minute:
		return fmt.Sprintf("%d minutes", d/time.Minute)
	}
	return fmt.Sprintf("%d seconds", d/time.Second)
}

// Chart draws the refusals of every rule that refused over the replay's
// time (per bucket of the timeline) to path, SVG or PNG by its
// extension.
func (rep *Report) Chart(path string) error {
	if err := chart.CheckPath(path); err != nil {
		return err
	}
	tl := rep.Timeline
	if tl == nil || len(tl.Requests) == 0 {
		return fmt.Errorf("chart %q: nothing was replayed", path)
	}
	hours := float64(len(tl.Requests)) * tl.Width / 3600
	unit, scale := "hours", 3600.0
	if hours < 2 {
		unit, scale = "minutes", 60
	}
	if hours > 72 {
		unit, scale = "days", 86400
	}
	var series []chart.Series
	for i, r := range rep.Rules {
		if r.Refused+r.WouldRefuse == 0 {
			continue
		}
		name := r.Name
		if r.Shadow {
			name += " (shadow)"
		}
		s := chart.Series{Name: name, Step: true}
		for b, n := range tl.Refused[i] {
			s.X = append(s.X, float64(b)*tl.Width/scale)
			s.Y = append(s.Y, float64(n))
		}
		s.X = append(s.X, float64(len(tl.Requests))*tl.Width/scale)
		s.Y = append(s.Y, s.Y[len(s.Y)-1])
		series = append(series, s)
	}
	if len(series) == 0 {
		series = append(series, chart.Series{Name: "no refusals", X: []float64{0, float64(len(tl.Requests)) * tl.Width / scale}, Y: []float64{0, 0}})
	}
	title := fmt.Sprintf("Refusals per %s by rule (portero replay)", widthName(tl.Width))
	return chart.Lines(path, title, unit+" since "+tl.Start.UTC().Format("2006-01-02 15:04 UTC"), "refusals", series)
}
