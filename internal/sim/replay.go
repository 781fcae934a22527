package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
)

// Result is one replayed request and the decision it got.
type Result struct {
	Request
	portero.Decision
	// Outcome is the engine's outcome: allowed, near-limit, refused, or
	// can-never-pass for a cost above what the rule can ever admit at once
	// (refused, with no retry time).
	Outcome engine.Outcome
}

// NeverPasses reports whether the request's cost is more than the rule can
// ever admit at once.
func (r Result) NeverPasses() bool { return r.Outcome == engine.CanNeverPass }

// Departure reports when a request admitted by a queue (leaky-queue) leaves
// it, as trace time: its arrival plus Decision.Delay. ok is false for a
// refused (dropped) request.
func (r Result) Departure() (at time.Duration, ok bool) {
	if !r.Allowed {
		return 0, false
	}
	return r.At + r.Delay, true
}

// Replay runs every request of trace through store under rule, in order,
// each at Epoch plus its time, decided by package engine as the middleware,
// the gateway and the rate limit service decide, and returns one result per
// request. A request whose
// cost the rule can never admit is refused and says so (Outcome
// CanNeverPass); the replay goes on. A store failure is an error.
func Replay(ctx context.Context, store portero.Store, rule portero.Rule, trace []Request) ([]Result, error) {
	er, err := engine.NewRule(engine.Rule{Rule: rule})
	if err != nil {
		return nil, err
	}
	e, err := engine.New(engine.Options{Store: store, OnError: portero.FailError})
	if err != nil {
		return nil, err
	}
	out := make([]Result, 0, len(trace))
	hit := make([]engine.Hit, 1)
	var v engine.Verdict
	for _, r := range trace {
		hit[0] = engine.Hit{Rule: er, Key: r.Key, Cost: r.Cost}
		if err := e.Decide(ctx, Epoch.Add(r.At), hit, &v); err != nil {
			return nil, fmt.Errorf("request at %s for key %q: %w", FormatSeconds(r.At), r.Key, err)
		}
		res := &v.Results[0]
		out = append(out, Result{Request: r, Decision: res.Decision, Outcome: res.Outcome})
	}
	return out, nil
}

// never is what the retry_after column says for a request that can never
// pass (null in JSON).
const never = "never"

// WriteResults writes results in format ("csv", "json" or "table"): one row
// per request with the columns time, key, cost, allowed, remaining,
// retry_after ("never", null in JSON, for a request whose cost the rule can
// never admit) and, when departures is true, departure (empty in CSV, null
// in JSON, "-" in the table for a dropped request). Times and durations are
// decimal seconds, written exactly (FormatSeconds); JSON writes them as
// numbers.
func WriteResults(w io.Writer, format string, results []Result, departures bool) error {
	t := Table{Header: []string{"time", "key", "cost", "allowed", "remaining", "retry_after"}}
	if departures {
		t.Header = append(t.Header, "departure")
	}
	var values [][]string // the cells as JSON values
	for _, r := range results {
		retry := FormatSeconds(r.RetryAfter)
		if r.NeverPasses() {
			retry = never
		}
		row := []string{FormatSeconds(r.At), r.Key, strconv.FormatInt(r.Cost, 10), strconv.FormatBool(r.Allowed), strconv.FormatInt(r.Remaining, 10), retry}
		key, _ := json.Marshal(r.Key)
		v := []string{row[0], string(key), row[2], row[3], row[4], orNull(retry, never)}
		if departures {
			at, ok := r.Departure()
			dep, cell := "", ""
			if ok {
				dep = FormatSeconds(at)
				cell = dep
			} else if format == "table" {
				cell = "-"
			}
			row, v = append(row, cell), append(v, orNull(dep, ""))
		}
		t.Rows, values = append(t.Rows, row), append(values, v)
	}
	if format == "json" {
		return writeObjects(w, t.Header, values)
	}
	return t.Write(w, format)
}

// orNull is s as a JSON value, or null when it is none.
func orNull(s, none string) string {
	if s == none {
		return "null"
	}
	return s
}
