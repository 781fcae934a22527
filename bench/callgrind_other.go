//go:build !amd64

package bench

// callgrindToggle does nothing off amd64 (see callgrind_amd64.go).
func callgrindToggle() {}
