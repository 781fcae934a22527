// Package rlsxds receives envoyproxy/ratelimit's configuration over xDS,
// as it does with CONFIG_TYPE=GRPC_XDS_SOTW (the way Envoy Gateway runs
// it): an aggregated discovery stream (state of the world) to a management
// server, asking for RateLimitConfig resources
// (type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig),
// each one domain. Every response is the whole configuration: it is read
// by package envoyconf, exactly as the same domains in files would be (the
// resource's name for the file's), and applied whole and acknowledged
// (ACK), or refused whole, logged and NACKed with the reason while the
// running configuration stays.
//
// The stream is go-control-plane's own ADS client (pkg/client/sotw/v3, the
// one envoyproxy/ratelimit uses) and the resources its generated types
// (github.com/envoyproxy/go-control-plane/ratelimit): the protocol's
// versions and nonces are the management server's library's, not a second
// implementation of them.
package rlsxds

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/internal/config/envoyconf"
)

// Options configure the stream: envoyproxy/ratelimit's CONFIG_GRPC_XDS_*
// and XDS_CLIENT_* settings.
type Options struct {
	// ServerURL is the management server, host:port (or any gRPC target).
	ServerURL string
	// NodeID and NodeMetadata (key=value,key=value) identify this
	// instance to the server.
	NodeID, NodeMetadata string
	// Headers are sent on the stream (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS).
	Headers map[string]string
	// TLS, when set, dials with TLS: the client certificate and key
	// (both or neither), the CA to verify the server against (the system's
	// with it), and the name the server's certificate must carry (its
	// host without).
	TLS *TLSFiles
	// RetryInitial and RetryMax bound the wait before a new stream after
	// one failed, doubling with jitter (0: 1s and 60s).
	RetryInitial, RetryMax time.Duration
	// MaxRecvMsgSize bounds one response (0: gRPC's 4 MiB).
	MaxRecvMsgSize int
	// Load reads the resources as files would be read.
	Load envoyconf.Options
	// Logger receives the stream's events (nil: slog.Default()).
	Logger *slog.Logger
}

// TLSFiles are the client side of the stream's TLS.
type TLSFiles struct {
	CertFile, KeyFile, CAFile, ServerName string
}

// Run keeps a stream to the management server open until ctx is done,
// calling apply with every configuration it sends, or with the error that
// made it refuse one (apply then keeps what runs). It returns when ctx is
// done, or at once when the options cannot work (a TLS file that does not
// load).
func Run(ctx context.Context, o Options, apply func(*descriptor.Config, error)) error {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.RetryInitial <= 0 {
		o.RetryInitial = time.Second
	}
	if o.RetryMax < o.RetryInitial {
		o.RetryMax = max(60*time.Second, o.RetryInitial)
	}
	creds, err := o.credentials()
	if err != nil {
		return err
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if o.MaxRecvMsgSize > 0 {
		dial = append(dial, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(o.MaxRecvMsgSize)))
	}
	conn, err := grpc.NewClient(o.ServerURL, dial...)
	if err != nil {
		return fmt.Errorf("xDS server %q: %w", o.ServerURL, err)
	}
	defer conn.Close()
	ctx = metadata.NewOutgoingContext(ctx, metadata.New(o.Headers))
	wait := o.RetryInitial
	for ctx.Err() == nil {
		if err := stream(ctx, conn, &o, apply); ctx.Err() == nil {
			o.Logger.Warn("rls: xDS stream to the management server ended, reconnecting", "server", o.ServerURL, "err", err, "in", wait)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait/2 + rand.N(wait/2+1)):
		}
		wait = min(2*wait, o.RetryMax)
	}
	return nil
}

// stream runs one ADS stream until it fails.
func stream(ctx context.Context, conn *grpc.ClientConn, o *Options, apply func(*descriptor.Config, error)) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := sotw.NewADSClient(sctx, node(o.NodeID, o.NodeMetadata), resource.RateLimitConfigType)
	if err := c.InitConnect(conn); err != nil {
		return err
	}
	o.Logger.Info("rls: xDS stream to the management server open", "server", o.ServerURL, "node", o.NodeID)
	for {
		resp, err := c.Fetch()
		if err != nil {
			return err
		}
		cfg, err := Parse(resp.Resources, o.Load)
		apply(cfg, err)
		if err != nil {
			err = c.Nack(err.Error())
		} else {
			err = c.Ack()
		}
		if err != nil {
			return err
		}
	}
}

// node is envoyproxy/ratelimit's node: the id, and the metadata's
// key=value pairs (an entry without '=' is skipped, as there).
func node(id, meta string) *corev3.Node {
	fields := map[string]*structpb.Value{}
	for _, kv := range strings.Split(meta, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			fields[k] = structpb.NewStringValue(v)
		}
	}
	return &corev3.Node{Id: id, Metadata: &structpb.Struct{Fields: fields}}
}

func (o *Options) credentials() (credentials.TransportCredentials, error) {
	if o.TLS == nil {
		return insecure.NewCredentials(), nil
	}
	f := o.TLS
	cfg := &tls.Config{ServerName: f.ServerName, MinVersion: tls.VersionTLS12}
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, errors.New("xDS TLS: a client certificate needs both its file and its key")
	}
	if f.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("xDS TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("xDS TLS CA: %w", err)
		}
		pool, _ := x509.SystemCertPool()
		if pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("xDS TLS CA: %s: no PEM certificate", f.CAFile)
		}
		cfg.RootCAs = pool
	}
	return credentials.NewTLS(cfg), nil
}

// Parse reads RateLimitConfig resources into a configuration, each as the
// YAML file of its domain named after the resource (envoyproxy/ratelimit
// turns them into its YAML structures and loads those). An error says
// which resource and what is wrong with it; nothing is applied then.
func Parse(resources []*anypb.Any, opts envoyconf.Options) (*descriptor.Config, error) {
	srcs := make([]envoyconf.Source, 0, len(resources))
	for i, r := range resources {
		var c rlsconf.RateLimitConfig
		if err := r.UnmarshalTo(&c); err != nil {
			return nil, fmt.Errorf("xDS resource %d: not a RateLimitConfig: %w", i, err)
		}
		root := map[string]any{"domain": c.Domain}
		if len(c.Descriptors) > 0 {
			root["descriptors"] = descriptors(c.Descriptors)
		}
		data, err := yaml.Marshal(root)
		if err != nil {
			return nil, fmt.Errorf("xDS resource %q: %w", c.Name, err)
		}
		srcs = append(srcs, envoyconf.Source{Name: c.Name, Data: data})
	}
	return envoyconf.Parse(srcs, opts)
}

// descriptors is envoyproxy/ratelimit's rateLimitDescriptorsPbToYaml: the
// fields the resource has, as its YAML spells them.
func descriptors(ds []*rlsconf.RateLimitDescriptor) []any {
	out := make([]any, len(ds))
	for i, d := range ds {
		m := map[string]any{"key": d.Key}
		if d.Value != "" {
			m["value"] = d.Value
		}
		if p := d.RateLimit; p != nil {
			rl := map[string]any{"requests_per_unit": p.RequestsPerUnit}
			if p.Unit != rlsconf.RateLimitUnit_UNKNOWN {
				rl["unit"] = p.Unit.String()
			}
			if p.Unlimited {
				rl["unlimited"] = true
			}
			if p.Name != "" {
				rl["name"] = p.Name
			}
			if len(p.Replaces) > 0 {
				rs := make([]any, len(p.Replaces))
				for j, r := range p.Replaces {
					rs[j] = map[string]any{"name": r.Name}
				}
				rl["replaces"] = rs
			}
			m["rate_limit"] = rl
		}
		if len(d.Descriptors) > 0 {
			m["descriptors"] = descriptors(d.Descriptors)
		}
		for k, on := range map[string]bool{"shadow_mode": d.ShadowMode, "detailed_metric": d.DetailedMetric, "quota_mode": d.QuotaMode} {
			if on {
				m[k] = true
			}
		}
		if md := d.GetMetadata(); md != nil {
			m["metadata"] = md.AsMap()
		}
		out[i] = m
	}
	return out
}
