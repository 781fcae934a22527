package config

import "fmt"

// Summary describes c in one line, as `portero serve` prints it at start
// and `portero config validate` after "ok": "3 rules, 1 route, memory store".
func (c *Config) Summary() string {
	return fmt.Sprintf("%s, %s, %s store", count(len(c.Policy.Rules()), "rule"), count(len(c.Routes), "route"), c.StoreType)
}

// count is n and name, plural unless n is 1.
func count(n int, name string) string {
	if n == 1 {
		return "1 " + name
	}
	return fmt.Sprintf("%d %ss", n, name)
}
