// Package redisstore keeps Portero's counters in Redis, so that every
// instance of a service shares one limit: a portero.Store that decides
// exactly as the memory store, for Redis, Redis Cluster and Redis Sentinel.
//
// Each algorithm is embedded Lua that reads a key's state, decides and
// writes it back with its expiry in one atomic step; the scripts are loaded
// as one function library and called with FCALL, or run by hash on servers
// without functions (scripts.go). By default (ServerClock) they read Redis
// TIME, one clock for every instance; CallerClock takes the caller's
// instant, to the nanosecond, for simulations and the conformance suite.
// Lua's doubles are exact below 2^53, so the scripts compute on whole
// seconds plus nanoseconds and the store refuses rules beyond what they
// compute exactly (rules.go); a calendar quota's periods, which Lua cannot
// read from a time zone, are computed in Go for every call (calendar.go).
//
// A rule's state for a key lives under PREFIX{KEY}:FP, FP a fingerprint of
// the rule: the hash tag {KEY} puts every rule of one key in one cluster
// slot, so that a call over several rules of a key is one atomic script
// (Config.HashTag chooses another tag). Hits in several slots are first
// decided slot by slot without counting, then counted slot by slot:
// stricter, never looser, if another caller takes the last unit between.
//
// One-hit calls that queue while two others are in flight are sent
// together in one script, each decided as alone (Config.Batch; batch.go).
// Every call has a deadline that starts when it is made (Config.Timeout),
// and a circuit breaker stops calling a Redis that fails most calls: one
// for the server, or one per master of a cluster, whose health the store
// keeps apart (node.go). While Redis is unavailable the store decides
// nothing, for rates and leases alike: it returns an error wrapping
// portero.ErrStoreUnavailable and the caller's failure policy answers. See
// docs/distributed.md.
package redisstore

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
	"github.com/redis/rueidis"
	"github.com/sony/gobreaker/v2"
)

// Clock says where a decision's instant comes from.
type Clock int

const (
	// ServerClock reads the instant with Redis TIME inside the script, at
	// microsecond resolution: one clock for every instance. The default.
	ServerClock Clock = iota
	// CallerClock takes the instant passed to AllowAll, to the nanosecond:
	// for simulations, replays and the conformance suite. Instances whose
	// clocks disagree then disagree about windows too.
	CallerClock
)

// Defaults for the zero values of Config.
const (
	DefaultPrefix          = "portero:"
	DefaultTimeout         = 50 * time.Millisecond
	DefaultMinTTL          = 10 * time.Minute
	DefaultBreakerWindow   = time.Second
	DefaultBreakerRatio    = 0.5
	DefaultBreakerMinCalls = 20
	DefaultBreakerOpen     = 100 * time.Millisecond
	DefaultMaxFlushDelay   = 20 * time.Microsecond
	DefaultBatch           = 64
)

// ErrScript reports a script that Redis refused to run to the end: a key
// holding a value of the wrong type, say. Such a call decides nothing and
// counts nothing; it is not an outage, so no failure policy applies.
var ErrScript = errors.New("redis script failed")

// Config configures a Store. The zero value of each field means its default.
type Config struct {
	// URL is the Redis address as redis://[[user]:password@]host:port[/db]
	// (rediss:// for TLS), or Redis Sentinels as
	// redis-sentinel://host:port[,host:port…]/master[/db] (see sentinel.go).
	// Either URL or Addrs is required.
	URL string
	// TLS, when set, replaces the TLS configuration of a rediss:// or
	// rediss-sentinel:// URL (a private CA, a client certificate:
	// TLSFiles.Config), or turns TLS on for Addrs; with a redis:// URL it
	// is an error.
	TLS *tls.Config
	// Addrs are host:port addresses: one server, or seed nodes of a Redis
	// Cluster (detected automatically), or with SentinelMaster the Redis
	// Sentinels.
	Addrs []string
	// SentinelMaster, with Addrs, is the name of the master set that the
	// Redis Sentinels at Addrs watch: the store decides on its master and
	// follows failovers (sentinel.go; the URL form is redis-sentinel://).
	SentinelMaster string
	// Client, when set, is used instead of dialling URL or Addrs; Close then
	// leaves it open, and the two fields below do not apply.
	Client rueidis.Client
	// DialInBackground makes New return the store even when Redis does not
	// answer yet (a malformed address is still an error): calls fail with
	// portero.ErrStoreUnavailable, as in an outage, while the store dials
	// again (every 100 ms, doubling to 2 s) until Redis answers or Close.
	DialInBackground bool
	// MaxFlushDelay is how long rueidis's auto-pipelining may wait after
	// writing commands to collect more: fewer system calls per decision
	// under load, none of a lone caller's latency. DefaultMaxFlushDelay
	// when zero; negative for none.
	MaxFlushDelay time.Duration
	// PipelineMultiplex sets rueidis's ClientOption.PipelineMultiplex: 2^n
	// auto-pipelined connections per Redis node. Zero keeps rueidis's
	// default (log2 of GOMAXPROCS, at most 2: 1 to 4 connections; 1 for a
	// cluster); negative means one connection.
	PipelineMultiplex int
	// Batch is the most queued one-hit calls decided in one script, each
	// exactly as alone (batch.go). DefaultBatch when zero; 1 or negative
	// for none. Never on a cluster.
	Batch int
	// Prefix starts every key; DefaultPrefix when empty.
	Prefix string
	// Clock chooses the clock; ServerClock when zero.
	Clock Clock
	// MinTTL applies to CallerClock only: a key lives at least this long in
	// real time, since the caller's instants need not follow Redis's clock
	// (a replay may run slower than real time). DefaultMinTTL when zero.
	MinTTL time.Duration
	// Timeout bounds each call from the moment it is made, time queued for
	// a batch included; a caller's earlier deadline applies instead.
	// DefaultTimeout when zero.
	Timeout time.Duration
	// The circuit breaker opens when, over the last BreakerWindow (ten
	// rolling buckets), at least BreakerMinCalls calls to Redis ended and
	// at least BreakerRatio (in (0, 1]) of them failed for want of Redis:
	// a ratio, not a run of failures, since a stall of a loaded host fails
	// every call in flight at once. Each is its default when zero.
	BreakerWindow   time.Duration
	BreakerRatio    float64
	BreakerMinCalls int
	// BreakerOpen is how long the open breaker answers without calling
	// Redis before one probe goes through (closing it if Redis answers);
	// short, so that a stall costs about its own length.
	// DefaultBreakerOpen when zero.
	BreakerOpen time.Duration
	// HashTag returns the hash tag of a hit's key; nil means the hit's key.
	// Hits with one tag share a cluster slot and so one atomic script. A tag
	// must not contain '}'.
	HashTag func(portero.Hit) string
	// Logger receives the store's lines: when Redis (on a cluster, one
	// master's slots) becomes unavailable and answers again, when a breaker
	// changes state, when a background dial fails and succeeds, when a
	// cluster's slots get a new master; slog.Default() when nil.
	Logger *slog.Logger
	// OnUnavailable, when set, is called for every call Redis did not decide
	// because it was unavailable (an AllowAll, a Peek or an Acquire that
	// returned the error). It must be quick and safe for concurrent use.
	OnUnavailable func(UnavailableCall)
}

// UnavailableCall describes one call Redis did not decide because it was
// unavailable.
type UnavailableCall struct {
	// Hits are the hits of the call (for an Acquire, one hit of cost 1
	// under the concurrency rule's name).
	Hits []portero.Hit
	// Err is why Redis was not asked or did not answer.
	Err error
}

// Stats are counters since the store was created.
type Stats struct {
	// Calls is the number of AllowAll calls; Redis the number that Redis
	// decided.
	Calls, Redis uint64
	// Unavailable counts calls Redis did not decide because it was
	// unavailable (the caller's failure policy answered).
	Unavailable uint64
	// Errors counts calls that returned an error.
	Errors uint64
	// Batches counts batch scripts run (Config.Batch) and Batched the
	// one-hit calls they decided.
	Batches, Batched uint64
	// Degraded reports whether the last call on some node found Redis
	// unavailable (Store.Degraded).
	Degraded bool
	// Connected reports whether the store has a Redis client (see
	// Config.DialInBackground).
	Connected bool
	// Breaker is the circuit breaker's state: closed, half-open or open;
	// on a cluster the worst of its masters' (open, then half-open).
	Breaker string
	// Nodes are the health of each node (Store.Nodes).
	Nodes []NodeHealth
}

// Store is a portero.Store in Redis. It is safe for concurrent use; it
// starts no goroutines of its own beyond the Redis client's, with
// Config.DialInBackground while Redis has not answered yet the dialler,
// and on a cluster a short-lived one that reads its slots again when a
// node's health changes; Close stops them.
type Store struct {
	cfg       Config
	conn      atomic.Pointer[conn] // nil until connected
	ownClient bool
	scripts   *scripts
	rules     sync.Map // portero.Rule → *compiled
	log       *slog.Logger
	closed    atomic.Bool
	stop      chan struct{} // closed by Close: ends the dialler
	dialMu    sync.Mutex    // orders the dialler's handover with Close
	dialing   sync.WaitGroup

	// The health of Redis, by node (node.go): server is the whole of it
	// off a cluster, and on a cluster until its slots are known (topo).
	server     *node
	topo       atomic.Pointer[topology]
	topoMu     sync.Mutex   // serializes installing a topology
	refreshing atomic.Bool  // a refresh of topo is on its way
	refreshed  atomic.Int64 // when the last one started, Unix ns
	background sync.WaitGroup
	// execHook, when set by a test of this package, is called before each
	// script run with the run's context and, for a batch, its items; an
	// error it returns is the run's, and Redis is not called.
	execHook func(ctx context.Context, batch []*batchItem) error
	// minTTL is the scripts' ARGV 5, the TTL floor in ms: Config.MinTTL
	// rounded up with CallerClock, "0" with ServerClock.
	minTTL string
	leases leaseState // concurrency leases (lease.go)

	calls, redisCalls, unavailableCalls, errs, batches, batched atomic.Uint64
}

var _ portero.Store = (*Store)(nil)

// conn is a connected client and what depends on its mode.
type conn struct {
	client  rueidis.Client
	cluster bool
	batch   *batcher // nil when batching is off (Config.Batch, cluster)
}

// errClosed is the error of every call after Close.
var errClosed = fmt.Errorf("redisstore: %w", portero.ErrClosed)

// errNotConnected is why Redis decides no call before it first answered.
var errNotConnected = errors.New("not connected to redis yet")

// New validates cfg, connects to Redis and returns the store. A malformed
// URL or an address that does not answer is an error naming the store and
// the address.
func New(cfg Config) (*Store, error) {
	cfg.Prefix = cmp.Or(cfg.Prefix, DefaultPrefix)
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	cfg.MinTTL = cmp.Or(cfg.MinTTL, DefaultMinTTL)
	cfg.BreakerWindow = cmp.Or(cfg.BreakerWindow, DefaultBreakerWindow)
	cfg.BreakerRatio = cmp.Or(cfg.BreakerRatio, DefaultBreakerRatio)
	cfg.BreakerMinCalls = cmp.Or(cfg.BreakerMinCalls, DefaultBreakerMinCalls)
	cfg.BreakerOpen = cmp.Or(cfg.BreakerOpen, DefaultBreakerOpen)
	cfg.Batch = cmp.Or(cfg.Batch, DefaultBatch)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	switch {
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("redisstore: timeout %v: must be positive", cfg.Timeout)
	case cfg.MinTTL < 0:
		return nil, fmt.Errorf("redisstore: min TTL %v: must be positive", cfg.MinTTL)
	case cfg.BreakerMinCalls < 0 || cfg.BreakerOpen < 0 || cfg.BreakerWindow < 0:
		return nil, fmt.Errorf("redisstore: breaker: min calls %d, window %v, open %v: must be positive", cfg.BreakerMinCalls, cfg.BreakerWindow, cfg.BreakerOpen)
	case !(cfg.BreakerRatio > 0 && cfg.BreakerRatio <= 1):
		return nil, fmt.Errorf("redisstore: breaker ratio %v: want a fraction in (0, 1]", cfg.BreakerRatio)
	case cfg.Clock != ServerClock && cfg.Clock != CallerClock:
		return nil, fmt.Errorf("redisstore: unknown clock %d", cfg.Clock)
	case strings.ContainsAny(cfg.Prefix, "{}"):
		return nil, fmt.Errorf("redisstore: prefix %q: must not contain braces (they make hash tags)", cfg.Prefix)
	}
	s := &Store{cfg: cfg, scripts: newScripts(), log: cfg.Logger, minTTL: "0", stop: make(chan struct{})}
	if cfg.Clock == CallerClock {
		s.minTTL = strconv.FormatInt(int64((cfg.MinTTL+time.Millisecond-1)/time.Millisecond), 10)
	}
	s.server = s.newNode("", "")
	if cfg.Client != nil {
		s.connected(cfg.Client)
		return s, nil
	}
	var opt rueidis.ClientOption
	switch {
	case cfg.URL != "" && (len(cfg.Addrs) > 0 || cfg.SentinelMaster != ""):
		return nil, errors.New("redisstore: set URL, or Addrs (and SentinelMaster), not both")
	case cfg.URL != "":
		o, err := ParseURL(cfg.URL)
		if err != nil {
			return nil, fmt.Errorf("redisstore: %w", err)
		}
		opt = o
	case len(cfg.Addrs) > 0:
		opt.InitAddress, opt.Sentinel.MasterSet = cfg.Addrs, cfg.SentinelMaster
	default:
		return nil, errors.New("redisstore: no Redis address: set Config.URL or Config.Addrs")
	}
	if cfg.TLS != nil {
		if err := useTLS(&opt, cfg.TLS, cfg.URL != ""); err != nil {
			return nil, fmt.Errorf("redisstore: redis URL %q: %w", Redact(cfg.URL), err)
		}
	}
	opt.DisableCache = true // no client-side caching: every decision asks Redis
	opt.MaxFlushDelay = max(cmp.Or(cfg.MaxFlushDelay, DefaultMaxFlushDelay), 0)
	opt.PipelineMultiplex = cfg.PipelineMultiplex
	opt.Dialer.Timeout = cmp.Or(opt.Dialer.Timeout, time.Second)
	sentinelDefaults(&opt)
	s.ownClient = true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		err = fmt.Errorf("redisstore: connect to %v: %w", opt.InitAddress, err)
		if !cfg.DialInBackground {
			return nil, err
		}
		s.log.Warn("redisstore: redis does not answer; failure policies decide until it does", "err", err)
		s.dialing.Go(func() { s.dial(opt) })
		return s, nil
	}
	s.connected(c)
	return s, nil
}

// connected installs a client.
func (s *Store) connected(c rueidis.Client) {
	cn := &conn{client: c, cluster: c.Mode() == rueidis.ClientModeCluster}
	if s.cfg.Batch > 1 && !cn.cluster {
		cn.batch = newBatcher(s.cfg.Batch)
	}
	s.conn.Store(cn)
	if cn.cluster {
		if err := s.refresh(cn); err != nil {
			s.log.Debug("redisstore: redis cluster slots not read", "err", err)
		}
	}
}

// dial retries connecting until it succeeds or the store closes.
func (s *Store) dial(opt rueidis.ClientOption) {
	for wait := 100 * time.Millisecond; s.sleep(wait); wait = min(2*wait, 2*time.Second) {
		c, err := rueidis.NewClient(opt)
		if err != nil {
			s.log.Debug("redisstore: redis still does not answer", "err", err, "next", min(2*wait, 2*time.Second))
			continue
		}
		s.dialMu.Lock()
		if s.closed.Load() {
			s.dialMu.Unlock()
			c.Close()
			return
		}
		s.connected(c)
		s.dialMu.Unlock()
		s.log.Info("redisstore: connected to redis: exact shared limiting starts", "addr", opt.InitAddress)
		return
	}
}

// sleep waits d and reports true, or false as soon as the store closes.
func (s *Store) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.stop:
		return false
	case <-t.C:
		return true
	}
}

// Connected reports whether the store has reached Redis: always true
// without Config.DialInBackground; with it, false until Redis first
// answered (calls until then follow the failure policies).
func (s *Store) Connected() bool { return s.conn.Load() != nil }

// Close releases the Redis client (unless it came from Config.Client).
// Later calls return errors wrapping portero.ErrClosed; a second Close is
// harmless and returns such an error.
func (s *Store) Close(context.Context) error {
	s.dialMu.Lock()
	if s.closed.Swap(true) {
		s.dialMu.Unlock()
		return errClosed
	}
	s.dialMu.Unlock()
	close(s.stop)
	s.dialing.Wait()
	s.background.Wait()
	if cn := s.conn.Load(); cn != nil && s.ownClient {
		cn.client.Close()
	}
	return nil
}

// Degraded reports whether the last call on some node found Redis
// unavailable, so that the failure policies decide for its keys: the
// server, or on a cluster a master (the keys of the others are decided as
// usual). It costs an atomic load per node: callers may ask on every
// request, where Stats would also read the breakers under their locks.
func (s *Store) Degraded() bool {
	for _, n := range s.nodes() {
		if n.down.Load() {
			return true
		}
	}
	return false
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	nodes := s.Nodes()
	worst := gobreaker.StateClosed
	for _, n := range s.nodes() {
		if st := n.breaker.State(); st == gobreaker.StateOpen || st == gobreaker.StateHalfOpen && worst == gobreaker.StateClosed {
			worst = st
		}
	}
	return Stats{
		Calls:       s.calls.Load(),
		Redis:       s.redisCalls.Load(),
		Unavailable: s.unavailableCalls.Load(),
		Errors:      s.errs.Load(),
		Batches:     s.batches.Load(),
		Batched:     s.batched.Load(),
		Degraded:    s.Degraded(),
		Connected:   s.Connected(),
		Breaker:     worst.String(),
		Nodes:       nodes,
	}
}

func (s *Store) compiled(r portero.Rule) (*compiled, error) {
	if c, ok := s.rules.Load(r); ok {
		return c.(*compiled), nil
	}
	c, err := compile(r)
	if err != nil {
		return nil, err
	}
	s.rules.Store(r, c)
	return c, nil
}

// Key returns the Redis key that holds the state of rule r for key.
func (s *Store) Key(r portero.Rule, key string) (string, error) {
	c, err := s.compiled(r)
	if err != nil {
		return "", err
	}
	return s.key(c, portero.Hit{Rule: r, Key: key}), nil
}

func (s *Store) key(c *compiled, h portero.Hit) string {
	if s.cfg.HashTag == nil {
		return s.cfg.Prefix + "{" + h.Key + "}:" + c.fp
	}
	return s.cfg.Prefix + "{" + s.cfg.HashTag(h) + "}:" + h.Key + ":" + c.fp
}

// call is one script run: the hits of one cluster slot (or all of them).
type call struct {
	idx  []int // positions in the AllowAll call
	keys []string
	algs []portero.Algorithm
}

// oneCall is the call of a single hit on key.
func oneCall(key string, alg portero.Algorithm) call {
	return call{idx: []int{0}, keys: []string{key}, algs: []portero.Algorithm{alg}}
}

// AllowAll implements portero.Store: it decides every hit at one instant
// (Redis's, or now with CallerClock), all-or-nothing. See the package
// documentation for hits in several cluster slots and for failures.
func (s *Store) AllowAll(ctx context.Context, now time.Time, hits []portero.Hit) ([]portero.Decision, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	s.calls.Add(1)
	cs := make([]*compiled, len(hits))
	for i, h := range hits {
		c, err := s.compiled(h.Rule)
		if err != nil {
			s.errs.Add(1)
			return nil, fmt.Errorf("redisstore: %w", err)
		}
		if err := algorithm.CheckCost(h.Cost, c.limit); err != nil {
			s.errs.Add(1)
			return nil, fmt.Errorf("redisstore: rule %q, key %q: %w", h.Rule.Name, h.Key, err)
		}
		cs[i] = c
	}
	out := make([]portero.Decision, len(hits))
	if len(hits) == 0 {
		return out, nil
	}
	cn := s.conn.Load()
	if cn == nil {
		return nil, s.unavailableCall(hits, s.server.failed(errNotConnected))
	}
	// The deadline starts now: a call that queues for a batch spends its
	// wait out of the same Timeout.
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	var calls []call
	if len(hits) == 1 {
		// The common case: one hit, one slot, the one-hit script; built
		// without split's maps and slices.
		calls = []call{oneCall(s.key(cs[0], hits[0]), cs[0].alg)}
	} else {
		calls = s.split(cn, cs, hits)
	}
	var err error
	if cn.batch != nil && len(hits) == 1 && hits[0].Rule.Algorithm != portero.SlidingLog {
		err = cn.batch.do(ctx, s, cn, now, cs, hits, calls[0], out)
	} else if len(calls) == 1 {
		_, err = s.run(ctx, cn, now, cs, hits, calls[0], true, out)
	} else {
		err = s.runSlots(ctx, cn, now, cs, hits, calls, out)
	}
	if err == nil {
		s.redisCalls.Add(1)
		return out, nil
	}
	if !unavailable(err) {
		s.errs.Add(1)
		return nil, err
	}
	return nil, s.unavailableCall(hits, err)
}

// clockArgs are the scripts' first three arguments: the clock, and with
// the caller's the instant now as seconds and nanoseconds (in
// microseconds, with micro, for the lease script).
func (s *Store) clockArgs(now time.Time, micro bool) (clock, sec, frac string) {
	if s.cfg.Clock != CallerClock {
		return "server", "0", "0"
	}
	f := now.Nanosecond()
	if micro {
		f /= 1000
	}
	return "caller", strconv.FormatInt(now.Unix(), 10), strconv.Itoa(f)
}

// deadline bounds ctx by Config.Timeout from now, unless ctx's own
// deadline comes first (then no timer of our own is needed).
func (s *Store) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= s.cfg.Timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.cfg.Timeout)
}

// split groups the hits by cluster slot; on a single server there is one
// group.
func (s *Store) split(cn *conn, cs []*compiled, hits []portero.Hit) []call {
	if !cn.cluster {
		c := call{idx: make([]int, len(hits)), keys: make([]string, len(hits)), algs: make([]portero.Algorithm, len(hits))}
		for i, h := range hits {
			c.idx[i], c.keys[i], c.algs[i] = i, s.key(cs[i], h), cs[i].alg
		}
		return []call{c}
	}
	var calls []call
	slots := map[uint16]int{}
	for i, h := range hits {
		k := s.key(cs[i], h)
		sl := slot(k)
		j, ok := slots[sl]
		if !ok {
			j = len(calls)
			slots[sl] = j
			calls = append(calls, call{})
		}
		c := &calls[j]
		c.idx, c.keys, c.algs = append(c.idx, i), append(c.keys, k), append(c.algs, cs[i].alg)
	}
	return calls
}

// runSlots decides hits spread over several cluster slots: first without
// counting, then counting slot by slot.
func (s *Store) runSlots(ctx context.Context, cn *conn, now time.Time, cs []*compiled, hits []portero.Hit, calls []call, out []portero.Decision) error {
	all := true
	for _, c := range calls {
		ok, err := s.run(ctx, cn, now, cs, hits, c, false, out)
		if err != nil {
			return err
		}
		all = all && ok
	}
	if !all {
		return nil
	}
	for _, c := range calls {
		ok, err := s.run(ctx, cn, now, cs, hits, c, true, out)
		if err != nil || !ok {
			return err
		}
	}
	return nil
}

// run executes one script and fills out at c.idx. It reports whether every
// hit was allowed. ctx carries the call's deadline (deadline).
func (s *Store) run(ctx context.Context, cn *conn, now time.Time, cs []*compiled, hits []portero.Hit, c call, commit bool, out []portero.Decision) (bool, error) {
	args := make([]string, 5, 5+5*len(c.idx))
	args[0], args[1], args[2] = s.clockArgs(now, false)
	args[3], args[4] = "0", s.minTTL
	if commit {
		args[3] = "1"
	}
	for _, i := range c.idx {
		a := s.argv(cs[i], now)
		args = append(args, string(cs[i].alg), strconv.FormatInt(hits[i].Cost, 10), a[0], cs[i].p2(a, hits[i]), a[2])
	}
	script := s.scripts.pick(c.algs)
	var all bool
	err := s.nodeOf(cn, c.keys[0]).exec(func() error {
		if s.execHook != nil {
			if err := s.execHook(ctx, nil); err != nil {
				return err
			}
		}
		res, err := script.Exec(ctx, cn.client, c.keys, args).ToArray()
		if err != nil {
			return err
		}
		all, err = s.decode(res, cs, c, out)
		return err
	})
	if err != nil {
		return false, s.describe(err, cs, hits, c)
	}
	return all, nil
}

// decode fills out at c.idx from a script's reply (read in place, without
// copying it into a slice of its own) and reports whether every hit was
// allowed.
func (s *Store) decode(res []rueidis.RedisMessage, cs []*compiled, c call, out []portero.Decision) (bool, error) {
	if len(res) != 1+5*len(c.idx) {
		return false, fmt.Errorf("redisstore: %w: %d integers in the reply, want %d", ErrScript, len(res), 1+5*len(c.idx))
	}
	for j, i := range c.idx {
		r, err := five(res[1+5*j:])
		if err != nil {
			return false, fmt.Errorf("redisstore: %w: reply: %v", ErrScript, err)
		}
		out[i] = cs[i].decision(r[0] == 1, r[1], r[2], r[3], r[4])
	}
	first, err := res[0].AsInt64()
	return first == 1, err
}

// five reads the first five integers of res: a hit's part of a reply.
func five(res []rueidis.RedisMessage) (r [5]int64, err error) {
	for k := range r {
		if r[k], err = res[k].AsInt64(); err != nil {
			break
		}
	}
	return r, err
}

// describe turns a failed call into an error naming the store, the key, the
// rule and its algorithm.
func (s *Store) describe(err error, cs []*compiled, hits []portero.Hit, c call) error {
	if errors.Is(err, ErrScript) {
		return err // a malformed reply, described already
	}
	if unavailable(err) {
		return err // marked with its node (node.exec)
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		// A script names the hit it failed on: "portero hit N: why".
		msg, j := re.Error(), 1
		if rest, found := strings.CutPrefix(strings.TrimPrefix(msg, "ERR "), "portero hit "); found {
			if n, m, ok := strings.Cut(rest, ": "); ok {
				if k, e := strconv.Atoi(n); e == nil && k >= 1 && k <= len(c.idx) {
					j, msg = k, m
				}
			}
		}
		i := c.idx[j-1]
		return fmt.Errorf("redisstore: key %q (redis key %q), rule %q, algorithm %s: %w: %s",
			hits[i].Key, c.keys[j-1], hits[i].Rule.Name, hits[i].Rule.Algorithm, ErrScript, msg)
	}
	return fmt.Errorf("redisstore: %w", err)
}

// unavailableError marks a failure of Redis itself (as opposed to a script
// error): the caller's failure policy applies. node is where, when known.
type unavailableError struct {
	err  error
	node *node
}

func (e *unavailableError) Error() string {
	msg := "redisstore: " + portero.ErrStoreUnavailable.Error() + ": "
	if n := e.node; n != nil && n.slots != "" {
		msg += "redis cluster node " + *n.addr.Load() + " (slots " + n.slots + "): "
	}
	return msg + e.err.Error()
}

func (e *unavailableError) Unwrap() []error { return []error{portero.ErrStoreUnavailable, e.err} }

// unavailable reports whether err means that Redis could not decide: a
// timeout, a connection failure, an open breaker, or a server that is
// loading, busy or failing over. A script error or a caller's cancellation
// is not.
func unavailable(err error) bool {
	if err == nil {
		return false
	}
	var ue *unavailableError
	if errors.As(err, &ue) {
		return true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, ErrScript) {
		return false
	}
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		for _, p := range []string{"LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY", "NOREPLICAS"} {
			if strings.HasPrefix(re.Error(), p) {
				return true
			}
		}
		return false
	}
	return true // connection refused, reset, closed, EOF …
}

// Limiter returns a portero.Limiter that decides for keys under rule r.
func (s *Store) Limiter(r portero.Rule) (*Limiter, error) {
	if _, err := s.compiled(r); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	return &Limiter{store: s, rule: r}, nil
}

// Limiter decides for keys under one rule. It is safe for concurrent use.
type Limiter struct {
	store *Store
	rule  portero.Rule
}

var _ portero.Limiter = (*Limiter)(nil)

// AllowN implements portero.Limiter.
func (l *Limiter) AllowN(ctx context.Context, key string, now time.Time, cost int64) (portero.Decision, error) {
	d, err := l.store.AllowAll(ctx, now, []portero.Hit{{Rule: l.rule, Key: key, Cost: cost}})
	if len(d) == 1 {
		return d[0], err
	}
	return portero.Decision{}, err
}
