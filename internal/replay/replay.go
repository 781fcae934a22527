package replay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strconv"
	"time"
)

// RuleInfo describes one rule of the configuration replayed.
type RuleInfo struct {
	Name   string `json:"name"`
	Key    string `json:"key"`
	Limit  string `json:"limit"`
	Shadow bool   `json:"shadow,omitempty"`
}

// Outcome is what one rule did with one request, by the engine's names.
type Outcome string

// The outcomes a Decider reports (the engine's names).
const (
	Allowed       Outcome = "allowed"
	NearLimit     Outcome = "near-limit"
	Refused       Outcome = "refused"
	ShadowRefused Outcome = "shadow-refused"
	NotCounted    Outcome = "not-counted"
	CheckOnly     Outcome = "check-only"
	CanNeverPass  Outcome = "can-never-pass"
	BadCost       Outcome = "bad-cost" // a cost that cannot be read: 400 or 411
)

// RuleResult is one rule's part in a decision.
type RuleResult struct {
	Rule    int // the index in the Decider's Rules
	Key     string
	Outcome Outcome
	Shadow  bool
}

// Decision is what serve would have done with one request.
type Decision struct {
	// Status is what serve would answer (200 for a request passed on).
	Status int
	Client netip.Addr // the zero Addr when none
	// Rule is the index of the rule that decided (refusing, or closest to
	// its limit), -1 for none.
	Rule    int
	Results []RuleResult // one per rule that applied
	// Decision names what serve does: allowed, refused, can-never-pass,
	// unavailable, bad-cost, no-route (404), no-rule, forbidden (403: API
	// key or plan), limits (the limits endpoint) or probe.
	Decision string
	// Unsettled reports rules counted after the response that the log
	// cannot settle (no response recorded, or Portero's own): their
	// reservations stand.
	Unsettled bool
	// Detail says why a request was refused without any rule counting it.
	Detail string
}

// A Decider decides requests as `portero serve` would, at the instant it is
// given. Decisions are valid until the next call.
type Decider interface {
	Rules() []RuleInfo
	Decide(now time.Time, r *Request) (*Decision, error)
}

// Options configure Replay.
type Options struct {
	Top int // how many refused keys the report lists; 0 means 10
	// Decisions, when not nil, receives one CSV row per request:
	// line,time,client,method,path,status,rule,decision.
	Decisions     io.Writer
	MultipleFiles bool // the decisions' line column is FILE:LINE
	MaxMalformed  int  // how many malformed lines the report lists; 0 means 20
	// Tick, when not nil, is called whenever the virtual clock enters a
	// new minute (to sweep the memory store's expired keys).
	Tick func(now time.Time)
}

// Report is what a replay found.
type Report struct {
	Files     []string  `json:"files"`
	Requests  int64     `json:"requests"`
	First     time.Time `json:"first"`
	Last      time.Time `json:"last"`
	Malformed int64     `json:"malformed"`
	Examples  []string  `json:"malformed_lines,omitempty"`
	Dropped   int64     `json:"dropped_by_log,omitempty"`
	Late      int64     `json:"late,omitempty"`
	// Unsettled counts the Decision.Unsettled requests.
	Unsettled int64      `json:"unsettled,omitempty"`
	Statuses  []Count    `json:"statuses"`
	Rules     []RuleStat `json:"rules"`
	TopKeys   []KeyStat  `json:"top_refused_keys"`
	// TopKeysError bounds the overcount of any listed key (0: exact).
	TopKeysError int64     `json:"top_refused_keys_max_error"`
	Timeline     *Timeline `json:"timeline"`
}

// Count is a status and how many requests got it.
type Count struct {
	Status int   `json:"status"`
	N      int64 `json:"requests"`
}

// RuleStat is what one rule did over the replay.
type RuleStat struct {
	RuleInfo
	Applied      int64      `json:"applied"`
	Allowed      int64      `json:"allowed"`
	Refused      int64      `json:"refused"`
	WouldRefuse  int64      `json:"shadow_refused"`
	CanNeverPass int64      `json:"can_never_pass"`
	BadCost      int64      `json:"bad_cost,omitempty"`
	NotCounted   int64      `json:"not_counted"`
	FirstRefusal *time.Time `json:"first_refusal,omitempty"`
	LastRefusal  *time.Time `json:"last_refusal,omitempty"`
	// Peak is the timeline's bucket with the most refusals, PeakN their number.
	Peak  *time.Time `json:"peak,omitempty"`
	PeakN int64      `json:"peak_refusals,omitempty"`
}

// KeyStat is one key among those refused most.
type KeyStat struct {
	Rule    string    `json:"rule"`
	Key     string    `json:"key"`
	Shadow  bool      `json:"shadow,omitempty"`
	Refused int64     `json:"refused"`
	Error   int64     `json:"max_overcount,omitempty"`
	First   time.Time `json:"first"`
	Last    time.Time `json:"last"`
}

// Timeline is refusals over time: Width-wide buckets from Start, each with
// the requests and per rule its refusals.
type Timeline struct {
	Start    time.Time `json:"start"`
	Width    float64   `json:"width_seconds"`
	Requests []int64   `json:"requests"`
	Refused  [][]int64 `json:"refused"` // [rule][bucket]
}

// topCapacity is the number of counters the top refused keys keep: the top
// 10 are exact in all but adversarial logs.
const topCapacity = 4096

// Replay decides every request rd reads, in arrival order, through d on a
// virtual clock, and reports; a malformed line is counted and skipped.
// Memory is bounded by the reorder window, the decider's store, the
// top-keys counters and the timeline.
func Replay(ctx context.Context, rd *Reader, d Decider, o Options) (*Report, error) {
	if o.Top <= 0 {
		o.Top = 10
	}
	if o.MaxMalformed <= 0 {
		o.MaxMalformed = 20
	}
	tl := newTally(d.Rules(), rd)
	var dw *bufio.Writer
	var row []byte
	if o.Decisions != nil {
		dw = bufio.NewWriterSize(o.Decisions, 64<<10)
		dw.WriteString("line,time,client,method,path,status,rule,decision\n")
	}
	var now time.Time
	var minute int64 = -1 << 62
	for n := 0; ; n++ {
		if n&0xffff == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		r, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			le, ok := err.(*LineError) // not errors.As: its target would escape, an allocation a line
			if !ok {
				return nil, err
			}
			tl.skipped(le, o.MaxMalformed)
			continue
		}
		at := r.Time
		if at.Before(now) {
			tl.rep.Late++ // decided when the clock is, which never goes back
			at = now
		}
		now = at
		if m := now.Unix() / 60; m != minute {
			minute = m
			if o.Tick != nil {
				o.Tick(now)
			}
		}
		dec, err := d.Decide(now, r)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", r.File, r.Line, err)
		}
		tl.decided(now, dec)
		if dw != nil {
			row = appendDecision(row[:0], r, dec, tl.rules, o.MultipleFiles, now)
			if _, err := dw.Write(row); err != nil {
				return nil, fmt.Errorf("decisions: %w", err)
			}
		}
	}
	if dw != nil {
		if err := dw.Flush(); err != nil {
			return nil, fmt.Errorf("decisions: %w", err)
		}
	}
	return tl.report(o.Top), nil
}

// tally counts what a replay found as it goes.
type tally struct {
	rules    []RuleInfo
	rep      *Report
	top      *topKeys
	timeline *timeline
	statuses map[int]int64
	// First and last refusal per rule, values: no allocation per line.
	first, last []time.Time
}

func newTally(rules []RuleInfo, rd *Reader) *tally {
	tl := &tally{rules: rules, rep: &Report{Rules: make([]RuleStat, len(rules))}, top: newTopKeys(topCapacity),
		timeline: newTimeline(1 + len(rules)), statuses: map[int]int64{},
		first: make([]time.Time, len(rules)), last: make([]time.Time, len(rules))}
	for i, r := range rules {
		tl.rep.Rules[i].RuleInfo = r
	}
	for _, in := range rd.inputs {
		tl.rep.Files = append(tl.rep.Files, in.name)
	}
	return tl
}

// skipped counts a line that could not be read, listing the first max.
func (tl *tally) skipped(le *LineError, max int) {
	if errors.Is(le, ErrDropped) {
		tl.rep.Dropped++ // not the replay's doing: said apart
	} else {
		tl.rep.Malformed++
	}
	if len(tl.rep.Examples) < max {
		tl.rep.Examples = append(tl.rep.Examples, le.Error())
	}
}

// decided counts one request's decision, made at now.
func (tl *tally) decided(now time.Time, dec *Decision) {
	rep := tl.rep
	if rep.Requests == 0 {
		rep.First = now
	}
	rep.Requests++
	rep.Last = now
	tl.statuses[dec.Status]++
	if dec.Unsettled {
		rep.Unsettled++
	}
	tl.timeline.add(now, 0, 1)
	for _, res := range dec.Results {
		st := &rep.Rules[res.Rule]
		st.Applied++
		refusal := true
		switch res.Outcome {
		case Allowed, NearLimit, CheckOnly:
			st.Allowed++
			refusal = false
		case Refused:
			st.Refused++
		case ShadowRefused:
			st.WouldRefuse++
		case CanNeverPass:
			if res.Shadow {
				st.WouldRefuse++
			} else {
				st.Refused++
			}
			st.CanNeverPass++
		case NotCounted:
			st.NotCounted++
			refusal = false
		case BadCost:
			st.BadCost++
		default:
			refusal = false
		}
		if refusal {
			if tl.first[res.Rule].IsZero() {
				tl.first[res.Rule] = now
			}
			tl.last[res.Rule] = now
			tl.top.add(res.Rule, res.Key, now)
			tl.timeline.add(now, 1+res.Rule, 1)
		}
	}
}

// report completes the report.
func (tl *tally) report(top int) *Report {
	rep, rules := tl.rep, tl.rules
	for i := range rules {
		if !tl.first[i].IsZero() {
			f, l := tl.first[i], tl.last[i]
			rep.Rules[i].FirstRefusal, rep.Rules[i].LastRefusal = &f, &l
		}
	}
	for s, n := range tl.statuses {
		rep.Statuses = append(rep.Statuses, Count{s, n})
	}
	sort.Slice(rep.Statuses, func(i, j int) bool { return rep.Statuses[i].Status < rep.Statuses[j].Status })
	for _, c := range tl.top.top(top) {
		rep.TopKeys = append(rep.TopKeys, KeyStat{Rule: rules[c.rule].Name, Key: c.key, Shadow: rules[c.rule].Shadow,
			Refused: c.count, Error: c.err, First: c.first, Last: c.last})
	}
	if len(tl.top.byKey) >= tl.top.capacity {
		rep.TopKeysError = tl.top.total / int64(tl.top.capacity)
	}
	t := tl.timeline
	rep.Timeline = &Timeline{Start: t.start, Width: t.width.Seconds(), Requests: make([]int64, len(t.counts)),
		Refused: make([][]int64, len(rules))}
	for i := range rules {
		rep.Timeline.Refused[i] = make([]int64, len(t.counts))
	}
	for b, c := range t.counts {
		rep.Timeline.Requests[b] = c[0]
		for i := range rules {
			n := c[1+i]
			rep.Timeline.Refused[i][b] = n
			if st := &rep.Rules[i]; n > st.PeakN {
				at := t.at(b)
				st.Peak, st.PeakN = &at, n
			}
		}
	}
	return rep
}

// appendDecision appends one CSV row of the decisions file.
func appendDecision(b []byte, r *Request, d *Decision, rules []RuleInfo, multi bool, now time.Time) []byte {
	if multi {
		b = appendCSV(b, r.File)
		b = append(b, ':')
	}
	b = strconv.AppendInt(b, int64(r.Line), 10)
	b = append(b, ',')
	b = now.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, ',')
	if d.Client.IsValid() {
		b = d.Client.AppendTo(b)
	}
	b = append(b, ',')
	b = appendCSV(b, r.Method)
	b = append(b, ',')
	b = appendCSV(b, r.Path)
	b = append(b, ',')
	b = strconv.AppendInt(b, int64(d.Status), 10)
	b = append(b, ',')
	if d.Rule >= 0 {
		b = appendCSV(b, rules[d.Rule].Name)
	}
	b = append(b, ',')
	b = append(b, d.Decision...)
	return append(b, '\n')
}

// appendCSV appends s as a CSV field, quoted when it must be.
func appendCSV(b []byte, s string) []byte {
	quote := false
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == ',' || c == '"' || c == '\n' || c == '\r' {
			quote = true
			break
		}
	}
	if !quote {
		return append(b, s...)
	}
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' {
			b = append(b, '"')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}
