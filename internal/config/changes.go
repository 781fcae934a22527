package config

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/portero-rl/portero/policy"
)

// RuleChanges is what one configuration does to another's rules, by name:
// the reload log and `config validate --against` say it, so that a file
// cut short (a writer that paused mid-file, a truncated copy) shows at once
// as rules removed.
type RuleChanges struct {
	// Added and Removed name the rules only one side has; Changed those
	// both have with another definition (match, key, algorithm, limit,
	// cost, mode, responses, reserve, budget or concurrency).
	Added, Removed, Changed []string
}

// CompareRules returns the changes from old's rules to new's, each list in
// rule order.
func CompareRules(old, new *Config) RuleChanges {
	var ch RuleChanges
	before := map[string]*policy.Rule{}
	for _, r := range old.Policy.Rules() {
		before[r.Name] = r
	}
	for _, r := range new.Policy.Rules() {
		o, ok := before[r.Name]
		switch {
		case !ok:
			ch.Added = append(ch.Added, r.Name)
		case !reflect.DeepEqual(definition(o), definition(r)):
			ch.Changed = append(ch.Changed, r.Name)
		}
		delete(before, r.Name)
	}
	for _, r := range old.Policy.Rules() {
		if _, gone := before[r.Name]; gone {
			ch.Removed = append(ch.Removed, r.Name)
		}
	}
	return ch
}

// definition is what a rule says, without what policy.New derives from it.
func definition(r *policy.Rule) any {
	return []any{r.Match, r.Key, r.Algorithm, r.Limit, r.Cost, r.Mode, r.Responses, r.Reserve, r.Budget, r.Concurrency}
}

// maxNamed bounds the names String lists per kind of change.
const maxNamed = 5

// String says the changes as "1 added (b), 2 removed (c, d), 0 changed".
func (ch RuleChanges) String() string {
	part := func(n []string, what string) string {
		s := fmt.Sprintf("%d %s", len(n), what)
		if len(n) == 0 {
			return s
		}
		shown := n[:min(len(n), maxNamed)]
		more := ""
		if len(n) > maxNamed {
			more = fmt.Sprintf(", and %d more", len(n)-maxNamed)
		}
		return s + " (" + strings.Join(shown, ", ") + more + ")"
	}
	return part(ch.Added, "added") + ", " + part(ch.Removed, "removed") + ", " + part(ch.Changed, "changed")
}
