package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/internal/checkapi"
	"github.com/portero-rl/portero/internal/rlsclient"
)

// errRefused is what `portero check` returns when the server refuses: the
// answer was printed, and the exit status (1) tells scripts.
var errRefused = errors.New("over limit")

// checkFailed gives an error of `portero check` that is neither a refusal
// nor a usage error (no answer came) the exit status 3.
func checkFailed(err error) error {
	var u usageError
	if err == nil || errors.Is(err, errRefused) || errors.As(err, &u) {
		return err
	}
	return codeError{code: 3, err: err}
}

// checkFlags are the options of `portero check`.
type checkFlags struct {
	server, domain string
	descs          []string
	hits           uint32
	json           bool
	timeout        time.Duration
	// TLS to the server: CA file, client certificate and key files, and
	// the name to verify.
	tlsCA, tlsCert, tlsKey, tlsServerName string
}

func newCheckCmd() *cobra.Command {
	var f checkFlags
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Ask a running Portero (or envoyproxy/ratelimit) whether a request may pass",
		Long: `check sends one decision request to a running rate limit service
(portero rls, envoyproxy/ratelimit) and prints the answer. The request counts
like any other (hits_addend 0, written key=value;hits=0, looks without
counting). portero serve is asked what is left with GET /v1/limits instead.

--server is grpc://host:port (Envoy's rate limit service; the default) or
http://host:port (POST /v1/check), or grpcs:// and https:// over TLS, the
server's certificate checked against --tls-ca (the system's CAs without it);
--tls-cert and --tls-key present a client certificate (mTLS). Each
--descriptor is a comma-separated list of key=value entries, with ;hits=N for
its own hits_addend and ;limit=N/unit for a limit override. --json prints
the answer as POST /v1/check's JSON, whichever the server.

The exit status is 0 when allowed, 1 when over the limit, 2 for a usage
error and 3 when no answer came (the server unreachable or failing).`,
		Example: `  portero check --domain edge --descriptor remote_address=10.0.0.1
  portero check --server http://127.0.0.1:8082 --domain edge --descriptor api_key=k1,plan=gold --hits 5
  portero check --domain edge -d remote_address=10.0.0.1 --json
  portero check --server grpcs://rls.internal:8081 --tls-ca ca.pem --tls-cert me.pem --tls-key me-key.pem --domain edge -d remote_address=10.0.0.1`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return checkFailed(doCheck(cmd, f))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.server, "server", "grpc://127.0.0.1:8081", "grpc://host:port or http://host:port")
	fl.StringVar(&f.domain, "domain", "", "rate limit domain")
	fl.StringArrayVarP(&f.descs, "descriptor", "d", nil, "key=value[,key=value...][;hits=N][;limit=N/unit], repeatable")
	fl.Uint32Var(&f.hits, "hits", 0, "the request's hits_addend (0 means 1)")
	fl.BoolVar(&f.json, "json", false, "print the answer as /v1/check's JSON")
	fl.DurationVar(&f.timeout, "timeout", 5*time.Second, "give up after this long")
	fl.StringVar(&f.tlsCA, "tls-ca", "", "PEM CA certificates that sign the server's certificate (grpcs://, https://; default: the system's)")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "PEM client certificate chain, for a server that requires one (with --tls-key)")
	fl.StringVar(&f.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	fl.StringVar(&f.tlsServerName, "tls-server-name", "", "the name the server's certificate must carry (default: --server's host)")
	return cmd
}

// tlsConfig is the client TLS configuration of f's --tls-* flags; an
// unreadable or invalid file is a usage error naming its flag.
func (f *checkFlags) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.tlsServerName}
	if f.tlsCA != "" {
		pem, err := os.ReadFile(f.tlsCA)
		if err != nil {
			return nil, usageErr(fmt.Errorf("--tls-ca: %w", err))
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, usageErr(fmt.Errorf("--tls-ca %s: no PEM certificate in it", f.tlsCA))
		}
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return nil, usageErr(errors.New("--tls-cert and --tls-key go together"))
	}
	if f.tlsCert != "" {
		c, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
		if err != nil {
			return nil, usageErr(fmt.Errorf("--tls-cert %s, --tls-key %s: %w", f.tlsCert, f.tlsKey, err))
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg, nil
}

// usesTLS reports whether any --tls-* flag is set.
func (f *checkFlags) usesTLS() bool {
	return f.tlsCA != "" || f.tlsCert != "" || f.tlsKey != "" || f.tlsServerName != ""
}

// doCheck sends the one check of f and prints the answer.
func doCheck(cmd *cobra.Command, f checkFlags) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	defer cancel()
	secure := strings.HasPrefix(f.server, "grpcs://") || strings.HasPrefix(f.server, "https://")
	if f.usesTLS() && !secure {
		return usageErr(fmt.Errorf("--tls-* flags need a TLS server (--server grpcs://host:port or https://host:port), not %q", f.server))
	}
	var tc *tls.Config
	if secure {
		var err error
		if tc, err = f.tlsConfig(); err != nil {
			return err
		}
	}
	if f.domain == "" || len(f.descs) == 0 {
		return usageErr(errors.New("give --domain and at least one --descriptor"))
	}
	req := &descriptor.Request{Domain: f.domain, Hits: f.hits}
	for _, s := range f.descs {
		d, err := parseDescriptor(s)
		if err != nil {
			return usageErr(fmt.Errorf("--descriptor %q: %w", s, err))
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	switch {
	case strings.HasPrefix(f.server, "http://") || strings.HasPrefix(f.server, "https://"):
		return checkHTTP(ctx, cmd.OutOrStdout(), f.server, tc, toCheckRequest(req), f.json)
	case strings.HasPrefix(f.server, "grpc://"), strings.HasPrefix(f.server, "grpcs://"):
		_, target, _ := strings.Cut(f.server, "://")
		return checkGRPC(ctx, cmd.OutOrStdout(), target, tc, req, f.json)
	}
	return usageErr(fmt.Errorf("--server %q: want grpc://host:port, grpcs://host:port, http://host:port or https://host:port", f.server))
}

func costPtr(h uint32) *int64 {
	if h == 0 {
		return nil
	}
	c := int64(h)
	return &c
}

// parseDescriptor reads "k=v,k2=v2;hits=0;limit=10/minute".
func parseDescriptor(s string) (descriptor.Descriptor, error) {
	var d descriptor.Descriptor
	parts := strings.Split(s, ";")
	for _, e := range strings.Split(parts[0], ",") {
		k, v, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return d, fmt.Errorf("entry %q: want key=value", e)
		}
		d.Entries = append(d.Entries, descriptor.Entry{Key: k, Value: v})
	}
	for _, opt := range parts[1:] {
		name, val, _ := strings.Cut(opt, "=")
		switch name {
		case "hits":
			n, err := strconv.ParseUint(val, 10, 32)
			if err != nil {
				return d, fmt.Errorf("hits %q: want a whole number", val)
			}
			d.Hits = &n
		case "limit":
			rpu, unit, ok := strings.Cut(val, "/")
			n, err := strconv.ParseUint(rpu, 10, 32)
			if !ok || err != nil {
				return d, fmt.Errorf("limit %q: want N/unit such as 10/minute", val)
			}
			u, err := descriptor.ParseUnit(unit)
			if err != nil {
				return d, fmt.Errorf("limit %q: %w", val, err)
			}
			d.Override = &descriptor.Override{RequestsPerUnit: uint32(n), Unit: u}
		default:
			return d, fmt.Errorf("option %q: want hits=N or limit=N/unit", opt)
		}
	}
	return d, nil
}

func toCheckRequest(r *descriptor.Request) *checkapi.CheckRequest {
	out := &checkapi.CheckRequest{Domain: r.Domain, Cost: costPtr(r.Hits)}
	for _, d := range r.Descriptors {
		cd := checkapi.CheckDescriptor{HitsAddend: d.Hits}
		for _, e := range d.Entries {
			cd.Entries = append(cd.Entries, checkapi.CheckEntry{Key: e.Key, Value: e.Value})
		}
		if o := d.Override; o != nil {
			cd.Limit = &checkapi.CheckOverride{RequestsPerUnit: o.RequestsPerUnit, Unit: o.Unit.String()}
		}
		out.Descriptors = append(out.Descriptors, cd)
	}
	return out
}

// checkGRPC asks target over gRPC, in plaintext or, with tc, over TLS.
func checkGRPC(ctx context.Context, w io.Writer, target string, tc *tls.Config, req *descriptor.Request, asJSON bool) error {
	var c *rlsclient.Client
	var err error
	if tc != nil {
		c, err = rlsclient.DialTLS(target, tc)
	} else {
		c, err = rlsclient.Dial(target)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	a, err := c.ShouldRateLimit(ctx, req)
	if err != nil {
		return fmt.Errorf("%s: %w", target, err)
	}
	out := answerJSON(req, a)
	var raw []byte
	if asJSON {
		raw, _ = json.MarshalIndent(out, "", "  ")
		raw = append(raw, '\n')
	}
	var hdr [][2]string
	for _, h := range a.Headers {
		hdr = append(hdr, [2]string{h.Name, h.Value})
	}
	return printAnswer(w, &out, raw, hdr)
}

// answerJSON is a gRPC answer in the shape of POST /v1/check's, with the
// fields Envoy's protocol carries; a descriptor counted when the request
// was allowed and it has a limit and hits. The deciding rule is, as the
// check API picks it, the refusing descriptor with the longest wait, or
// when allowed the one with the least remaining.
func answerJSON(req *descriptor.Request, a *rlsclient.Answer) checkapi.CheckResponse {
	out := checkapi.CheckResponse{Allowed: a.Code == descriptor.OK, Code: a.Code.String()}
	var retry float64
	for _, h := range a.Headers {
		if strings.EqualFold(h.Name, "Retry-After") {
			retry, _ = strconv.ParseFloat(h.Value, 64)
		}
	}
	best := -1
	for i, st := range a.Statuses {
		dr := checkapi.DescriptorResult{Code: st.Code.String(), Remaining: int64(st.Remaining), ResetAfter: st.ResetAfter}
		if st.Name != "" || st.RequestsPerUnit != 0 {
			dr.Rule, dr.RequestsPerUnit, dr.Unit = st.Name, st.RequestsPerUnit, st.Unit.String()
			hits := uint64(max(req.Hits, 1))
			if i < len(req.Descriptors) && req.Descriptors[i].Hits != nil {
				hits = *req.Descriptors[i].Hits
			}
			dr.Counted = out.Allowed && hits > 0
			if st.Code != descriptor.OK {
				dr.RetryAfter = retry
			}
			switch {
			case best < 0:
				best = i
			case out.Allowed && st.Remaining < a.Statuses[best].Remaining:
				best = i
			case !out.Allowed && st.Code != descriptor.OK && (a.Statuses[best].Code == descriptor.OK || st.ResetAfter > a.Statuses[best].ResetAfter):
				best = i
			}
		}
		out.Descriptors = append(out.Descriptors, dr)
	}
	if best >= 0 {
		st := a.Statuses[best]
		out.Rule, out.Limit, out.Remaining, out.ResetAfter = st.Name, int64(st.RequestsPerUnit), int64(st.Remaining), st.ResetAfter
		if !out.Allowed {
			out.RetryAfter = retry
		}
	}
	return out
}

// checkHTTP asks server's POST /v1/check; tc, when not nil, is the TLS
// configuration of an https:// server.
func checkHTTP(ctx context.Context, w io.Writer, server string, tc *tls.Config, req *checkapi.CheckRequest, asJSON bool) error {
	body, _ := json.Marshal(req)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(server, "/")+"/v1/check", bytes.NewReader(body))
	if err != nil {
		return usageErr(err)
	}
	hr.Header.Set("Content-Type", "application/json")
	client := http.DefaultClient
	if tc != nil {
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}}
		defer client.CloseIdleConnections()
	}
	resp, err := client.Do(hr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	var p struct {
		Detail string `json:"detail"`
	}
	_ = json.Unmarshal(raw, &p)
	switch {
	case resp.StatusCode == http.StatusTooManyRequests && asJSON: // a request that can never pass, told as a problem
		w.Write(raw)
		return errRefused
	case resp.StatusCode == http.StatusTooManyRequests:
		fmt.Fprintf(w, "OVER_LIMIT\n  %s\n", p.Detail)
		return errRefused
	case resp.StatusCode != http.StatusOK && p.Detail != "":
		return fmt.Errorf("%s: %s: %s", server, resp.Status, p.Detail)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("%s: %s", server, resp.Status)
	}
	var out checkapi.CheckResponse
	if err := json.Unmarshal(raw, &out); err != nil {
		return fmt.Errorf("%s: malformed answer: %w", server, err)
	}
	if !asJSON {
		raw = nil
	}
	var hdr [][2]string
	for _, name := range []string{"RateLimit-Policy", "RateLimit", "Retry-After"} {
		if v := resp.Header.Get(name); v != "" {
			hdr = append(hdr, [2]string{name, v})
		}
	}
	return printAnswer(w, &out, raw, hdr)
}

// printAnswer prints an answer: asJSON, when not nil, as is; otherwise
// for people: its code, the deciding rule, each descriptor, the header
// fields that came with it. A refusal is errRefused.
func printAnswer(w io.Writer, out *checkapi.CheckResponse, asJSON []byte, hdr [][2]string) error {
	if asJSON != nil {
		_, err := w.Write(asJSON)
		return cmp.Or(err, refusedUnless(out.Allowed))
	}
	fmt.Fprintln(w, out.Code)
	if out.Rule != "" {
		fmt.Fprintf(w, "  rule %q: limit %d, remaining %d, retry after %.3gs, reset after %.3gs\n", out.Rule, out.Limit, out.Remaining, out.RetryAfter, out.ResetAfter)
	}
	for i, d := range out.Descriptors {
		if d.Rule == "" && d.RequestsPerUnit == 0 {
			fmt.Fprintf(w, "  descriptor %d: %s (no limit)\n", i, d.Code)
			continue
		}
		fmt.Fprintf(w, "  descriptor %d: %s %q %d/%s remaining %d counted %t\n", i, d.Code, d.Rule, d.RequestsPerUnit, d.Unit, d.Remaining, d.Counted)
	}
	for _, h := range hdr {
		fmt.Fprintf(w, "  %s: %s\n", h[0], h[1])
	}
	if out.Degraded != "" {
		fmt.Fprintf(w, "  degraded: %s\n", out.Degraded)
	}
	return refusedUnless(out.Allowed)
}

func refusedUnless(allowed bool) error {
	if allowed {
		return nil
	}
	return errRefused
}
