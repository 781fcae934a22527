// Package tlsreload serves TLS from PEM files that are read again, without
// a restart, when they change on disk (a renewal by cert-manager or
// certbot, a Kubernetes secret's symlink swap): the one certificate
// reloader of Portero's listeners.
//
// Each handshake compares the files' content with what they held at the
// last read (a few kilobytes read, against a handshake's public-key
// operations; unlike a modification time, content cannot miss a rewrite).
// New content serves the connections opened from then on; open ones keep
// theirs. Content that does not load (a key of another certificate, a
// half-written file) is logged once and the previous certificates kept
// until the files change again.
package tlsreload

import (
	"bytes"
	"crypto/sha256"
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

	"github.com/portero-rl/portero/internal/logging"
)

// Files are the PEM files of a TLS listener.
type Files struct {
	// CertFile and KeyFile are the server's certificate chain and private
	// key. Setting them turns TLS on.
	CertFile, KeyFile string
	// ClientCAFile turns client-certificate authentication (mTLS) on: every
	// client must present a certificate one of these CAs signed, or the
	// handshake fails.
	ClientCAFile string
	// ClientSANs, with ClientCAFile, narrow the clients admitted to those
	// whose certificate carries one of these subject alternative names,
	// exactly: a DNS name or a URI (a SPIFFE ID). Empty: any certificate
	// the CAs signed.
	ClientSANs []string
	// ClientSANHostname matches ClientSANs as host names instead, as
	// crypto/x509's VerifyHostname does (and envoyproxy/ratelimit's
	// GRPC_CLIENT_TLS_SAN): a certificate for *.ingress.svc is admitted
	// for envoy.ingress.svc, case does not matter, an IP address matches
	// an IP SAN.
	ClientSANHostname bool
}

// Enabled reports whether any field is set, that is whether TLS is asked
// for (Validate then says whether it is asked for completely).
func (f Files) Enabled() bool {
	return f.CertFile != "" || f.KeyFile != "" || f.ClientCAFile != "" || len(f.ClientSANs) > 0
}

// Fields name the files in errors (FileError.Field), as the configuration
// spells them.
const (
	FieldCert     = "cert_file"
	FieldKey      = "key_file"
	FieldClientCA = "client_ca"
)

// Validate checks that the fields go together: a certificate and its key,
// client SANs only with a client CA. It reads no file. The error is a
// *FileError naming the field that is missing.
func (f Files) Validate() error {
	switch {
	case !f.Enabled():
		return nil
	case f.CertFile == "":
		return &FileError{Field: FieldCert, Err: errors.New("required with TLS: the certificate chain, PEM")}
	case f.KeyFile == "":
		return &FileError{Field: FieldKey, Err: errors.New("required with TLS: the certificate's private key, PEM")}
	case len(f.ClientSANs) > 0 && f.ClientCAFile == "":
		return &FileError{Field: FieldClientCA, Err: errors.New("required with client SANs: the CAs that sign client certificates")}
	}
	for _, san := range f.ClientSANs {
		if strings.TrimSpace(san) == "" {
			return &FileError{Field: "client_sans", Err: errors.New("an empty name")}
		}
	}
	return nil
}

// FileError reports a TLS file that is missing, unreadable or wrong.
type FileError struct {
	// Field is FieldCert, FieldKey or FieldClientCA.
	Field string
	// Path is the file; empty when the field was not given.
	Path string
	Err  error
}

func (e *FileError) Error() string {
	if e.Path == "" {
		return e.Err.Error()
	}
	return e.Path + ": " + e.Err.Error()
}

func (e *FileError) Unwrap() error { return e.Err }

// MaxFileSize bounds one TLS file: certificates and keys are kilobytes,
// and every handshake reads them.
const MaxFileSize = 1 << 20

// readFile reads a TLS file of at most MaxFileSize bytes, following
// symlinks.
func readFile(field, path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &FileError{Field: field, Path: path, Err: unwrapPath(err)}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, &FileError{Field: field, Path: path, Err: unwrapPath(err)}
	}
	if len(data) > MaxFileSize {
		return nil, &FileError{Field: field, Path: path, Err: fmt.Errorf("larger than %d bytes: not a PEM file", MaxFileSize)}
	}
	return data, nil
}

// unwrapPath drops the *fs.PathError's own copy of the path, which
// FileError already carries.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Load reads the files once and returns the server configuration they
// make (TLS 1.2 at least; with a client CA, client certificates required
// and verified): what a configuration check runs to report a bad file
// before anything listens.
func Load(f Files) (*tls.Config, error) {
	r, err := New(f, nil)
	if err != nil {
		return nil, err
	}
	return r.cur.Load(), nil
}

// content is what a listener's files held at one read.
type content struct{ cert, key, ca []byte }

func read(f Files) (p content, err error) {
	if p.cert, err = readFile(FieldCert, f.CertFile); err != nil {
		return p, err
	}
	if p.key, err = readFile(FieldKey, f.KeyFile); err != nil {
		return p, err
	}
	if f.ClientCAFile != "" {
		p.ca, err = readFile(FieldClientCA, f.ClientCAFile)
	}
	return p, err
}

// sum is the fingerprint that tells one content from another.
func (p content) sum() [sha256.Size]byte {
	h := sha256.New()
	for _, b := range [][]byte{p.cert, p.key, p.ca} {
		fmt.Fprintf(h, "%d\n", len(b))
		h.Write(b)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// config builds the server configuration of p; refused, when not nil, is
// told of each client certificate the SAN check refuses.
func (p content) config(f Files, refused func(error)) (*tls.Config, error) {
	cert, err := tls.X509KeyPair(p.cert, p.key)
	if err != nil {
		// X509KeyPair cannot tell which of the two is at fault when they do
		// not match; it can when one holds no PEM block of its kind.
		field, path, other := FieldKey, f.KeyFile, "certificate "+f.CertFile
		if !bytes.Contains(p.cert, []byte("-----BEGIN CERTIFICATE")) {
			field, path, other = FieldCert, f.CertFile, "key "+f.KeyFile
		}
		return nil, &FileError{Field: field, Path: path, Err: fmt.Errorf("with %s: %w", other, err)}
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if f.ClientCAFile == "" {
		return cfg, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(p.ca) {
		return nil, &FileError{Field: FieldClientCA, Path: f.ClientCAFile, Err: errors.New("no PEM certificate in it")}
	}
	cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	if len(f.ClientSANs) > 0 {
		sans, hostname := slices.Clone(f.ClientSANs), f.ClientSANHostname
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			err := checkSAN(sans, hostname, cs)
			if err != nil && refused != nil {
				refused(err)
			}
			return err
		}
	}
	return cfg, nil
}

// checkSAN admits a verified client certificate that carries one of sans,
// or with hostname one valid for one of them as a host name.
func checkSAN(sans []string, hostname bool, cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: no client certificate")
	}
	leaf := cs.PeerCertificates[0]
	if hostname {
		for _, n := range sans {
			if leaf.VerifyHostname(n) == nil {
				return nil
			}
		}
		return fmt.Errorf("tls: client certificate %q (SANs %v) is valid for none of the host names %v", leaf.Subject.CommonName, leaf.DNSNames, sans)
	}
	for _, n := range leaf.DNSNames {
		if slices.Contains(sans, n) {
			return nil
		}
	}
	for _, u := range leaf.URIs {
		if slices.Contains(sans, u.String()) {
			return nil
		}
	}
	have := slices.Clone(leaf.DNSNames)
	for _, u := range leaf.URIs {
		have = append(have, u.String())
	}
	return fmt.Errorf("tls: client certificate %q has SANs %v, none of the admitted %v", leaf.Subject.CommonName, have, sans)
}

// Reloader holds the configuration built from a set of files and builds
// it again when they change. Safe for concurrent use.
type Reloader struct {
	files Files
	log   *slog.Logger

	mu      sync.Mutex
	stamp   [sha256.Size]byte // the content at the last attempt, loaded or not
	lastErr string            // the last read error logged
	cur     atomic.Pointer[tls.Config]

	refusals *logging.Sampler // of the SAN refusals' log lines
}

// New loads the files (an error, a *FileError, when they do not load) and
// returns their reloader; log receives the reloads and the changes that
// did not load (nil: slog.Default()).
func New(f Files, log *slog.Logger) (*Reloader, error) {
	if log == nil {
		log = slog.Default()
	}
	r := &Reloader{files: f, log: log, refusals: logging.NewSampler(1)}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if !f.Enabled() {
		return nil, errors.New("tlsreload: no certificate configured")
	}
	p, err := read(f)
	if err != nil {
		return nil, err
	}
	cfg, err := p.config(f, r.refused)
	if err != nil {
		return nil, err
	}
	r.stamp = p.sum()
	r.cur.Store(cfg)
	return r, nil
}

// Optional is New for a listener whose TLS is optional: nil, and no
// error, when f asks for no TLS.
func Optional(f Files, log *slog.Logger) (*Reloader, error) {
	if !f.Enabled() {
		return nil, nil
	}
	return New(f, log)
}

// ClientAuth reports whether r requires client certificates.
func (r *Reloader) ClientAuth() bool { return r.files.ClientCAFile != "" }

// ServerConfig returns the configuration to serve with: each handshake
// gets the files' current configuration, offering nextProtos in ALPN
// (such as "h2", "http/1.1" for an HTTP server).
func (r *Reloader) ServerConfig(nextProtos ...string) *tls.Config {
	protos := slices.Clone(nextProtos)
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: protos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cfg := r.current()
			if len(protos) == 0 {
				return cfg, nil
			}
			c := cfg.Clone()
			c.NextProtos = protos
			return c, nil
		},
	}
}

// current returns the configuration of the files' current content,
// loading it when it changed.
func (r *Reloader) current() *tls.Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, err := read(r.files)
	if err != nil {
		// A file missing for a moment (a swap in progress) or for good:
		// logged once per distinct error, not at every handshake.
		if msg := err.Error(); msg != r.lastErr {
			r.lastErr = msg
			r.log.Error("TLS files cannot be read; serving the previous certificate", "cert_file", r.files.CertFile, "err", err)
		}
		return r.cur.Load()
	}
	sum := p.sum()
	if sum == r.stamp {
		return r.cur.Load()
	}
	// One attempt per content: a bad file is logged once, and tried again
	// when it changes again.
	r.stamp, r.lastErr = sum, ""
	cfg, err := p.config(r.files, r.refused)
	if err != nil {
		r.log.Error("TLS files changed but do not load; serving the previous certificate", "cert_file", r.files.CertFile, "err", err)
		return r.cur.Load()
	}
	r.cur.Store(cfg)
	r.log.Info("TLS files reloaded", "cert_file", r.files.CertFile)
	return cfg
}

// refused logs a client certificate the SAN check refused, one line a
// second at most: a misconfigured fleet retrying must not flood the log.
func (r *Reloader) refused(err error) {
	if ok, n := r.refusals.Allow("", time.Now()); ok {
		r.log.Warn("TLS client refused", "err", err, "suppressed", n)
	}
}
