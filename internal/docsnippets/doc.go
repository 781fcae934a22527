// Package docsnippets holds the test that keeps the documentation's Go
// programs true: every ```go block that starts with "package main" in
// README.md and docs/migrating.md is built against this module and run —
// the README's servers until they answer a real client (the Redis one
// against a real redis-server), the migration guide's programs until they
// exit, each checking its own answers. It has no code of its own.
package docsnippets
