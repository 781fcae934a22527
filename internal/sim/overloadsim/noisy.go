package overloadsim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/portero-rl/portero/internal/sim"
	"github.com/portero-rl/portero/overload"
)

// The noisy-neighbour experiment (who pays when one tenant sends far more
// than its share): a shared service that completes 100 requests per second
// (10 at once, 100 ms each) and 31 tenants for 60 s — 30 small ones sending
// 2 per second each, well within a fair share of 100/31 ≈ 3.2, and a large
// one sending 140 per second. The total, 200 per second, is twice the
// capacity, so half of it must go; the question is whose half.
const (
	NoisySmallTenants = 30
	NoisySmallRate    = 2.0   // requests per second, each small tenant
	NoisyLargeRate    = 140.0 // requests per second, the large tenant
	NoisyWorkers      = 10
	NoisyRun          = 100 * time.Millisecond
	NoisyDuration     = 60 * time.Second
	NoisyPatience     = 2 * time.Second
	NoisyQueue        = 100
	// NoisySeed seeds the random shedding.
	NoisySeed = 1
)

// NoisyPolicies are the two sheddings compared: random (every request
// equally likely to go, so every tenant loses in proportion) and fair (the
// tenant holding the most of the service loses).
var NoisyPolicies = []overload.Shedding{overload.Random, overload.Fair}

// NoisyRow is one policy's outcome for one class of tenant.
type NoisyRow struct {
	Policy, Class   string
	Offered, Served int
	// Ratio is Served / Offered. Served counts answers within the
	// client's patience (with these settings, every answer).
	Ratio float64
}

// NoisyResult is the experiment's outcome: rows per policy, small then
// large.
type NoisyResult struct {
	Rows []NoisyRow
}

// NoisyGate returns the Gate for policy.
func NoisyGate(policy overload.Shedding) (*overload.Gate, error) {
	return overload.New(overload.Config{
		MaxInFlight: NoisyWorkers, QueueSize: NoisyQueue, Shedding: policy,
		Rand: rand.New(rand.NewPCG(NoisySeed, NoisySeed)),
	})
}

// NoisyJobs returns the experiment's requests in arrival order: small
// tenant i sends at i·(0.5 s/30) + k·0.5 s, the large one every 1/140 s.
func NoisyJobs() []*Job {
	var jobs []*Job
	add := func(at time.Duration, tenant, class string) {
		jobs = append(jobs, &Job{At: at, Class: class, Req: overload.Request{Tenant: tenant, Deadline: sim.Epoch.Add(at + NoisyPatience)}})
	}
	perSmall := int(NoisySmallRate * NoisyDuration.Seconds())
	for i := range NoisySmallTenants {
		offset := time.Duration(i) * time.Duration(float64(time.Second)/NoisySmallRate) / NoisySmallTenants
		for _, at := range every(NoisySmallRate, perSmall, offset) {
			add(at, "small-"+strconv.Itoa(i), "small")
		}
	}
	for _, at := range every(NoisyLargeRate, int(NoisyLargeRate*NoisyDuration.Seconds()), 0) {
		add(at, "large", "large")
	}
	slices.SortStableFunc(jobs, func(a, b *Job) int { return int(a.At - b.At) })
	return jobs
}

// RunNoisy runs both policies of NoisyPolicies until every request is
// answered or refused.
func RunNoisy() (*NoisyResult, error) {
	res := &NoisyResult{}
	for _, p := range NoisyPolicies {
		g, err := NoisyGate(p)
		if err != nil {
			return nil, err
		}
		jobs := NoisyJobs()
		serve(g, jobs, NoisyRun, 0)
		for _, class := range []string{"small", "large"} {
			row := NoisyRow{Policy: p.String(), Class: class}
			for _, j := range jobs {
				if j.Class != class {
					continue
				}
				row.Offered++
				if j.Done && j.Latency() <= NoisyPatience {
					row.Served++
				}
			}
			if row.Offered == 0 {
				return nil, fmt.Errorf("overloadsim: no %s requests", class)
			}
			row.Ratio = float64(row.Served) / float64(row.Offered)
			res.Rows = append(res.Rows, row)
		}
	}
	return res, nil
}

// NoisyHeader is the CSV header of the noisy-neighbour experiment.
var NoisyHeader = []string{"policy", "tenant_class", "offered", "served", "served_ratio"}

// Table returns the experiment's figures, one row per policy and class.
func (r *NoisyResult) Table() sim.Table {
	t := sim.Table{Header: NoisyHeader}
	for _, o := range r.Rows {
		t.Rows = append(t.Rows, []string{o.Policy, o.Class, strconv.Itoa(o.Offered), strconv.Itoa(o.Served), sim.Fixed(o.Ratio, 3)})
	}
	return t
}
