package httplimit

import "github.com/portero-rl/portero/clientip"

// ClientIP says how the middleware finds the client's address: see package
// clientip, where it lives so that every HTTP door shares it.
type ClientIP = clientip.Config
