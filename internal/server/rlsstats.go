package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/portero-rl/portero/descriptor"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/internal/rlsstats"
	"github.com/portero-rl/portero/internal/rlstrace"
)

// newRLSTracer returns the tracing of o.Tracing; nil without it.
func newRLSTracer(o RLSOptions, log *slog.Logger) (*rlstrace.Tracer, error) {
	if o.Tracing == nil {
		return nil, nil
	}
	t, err := rlstrace.New(context.Background(), *o.Tracing)
	if err == nil {
		log.Info("rls: tracing on", "protocol", o.Tracing.Protocol, "service", o.Tracing.ServiceName, "sampling_rate", o.Tracing.SamplingRate)
	}
	return t, err
}

// newRLSStats returns the statsd statistics of o.Statsd; nil without it.
func newRLSStats(o RLSOptions, limits func() *descriptor.Config) (*rlsstats.Stats, error) {
	if o.Statsd == nil {
		return nil, nil
	}
	so := *o.Statsd
	so.Limits, so.Logger = limits, o.Logger
	so.CountEach = o.Envoyproxy.Counting == engine.CountEach
	so.NearLimitRatio = o.NearLimit
	so.MaxKeys = o.MaxDetailedSeries
	return rlsstats.New(so)
}

// observers tells every observer of a door about each call.
type observers []descriptor.Observer

func (os observers) Observe(req *descriptor.Request, p *descriptor.Plan, v *engine.Verdict, took time.Duration, err error) {
	for _, o := range os {
		o.Observe(req, p, v, took, err)
	}
}

// observer returns what a door tells of its calls: the Prometheus metrics
// and, with statsd, the statistics (grpc: the door counted per gRPC call).
func (r *rlsServer) observer(door string) descriptor.Observer {
	m := r.metrics.observer(door)
	if r.stats == nil {
		return m
	}
	return observers{m, r.stats.Observer(door == "grpc")}
}

// loaded tells the statistics of a load of the configuration.
func (r *rlsServer) loaded(c *descriptor.Config, err error) {
	if r.stats != nil {
		r.stats.Loaded(c, err, r.opts.ConfigPath != "")
	}
}
