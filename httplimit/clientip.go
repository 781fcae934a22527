package httplimit

import (
	"net/netip"

	"github.com/portero-rl/portero/clientip"
)

// ClientIP says how the middleware finds the client's address: see package
// clientip, where it lives so that every HTTP door shares it.
type ClientIP = clientip.Config

// ValidHeaderName is clientip.ValidHeaderName.
func ValidHeaderName(s string) bool { return clientip.ValidHeaderName(s) }

// ParsePrefixes is clientip.ParsePrefixes.
func ParsePrefixes(list []string) ([]netip.Prefix, error) { return clientip.ParsePrefixes(list) }
