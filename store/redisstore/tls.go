package redisstore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/redis/rueidis"
)

// TLSFiles are the files of a TLS connection to Redis beyond the system's
// CAs, as managed Redis services ask for them and envoyproxy/ratelimit's
// REDIS_TLS_* settings name them.
type TLSFiles struct {
	// CAFile holds PEM CA certificates trusted beside the system's: a
	// private CA that signed Redis's certificate (REDIS_TLS_CACERT).
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// a Redis that authenticates its clients by certificate
	// (REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY).
	CertFile, KeyFile string
	// SkipHostnameVerification checks that a trusted CA signed Redis's
	// certificate but not that it names the host dialled
	// (REDIS_TLS_SKIP_HOSTNAME_VERIFICATION): for a Redis reached by an
	// address its certificate does not carry.
	SkipHostnameVerification bool
}

// Config reads the files into a TLS configuration for Config.TLS. An
// error names the file.
func (f TLSFiles) Config() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	switch {
	case f.CertFile != "" && f.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("redisstore: client certificate %s, key %s: %w", f.CertFile, f.KeyFile, err)
		}
		c.Certificates = []tls.Certificate{cert}
	case f.CertFile != "" || f.KeyFile != "":
		return nil, errors.New("redisstore: a client certificate needs both its certificate and its key file")
	}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("redisstore: CA file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redisstore: CA file %s: no PEM certificate in it", f.CAFile)
		}
		c.RootCAs = pool
	}
	if f.SkipHostnameVerification {
		// The chain is still verified, against the same roots, only
		// without a name (crypto/tls's example of a custom verification).
		roots := c.RootCAs
		c.InsecureSkipVerify = true
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			certs := cs.PeerCertificates
			if len(certs) == 0 {
				return errors.New("redisstore: Redis sent no certificate")
			}
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
			for _, cert := range certs[1:] {
				opts.Intermediates.AddCert(cert)
			}
			_, err := certs[0].Verify(opts)
			return err
		}
	}
	return c, nil
}

// useTLS puts cfg in place of the TLS configuration opt has from its URL
// (rediss://, rediss-sentinel://: the sentinels too), keeping the server
// name the URL gave; with addresses instead of a URL it turns TLS on.
func useTLS(opt *rueidis.ClientOption, cfg *tls.Config, fromURL bool) error {
	if fromURL && opt.TLSConfig == nil {
		return errors.New("TLS settings apply to rediss:// and rediss-sentinel:// URLs")
	}
	c := cfg.Clone()
	if c.ServerName == "" && opt.TLSConfig != nil {
		c.ServerName = opt.TLSConfig.ServerName
	}
	opt.TLSConfig = c
	if opt.Sentinel.TLSConfig != nil || !fromURL && opt.Sentinel.MasterSet != "" {
		opt.Sentinel.TLSConfig = cfg.Clone()
	}
	return nil
}
