package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/sony/gobreaker/v2"
)

// A node is a part of Redis whose health the store keeps on its own: the
// server (a single server, or a Sentinel's master set, whichever server is
// its master), or on a cluster one master's slots. Each has its circuit
// breaker and its state, so that a dead cluster master sends only the
// calls on its keys to the failure policies, and the store says so once,
// while the keys of the other masters are decided as before.
//
// A cluster node is its slots, not its server: the replica that a
// failover promotes takes the same slots, and with them the node's
// breaker and state, so that the store says "answers again" when the new
// master does. The store learns the slots and their masters with CLUSTER
// SLOTS when it connects and again, in the background, when a node's
// state changes (so that its lines name the master of the moment), at
// most once a second.
type node struct {
	s       *Store
	slots   string                 // ranges, "0-5460" or "0-99,200-5460"; "" off a cluster
	addr    atomic.Pointer[string] // a cluster node's master, as last seen
	breaker *gobreaker.TwoStepCircuitBreaker[struct{}]
	down    atomic.Bool   // the last call found it unavailable
	flips   atomic.Uint64 // changes of down, so that a call that ended late does not undo a later one
}

func (s *Store) newNode(slots, addr string) *node {
	n := &node{s: s, slots: slots}
	n.addr.Store(&addr)
	cfg := s.cfg
	n.breaker = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:         "redisstore",
		MaxRequests:  1,
		Interval:     cfg.BreakerWindow,
		BucketPeriod: cfg.BreakerWindow / 10,
		Timeout:      cfg.BreakerOpen,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			ended := c.TotalSuccesses + c.TotalFailures
			return ended >= uint32(cfg.BreakerMinCalls) && float64(c.TotalFailures) >= cfg.BreakerRatio*float64(ended)
		},
		IsSuccessful: func(err error) bool { return err == nil || !unavailable(err) },
		// A caller that gave up says nothing about Redis.
		IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			// Open and closed are news; the probes between them
			// (half-open, open again), one each BreakerOpen while Redis is
			// down, are not.
			level := slog.LevelWarn
			if to == gobreaker.StateHalfOpen || from == gobreaker.StateHalfOpen && to == gobreaker.StateOpen {
				level = slog.LevelDebug
			}
			s.log.Log(context.Background(), level, "redisstore: circuit breaker "+to.String(), n.attrs("from", from.String())...)
		},
	})
	return n
}

// attrs are a log line's attributes: the node's, then more.
func (n *node) attrs(more ...any) []any {
	if n.slots == "" {
		return more
	}
	return append([]any{"node", *n.addr.Load(), "slots", n.slots}, more...)
}

// allow asks the node's breaker for one round trip to Redis. done reports
// how it ended and returns its error, marked with the node when Redis was
// unavailable; a refusal of the breaker is such an error.
func (n *node) allow() (done func(error) error, err error) {
	since := n.flips.Load()
	end, err := n.breaker.Allow()
	if err != nil {
		// The breaker refuses only once calls failed, and those noted
		// it: a refusal that returns after a probe found Redis again
		// must not say it is gone.
		return nil, n.mark(err)
	}
	return func(err error) error {
		end(err)
		if err == nil {
			n.answeredSince(since)
			return nil
		}
		if unavailable(err) {
			return n.failedSince(err, since)
		}
		return err
	}, nil
}

// exec runs fn, one round trip to Redis, under the node's breaker (allow).
func (n *node) exec(fn func() error) error {
	done, err := n.allow()
	if err != nil {
		return err
	}
	return done(fn())
}

// mark returns err marked as the node's unavailability.
func (n *node) mark(err error) error {
	var ue *unavailableError
	if !errors.As(err, &ue) || ue.node == nil {
		err = &unavailableError{err: err, node: n}
	}
	return err
}

// failed notes that Redis was unavailable to a call on the node: the first
// such call after an answer logs it. It returns err marked with the node.
func (n *node) failed(err error) error { return n.failedSince(err, n.flips.Load()) }

// failedSince is failed for a call that started when the node's state had
// changed since times. A call that started before the node's state last
// changed says nothing of the node now: at a crash, an answer that was on
// its way when another call found the connection gone; after a failover,
// a failure on the connection to the master it replaced.
func (n *node) failedSince(err error, since uint64) error {
	err = n.mark(err)
	if n.flips.Load() == since && n.down.CompareAndSwap(false, true) {
		n.flips.Add(1)
		if n.slots == "" {
			n.s.log.Warn("redisstore: redis unavailable: the callers' failure policies decide", "err", err)
		} else {
			n.s.log.Warn("redisstore: redis cluster node unavailable: the callers' failure policies decide for its keys", n.attrs("err", err)...)
		}
		n.s.refreshSoon()
	}
	return err
}

// answeredSince notes that Redis decided a call on the node that started
// when its state had changed since times (failedSince).
func (n *node) answeredSince(since uint64) {
	if !n.down.Load() || n.flips.Load() != since || !n.down.CompareAndSwap(true, false) {
		return // the common case: one load, no write
	}
	n.flips.Add(1)
	if n.slots == "" {
		n.s.log.Info("redisstore: redis answers again: exact shared limiting resumed")
	} else {
		n.s.log.Info("redisstore: redis cluster node answers again: exact shared limiting resumed for its keys", n.attrs()...)
	}
	n.s.refreshSoon()
}

// NodeHealth is the health of one part of the store's Redis: the server,
// or on a cluster one master and its slots.
type NodeHealth struct {
	// Node is the cluster master's address, as last seen; empty off a
	// cluster, and before the store has learnt the cluster's slots.
	Node string
	// Slots are the cluster slots the node serves, as ranges
	// ("0-5460"); empty off a cluster.
	Slots string
	// Unavailable reports whether the last call on the node found Redis
	// unavailable: the callers' failure policies decide for its keys
	// until a call finds it answering again.
	Unavailable bool
	// Breaker is the node's circuit breaker: closed, half-open or open.
	Breaker string
}

// Nodes returns the health of each part of Redis the store calls: one
// entry off a cluster, one per master on a cluster, ordered by slots.
func (s *Store) Nodes() []NodeHealth {
	ns := s.nodes()
	out := make([]NodeHealth, len(ns))
	for i, n := range ns {
		out[i] = NodeHealth{Slots: n.slots, Unavailable: n.down.Load(), Breaker: n.breaker.State().String()}
		if n.slots != "" {
			out[i].Node = *n.addr.Load()
		}
	}
	return out
}

// nodes are the store's nodes of the moment: the server, or a cluster's
// masters once their slots are known.
func (s *Store) nodes() []*node {
	if t := s.topo.Load(); t != nil {
		return t.nodes
	}
	return []*node{s.server}
}

// nodeOf is the node that serves key.
func (s *Store) nodeOf(cn *conn, key string) *node {
	if !cn.cluster {
		return s.server
	}
	t := s.topo.Load()
	if t == nil {
		s.refreshSoon()
		return s.server
	}
	if i := t.owner[slot(key)]; i > 0 {
		return t.nodes[i-1]
	}
	// A slot no master served when the slots were read: the cluster's
	// view may have been incomplete then, or the slot is not served
	// (CLUSTERDOWN, for the store as a whole).
	s.refreshSoon()
	return s.server
}

// topology is a cluster's slots and the nodes that serve them.
type topology struct {
	owner [16384]uint16 // 1 + the index in nodes; 0 for a slot no master serves
	nodes []*node       // ordered by their first slot
}

// refreshSoon learns the cluster's slots again in the background, at most
// once a second, unless a refresh is on its way.
func (s *Store) refreshSoon() {
	cn := s.conn.Load()
	if cn == nil || !cn.cluster || s.closed.Load() || !s.refreshing.CompareAndSwap(false, true) {
		return
	}
	s.background.Go(func() {
		defer s.refreshing.Store(false)
		if wait := time.Second - time.Since(time.Unix(0, s.refreshed.Load())); wait > 0 && !s.sleep(wait) {
			return
		}
		if err := s.refresh(cn); err != nil {
			s.log.Debug("redisstore: redis cluster slots not read", "err", err)
		}
	})
}

// refresh reads the cluster's slots (CLUSTER SLOTS, from the first node
// that answers) and installs them, keeping the nodes whose slots are
// unchanged with their breakers and states.
func (s *Store) refresh(cn *conn) error {
	s.refreshed.Store(time.Now().UnixNano())
	var errs []error
	for addr, c := range cn.client.Nodes() {
		ctx, cancel := context.WithTimeout(context.Background(), max(s.cfg.Timeout, 250*time.Millisecond))
		res, err := c.Do(ctx, c.B().ClusterSlots().Build()).ToArray()
		cancel()
		if err == nil {
			var ranges map[string][]string
			if ranges, err = masters(res, addr); err == nil {
				s.install(ranges)
				return nil
			}
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	return cmp.Or(errors.Join(errs...), errors.New("no cluster node known"))
}

// masters reads a CLUSTER SLOTS reply asked of addr: the slot ranges
// ("lo-hi") of each master, by its address.
func masters(res []rueidis.RedisMessage, addr string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, e := range res {
		r, err := e.ToArray()
		if err != nil || len(r) < 3 {
			return nil, fmt.Errorf("CLUSTER SLOTS: malformed entry: %v", err)
		}
		lo, err1 := r[0].AsInt64()
		hi, err2 := r[1].AsInt64()
		m, err3 := r[2].ToArray()
		if err := errors.Join(err1, err2, err3); err != nil || len(m) < 2 || lo < 0 || hi < lo || hi > 16383 {
			return nil, fmt.Errorf("CLUSTER SLOTS: malformed entry: %v", err)
		}
		host, _ := m[0].ToString()
		port, err := m[1].AsInt64()
		if err != nil {
			return nil, fmt.Errorf("CLUSTER SLOTS: malformed port: %w", err)
		}
		if host == "" || host == "?" { // the node asked, which knows no other name for itself
			host = addr[:strings.LastIndexByte(addr, ':')]
		}
		a := host + ":" + strconv.FormatInt(port, 10)
		out[a] = append(out[a], fmt.Sprintf("%d-%d", lo, hi))
	}
	return out, nil
}

// install makes ranges (each master's slot ranges) the store's topology.
func (s *Store) install(ranges map[string][]string) {
	s.topoMu.Lock()
	defer s.topoMu.Unlock()
	old := map[string]*node{}
	if t := s.topo.Load(); t != nil {
		for _, n := range t.nodes {
			old[n.slots] = n
		}
	}
	t := &topology{}
	for addr, rs := range ranges {
		slices.SortFunc(rs, func(a, b string) int { return cmp.Compare(first(a), first(b)) })
		slots := strings.Join(rs, ",")
		n := old[slots]
		if n == nil {
			n = s.newNode(slots, addr)
		} else if was := *n.addr.Load(); was != addr {
			n.addr.Store(&addr)
			s.log.Info("redisstore: redis cluster slots have a new master", "slots", slots, "node", addr, "was", was)
		}
		t.nodes = append(t.nodes, n)
	}
	slices.SortFunc(t.nodes, func(a, b *node) int { return cmp.Compare(first(a.slots), first(b.slots)) })
	for i, n := range t.nodes {
		for _, r := range strings.Split(n.slots, ",") {
			lo, hi, _ := strings.Cut(r, "-")
			a, _ := strconv.Atoi(lo)
			b, _ := strconv.Atoi(hi)
			for sl := a; sl <= b; sl++ {
				t.owner[sl] = uint16(i + 1)
			}
		}
	}
	s.topo.Store(t)
}

// first is the first slot of ranges.
func first(ranges string) int {
	lo, _, _ := strings.Cut(ranges, "-")
	n, _ := strconv.Atoi(lo)
	return n
}
