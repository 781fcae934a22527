package main

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portero-rl/portero/internal/redistest"
	"github.com/portero-rl/portero/internal/tlstest"
)

// startTLSRedis starts a real redis-server that also serves TLS with
// serverCert (its plain port stays, for the test's own look at the keys),
// requiring client certificates that clientCA signed.
func startTLSRedis(t *testing.T, serverCert tlstest.Issued, clientCA *tlstest.CA) (srv *redistest.Server, tlsPort string) {
	t.Helper()
	dir := t.TempDir()
	cert, key := serverCert.Write(t, dir, "redis")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, tlsPort, _ = net.SplitHostPort(l.Addr().String())
	l.Close()
	srv = redistest.Start(t, "--tls-port", tlsPort, "--tls-cert-file", cert, "--tls-key-file", key,
		"--tls-ca-cert-file", clientCA.WriteCA(t, dir, "clients"), "--tls-auth-clients", "yes")
	return srv, tlsPort
}

// TestRatelimitRedisTLS: envoyproxy/ratelimit's Redis TLS settings, as
// managed Redis services need them, on a real redis-server serving TLS
// that requires client certificates: a private CA (REDIS_TLS_CACERT) and a
// client certificate (REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY) count
// in it; without the certificate Redis refuses the client and
// /healthcheck says so; a certificate that does not name the host dialled
// is refused unless REDIS_TLS_SKIP_HOSTNAME_VERIFICATION, and one from
// another CA even then.
func TestRatelimitRedisTLS(t *testing.T) {
	ca, clients, other := tlstest.NewCA(t, "redis CA"), tlstest.NewCA(t, "client CA"), tlstest.NewCA(t, "other CA")
	dir := t.TempDir()
	caFile := ca.WriteCA(t, dir, "ca")
	certFile, keyFile := clients.Client(t, "ratelimit").Write(t, dir, "client")
	for _, tt := range []struct {
		name   string
		server tlstest.Issued
		env    []string
		counts bool
	}{
		{"private CA and client certificate", ca.Server(t), []string{"REDIS_TLS_CLIENT_CERT", certFile, "REDIS_TLS_CLIENT_KEY", keyFile}, true},
		{"no client certificate", ca.Server(t), nil, false},
		{"a certificate for another name", ca.ServerNamed(t, "redis.internal"), []string{"REDIS_TLS_CLIENT_CERT", certFile, "REDIS_TLS_CLIENT_KEY", keyFile}, false},
		{"another name, hostname not verified", ca.ServerNamed(t, "redis.internal"),
			[]string{"REDIS_TLS_CLIENT_CERT", certFile, "REDIS_TLS_CLIENT_KEY", keyFile, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true"}, true},
		{"another CA, hostname not verified", other.ServerNamed(t, "redis.internal"),
			[]string{"REDIS_TLS_CLIENT_CERT", certFile, "REDIS_TLS_CLIENT_KEY", keyFile, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv, tlsPort := startTLSRedis(t, tt.server, clients)
			env := append([]string{"REDIS_TLS", "true", "REDIS_URL", "localhost:" + tlsPort, "REDIS_TLS_CACERT", caFile}, tt.env...)
			envoyproxyRuntime(t, srv, envoyBasic, env...)
			_, h, _ := startRatelimit(t)
			healthy := false
			for deadline := time.Now().Add(3 * time.Second); !healthy && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				code, _ := getBody(t, "http://"+h+"/healthcheck")
				healthy = code == http.StatusOK
			}
			if healthy != tt.counts {
				t.Fatalf("/healthcheck healthy %v, want %v (Redis reached over TLS)", healthy, tt.counts)
			}
			if !tt.counts {
				return
			}
			body := `{"domain": "basic", "descriptors": [{"entries": [{"key": "key1", "value": "tls"}]}]}`
			r, err := http.Post("http://"+h+"/json", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			r.Body.Close()
			keys, err := redistest.Do(srv.Addr(), "KEYS", "basic_key1_tls_*")
			if r.StatusCode != 200 || err != nil || len(strings.Fields(keys)) != 1 {
				t.Fatalf("/json = %d; keys in Redis %q, %v: want one counter", r.StatusCode, keys, err)
			}
			if v, err := redistest.Do(srv.Addr(), "GET", strings.Fields(keys)[0]); err != nil || v != strconv.Itoa(1) {
				t.Errorf("counter = %q, %v; want 1", v, err)
			}
		})
	}
}

// TestRatelimitPerSecondRedis: with REDIS_PERSECOND the counters of
// per-second limits go to the Redis at REDIS_PERSECOND_URL, the others to
// REDIS_URL's, as envoyproxy/ratelimit routes them.
func TestRatelimitPerSecondRedis(t *testing.T) {
	main, second := redistest.Start(t), redistest.Start(t)
	file := envoyBasic + "  - key: slow\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"
	envoyproxyRuntime(t, main, file, "REDIS_PERSECOND", "true", "REDIS_PERSECOND_SOCKET_TYPE", "tcp", "REDIS_PERSECOND_URL", second.Addr())
	_, h, _ := startRatelimit(t)
	body := `{"domain": "basic", "descriptors": [{"entries": [{"key": "key1", "value": "a"}]}, {"entries": [{"key": "slow", "value": "a"}]}]}`
	r, err := http.Post("http://"+h+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	for _, c := range []struct {
		srv        *redistest.Server
		has, hasnt string
	}{{second, "basic_key1_a_*", "basic_slow_a_*"}, {main, "basic_slow_a_*", "basic_key1_a_*"}} {
		has, err1 := redistest.Do(c.srv.Addr(), "KEYS", c.has)
		hasnt, err2 := redistest.Do(c.srv.Addr(), "KEYS", c.hasnt)
		if r.StatusCode != 200 || err1 != nil || err2 != nil || len(strings.Fields(has)) != 1 || hasnt != "" {
			t.Errorf("/json %d; Redis %s: %s = %q, %s = %q; want one, none", r.StatusCode, c.srv.Addr(), c.has, has, c.hasnt, hasnt)
		}
	}
}

// TestRatelimitRedisSentinelTLS: REDIS_TYPE=sentinel with REDIS_TLS and a
// private CA and client certificate, on a real sentinel and master that
// both serve TLS: the sentinel is asked over TLS where the master is, and
// the master is reached over TLS and counts. A sentinel that only speaks
// TLS refuses a plain client, so the count proves both connections used
// it.
func TestRatelimitRedisSentinelTLS(t *testing.T) {
	ca, clients := tlstest.NewCA(t, "redis CA"), tlstest.NewCA(t, "client CA")
	dir := t.TempDir()
	caFile := ca.WriteCA(t, dir, "ca")
	certFile, keyFile := clients.Client(t, "ratelimit").Write(t, dir, "client")
	master, masterTLS := startTLSRedis(t, ca.Server(t), clients)
	port, err := strconv.Atoi(masterTLS)
	if err != nil {
		t.Fatal(err)
	}
	// The sentinel watches the master on its TLS port, with a client
	// certificate of its own, and serves its clients over TLS only on
	// sentinelTLS (its plain port is redistest's, for PING); its CA file
	// trusts the master's CA and the clients'.
	sCert, sKey := ca.Server(t).Write(t, dir, "sentinel")
	sClientCert, sClientKey := clients.Client(t, "sentinel").Write(t, dir, "sentinel-client")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, sentinelTLS, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	sentinel := redistest.StartSentinelFor(t, port, "--tls-port", sentinelTLS, "--tls-cert-file", sCert, "--tls-key-file", sKey,
		"--tls-client-cert-file", sClientCert, "--tls-client-key-file", sClientKey,
		"--tls-ca-cert-file", bothCAs(t, dir, ca, clients), "--tls-auth-clients", "yes", "--tls-replication", "yes")
	waitSentinelLinked(t, sentinel.Addr())
	envoyproxyRuntime(t, master, envoyBasic, "REDIS_TYPE", "sentinel", "REDIS_URL", "mymaster,localhost:"+sentinelTLS,
		"REDIS_TLS", "true", "REDIS_TLS_CACERT", caFile, "REDIS_TLS_CLIENT_CERT", certFile, "REDIS_TLS_CLIENT_KEY", keyFile)
	_, h, _ := startRatelimit(t)
	body := `{"domain": "basic", "descriptors": [{"entries": [{"key": "key1", "value": "sentinel"}]}]}`
	var code int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		r, err := http.Post("http://"+h+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if code = r.StatusCode; code == http.StatusOK {
			break
		}
	}
	keys, err := redistest.Do(master.Addr(), "KEYS", "basic_key1_sentinel_*")
	if code != http.StatusOK || err != nil || len(strings.Fields(keys)) != 1 {
		t.Fatalf("/json = %d; keys in the master %q, %v: want one counter", code, keys, err)
	}
}

// bothCAs writes one PEM file that trusts a's and b's certificates.
func bothCAs(t *testing.T, dir string, a, b *tlstest.CA) string {
	t.Helper()
	var pem []byte
	for i, ca := range []*tlstest.CA{a, b} {
		data, err := os.ReadFile(ca.WriteCA(t, dir, "ca-part"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		pem = append(pem, data...)
	}
	path := filepath.Join(dir, "both-cas.pem")
	tlstest.WriteFile(t, path, pem)
	return path
}

// waitSentinelLinked waits until the sentinel at addr holds a working
// link to its master (its flags say "master" alone, not disconnected).
func waitSentinelLinked(t *testing.T, addr string) {
	t.Helper()
	var reply string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var err error
		if reply, err = redistest.Do(addr, "SENTINEL", "MASTER", "mymaster"); err == nil && strings.Contains(reply, "\nflags\nmaster\n") {
			return
		}
	}
	t.Fatalf("the sentinel has no link to its master over TLS: %q", reply)
}
