// Package refusal holds the words of a refusal, the same at every door: the
// detail of the HTTP doors' problem bodies (internal/httpanswer) and the
// descriptions of the gRPC door's QuotaFailure violations (grpclimit), so
// that a client told no over HTTP and over gRPC reads the same sentence.
package refusal

import (
	"cmp"
	"fmt"

	"github.com/portero-rl/portero/engine"
)

// RetryPrefix is the sentence of a refusal by r that a retry can cure, up to
// its seconds: "rule "api" allows 5 per 1m0s for this client; retry in ".
func RetryPrefix(r *engine.Rule) string {
	q, w := r.Quota()
	if r.IsConcurrency() {
		if r.Service {
			return fmt.Sprintf("rule %q allows %d requests in flight; retry in ", r.Name, q)
		}
		return fmt.Sprintf("rule %q allows %d concurrent requests for this client; retry in ", r.Name, q)
	}
	if l := r.Limit; l.IsCalendar() {
		// A spent quota says so: going slower does not help, the next
		// period does.
		return fmt.Sprintf("rule %q is a quota of %d per calendar %s (%s) for this client, spent for this %s; retry in ", r.Name, q, l.Period, cmp.Or(l.Zone, "UTC"), l.Period)
	}
	return fmt.Sprintf("rule %q allows %d per %s for this client; retry in ", r.Name, q, w)
}

// Retry is the whole sentence of a refusal by r that a retry can cure in
// seconds (header.RetryAfterSeconds).
func Retry(r *engine.Rule, seconds int64) string {
	return fmt.Sprintf("%s%d s", RetryPrefix(r), seconds)
}

// Never is the sentence of a request that can never pass under res: its cost
// is more than the rule admits at once.
func Never(res *engine.Result) string {
	unit := ""
	if res.Rule.Unit != "" {
		unit = " " + res.Rule.Unit
	}
	return fmt.Sprintf("rule %q admits at most %d%s at once and this request costs %d: it can never pass", res.Rule.Name, res.Rule.MaxCost(), unit, res.Cost)
}
