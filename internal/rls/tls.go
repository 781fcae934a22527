package rls

import (
	"errors"
	"strings"

	"github.com/portero-rl/portero/internal/tlsreload"
)

// TLSOptions are the files of the grpc-go transport's TLS: the server's
// certificate chain and key (CertFile, KeyFile; setting them turns TLS
// on), ClientCAFile for mTLS (every client must present a certificate one
// of these CAs signed), and ClientSANs to narrow the clients admitted to
// those whose certificate carries one of these subject alternative names,
// exactly: a DNS name ("envoy.ingress.svc") or a URI
// ("spiffe://cluster.local/ns/ingress/sa/envoy").
//
// They are read at start-up and read again, without a restart, when they
// change on disk, by Portero's one certificate reloader (package
// tlsreload, which the HTTP and admin listeners use too): checked at each
// new connection's handshake, so that a renewal by cert-manager or a
// Kubernetes secret's symlink swap serves the connections opened after
// it while open connections keep theirs. A changed file that does not
// load (a key that does not match, a half-written file) is logged and the
// previous certificates kept; it is tried again once it changes.
type TLSOptions = tlsreload.Files

// validateTLS checks that the TLS options go together, in the words of
// the RLS's options.
func validateTLS(t TLSOptions) error {
	switch {
	case !t.Enabled():
		return nil
	case t.CertFile == "" || t.KeyFile == "":
		return errors.New("rls: TLS needs both a certificate file and a key file")
	case len(t.ClientSANs) > 0 && t.ClientCAFile == "":
		return errors.New("rls: client SANs need a client CA file (mTLS)")
	}
	for _, san := range t.ClientSANs {
		if strings.TrimSpace(san) == "" {
			return errors.New("rls: an empty client SAN")
		}
	}
	return nil
}
