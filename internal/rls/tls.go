package rls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portero-rl/portero/internal/watch"
)

// TLSOptions are the files of the grpc-go transport's TLS. They are read
// at start-up and read again, without a restart, when they change on disk
// (checked at each new connection's handshake: a renewal by cert-manager,
// a Kubernetes secret's symlink swap): the new certificate serves the
// connections opened after it; open connections keep theirs. A changed
// file that does not load (a key that does not match, a half-written
// file) is logged and the previous certificates kept; it is tried again
// once it changes.
type TLSOptions struct {
	// CertFile and KeyFile are the server's certificate chain and private
	// key, PEM. Setting them turns TLS on.
	CertFile, KeyFile string
	// ClientCAFile, PEM, turns mTLS on: every client must present a
	// certificate one of these CAs signed.
	ClientCAFile string
	// ClientSANs, with ClientCAFile, narrow the clients admitted to those
	// whose certificate carries one of these subject alternative names,
	// exactly: a DNS name ("envoy.ingress.svc") or a URI
	// ("spiffe://cluster.local/ns/ingress/sa/envoy"). Empty: any
	// certificate the CAs signed.
	ClientSANs []string
}

func (t TLSOptions) enabled() bool {
	return t.CertFile != "" || t.KeyFile != "" || t.ClientCAFile != "" || len(t.ClientSANs) > 0
}

func (t TLSOptions) validate() error {
	switch {
	case !t.enabled():
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

// certReloader holds the TLS configuration built from the files and
// builds it again when they change. It is the one place that watches
// them: each handshake compares the files' digests with those of the last
// read. (internal/watch's Watcher, which reloads the RLS configuration,
// would add a goroutine per file and a settling delay; a handshake that
// compares needs neither, serves a renewed certificate from the next
// connection on, and retries a half-written file once it changes again.)
type certReloader struct {
	files TLSOptions
	log   *slog.Logger

	mu    sync.Mutex
	stamp string // the files' content at the last attempt
	cur   atomic.Pointer[tls.Config]

	lastRefusal atomic.Int64 // unix nanoseconds of the last refusal logged
}

func newCertReloader(files TLSOptions, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{files: files, log: log}
	r.stamp = r.fingerprint()
	cfg, err := r.build()
	if err != nil {
		return nil, err
	}
	r.cur.Store(cfg)
	return r, nil
}

// serverConfig is the tls.Config given to grpc-go: every handshake asks
// the reloader for the current one.
func (r *certReloader) serverConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: r.forClient}
}

func (r *certReloader) forClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	r.mu.Lock()
	if st := r.fingerprint(); st != r.stamp {
		r.stamp = st
		if cfg, err := r.build(); err != nil {
			r.log.Error("rls: TLS files changed but do not load; serving the previous certificates", "err", err)
		} else {
			r.cur.Store(cfg)
			r.log.Info("rls: TLS files reloaded", "cert", r.files.CertFile)
		}
	}
	r.mu.Unlock()
	return r.cur.Load(), nil
}

// fingerprint digests every file (internal/watch's Fingerprint, the one
// content digest of the configuration watchers; a few kilobytes, cheaper
// than the handshake that asks, and unlike sizes and times it cannot miss a
// rewrite). A file that cannot be read, or is too large to be one, counts
// as changed.
func (r *certReloader) fingerprint() string {
	var b strings.Builder
	for _, f := range []string{r.files.CertFile, r.files.KeyFile, r.files.ClientCAFile} {
		if f == "" {
			continue
		}
		if fi, err := os.Stat(f); err != nil || fi.Size() > maxPEM {
			fmt.Fprintf(&b, "%s: unreadable or too large: %v\n", f, err)
			continue
		}
		fp, err := watch.Fingerprint(f)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", f, err)
			continue
		}
		fmt.Fprintf(&b, "%s %x\n", f, fp)
	}
	return b.String()
}

// maxPEM bounds a TLS file: certificates and keys are kilobytes, and
// every handshake reads them.
const maxPEM = 1 << 20

// readPEM reads a TLS file of at most maxPEM bytes.
func readPEM(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("rls: TLS file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPEM+1))
	if err != nil {
		return nil, fmt.Errorf("rls: TLS file %s: %w", path, err)
	}
	if len(data) > maxPEM {
		return nil, fmt.Errorf("rls: TLS file %s: larger than %d bytes", path, maxPEM)
	}
	return data, nil
}

// build reads the files into a server configuration.
func (r *certReloader) build() (*tls.Config, error) {
	f := r.files
	certPEM, err := readPEM(f.CertFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readPEM(f.KeyFile)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("rls: TLS certificate %s and key %s: %w", f.CertFile, f.KeyFile, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if f.ClientCAFile == "" {
		return cfg, nil
	}
	pem, err := readPEM(f.ClientCAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("rls: TLS client CA %s: no PEM certificate in it", f.ClientCAFile)
	}
	cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	if len(f.ClientSANs) > 0 {
		sans := slices.Clone(f.ClientSANs)
		cfg.VerifyConnection = func(cs tls.ConnectionState) error { return r.checkSAN(sans, cs) }
	}
	return cfg, nil
}

// checkSAN admits a verified client certificate that carries one of sans.
func (r *certReloader) checkSAN(sans []string, cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("rls: no client certificate")
	}
	leaf := cs.PeerCertificates[0]
	have := slices.Clone(leaf.DNSNames)
	for _, u := range leaf.URIs {
		have = append(have, u.String())
	}
	for _, h := range have {
		if slices.Contains(sans, h) {
			return nil
		}
	}
	err := fmt.Errorf("rls: client certificate %q has SANs %v, none of the allowed %v", leaf.Subject.CommonName, have, sans)
	// One line a second at most: a misconfigured fleet retrying must not
	// flood the log.
	now := time.Now().UnixNano()
	if last := r.lastRefusal.Load(); now-last > int64(time.Second) && r.lastRefusal.CompareAndSwap(last, now) {
		r.log.Warn("rls: TLS client refused", "err", err)
	}
	return err
}
