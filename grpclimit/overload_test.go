package grpclimit_test

import (
	"context"
	"flag"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/portero-rl/portero/grpclimit"
	"github.com/portero-rl/portero/internal/grpctest"
	"github.com/portero-rl/portero/overload"
	"github.com/portero-rl/portero/policy"
)

// The overload measurement of the gRPC door, as internal/gateway's
// TestOverloadRealProcess measures the HTTP one: a real grpc-go server on
// loopback whose handler serves a fixed number of calls per second and does
// not notice a client that went away; an open-loop load of 1.5 times that,
// a fifth of it critical (x-priority: critical metadata); clients that give
// up after a patience. Goodput of the critical calls (answers in time while
// the load is offered) with and without the Shedder's priorities. The doc's
// figure (docs/grpc.md) comes from
//
//	go test ./grpclimit -run TestShedByPriority -v -overload.duration=10s
var overloadDuration = flag.Duration("overload.duration", 3*time.Second, "how long TestShedByPriority offers load")

const (
	workers  = 5
	runTime  = 100 * time.Millisecond // 5 at once, 100 ms each: 50 calls/s
	capacity = float64(workers) / 0.1
	offered  = 1.5 * capacity
	critical = 5 // one call in critical is critical: 15/s
	patience = 600 * time.Millisecond
)

// fixedRate serves workers calls at a time, runTime each, first come first
// served; closing stop lets the queued ones go at the end.
func fixedRate(stop <-chan struct{}) grpctest.Handlers {
	sem := make(chan struct{}, workers)
	return grpctest.Handlers{Say: func(ctx context.Context, in string) (string, error) {
		select {
		case sem <- struct{}{}:
		case <-stop:
			return "", status.Error(codes.Unavailable, "stopping")
		}
		time.Sleep(runTime)
		<-sem
		return in, nil
	}}
}

type loadResult struct {
	criticalSent, criticalOK, sheddableOK, shed int
	goodput                                     float64 // critical answers in time during the load, per second
}

// offerLoad sends offered calls per second to cc for d, open loop, every
// critical-th one critical.
func offerLoad(cc *grpc.ClientConn, d time.Duration) loadResult {
	n := int(offered * d.Seconds())
	var (
		mu     sync.Mutex
		res    loadResult
		inLoad int
		wg     sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(d)
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(float64(i) * float64(time.Second) / offered))))
		crit := i%critical == 0
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			if crit {
				ctx = metadata.AppendToOutgoingContext(ctx, "x-priority", "critical")
			}
			t0 := time.Now()
			_, err := grpctest.CallSay(ctx, cc, "work")
			lat := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			if crit {
				res.criticalSent++
			}
			switch {
			case err == nil && lat <= patience && crit:
				res.criticalOK++
				if t0.Add(lat).Before(end) {
					inLoad++
				}
			case err == nil && lat <= patience:
				res.sheddableOK++
			case status.Code(err) == codes.Unavailable:
				res.shed++
			}
		})
	}
	wg.Wait()
	res.goodput = float64(inLoad) / d.Seconds()
	return res
}

// TestShedByPriority asserts only what holds on a loaded machine: under 1.5
// times the capacity, the Shedder with a slot reserved for critical calls
// and the rest sheddable answers clearly more critical calls in time than
// no shedding, and it did refuse. Without shedding every call queues behind
// the handler's backlog (25 more a second) and from about 1 s on answers
// too late; with shedding the excess sheddable calls are refused at once
// and the 15 critical calls a second find a slot.
func TestShedByPriority(t *testing.T) {
	d := *overloadDuration
	prio, err := grpclimit.PriorityByRule([]policy.PriorityRule{
		{Match: policy.Match{Headers: map[string]string{"X-Priority": "critical"}}, Priority: overload.Critical},
	}, overload.Sheddable)
	if err != nil {
		t.Fatal(err)
	}
	gate, err := overload.New(overload.Config{MaxInFlight: workers, Reserve: overload.Reserve{Critical: 2}, QueueSize: 10, ServiceTime: runTime})
	if err != nil {
		t.Fatal(err)
	}
	shed, err := grpclimit.NewShedder(grpclimit.ShedConfig{Gate: gate, Priority: prio})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	plain := grpctest.Dial(t, grpctest.Start(t, fixedRate(stop)))
	shedding := grpctest.Dial(t, grpctest.Start(t, fixedRate(stop), grpc.ChainUnaryInterceptor(shed.Unary)))
	var without, with loadResult
	var wg sync.WaitGroup
	wg.Go(func() { without = offerLoad(plain, d) })
	wg.Go(func() { with = offerLoad(shedding, d) })
	wg.Wait()
	s := gate.Stats()
	t.Logf("offered %.0f/s (%.0f/s critical) for %v to a handler of %.0f/s, patience %v", offered, offered/critical, d, capacity, patience)
	t.Logf("without shedding: critical answered in time %d of %d, goodput %.1f/s; sheddable in time %d", without.criticalOK, without.criticalSent, without.goodput, without.sheddableOK)
	t.Logf("with shedding:    critical answered in time %d of %d, goodput %.1f/s; sheddable in time %d; Unavailable %d (gate: full %d, late %d)",
		with.criticalOK, with.criticalSent, with.goodput, with.sheddableOK, with.shed, s.Refused[overload.Full], s.Refused[overload.Late])
	if with.goodput < 1.3*without.goodput || with.goodput == 0 {
		t.Errorf("critical goodput with shedding %.1f/s, without %.1f/s: want at least 1.3 times", with.goodput, without.goodput)
	}
	if with.shed == 0 {
		t.Error("the shedder refused nothing at 1.5 times the capacity")
	}
}
