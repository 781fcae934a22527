package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/portero-rl/portero"
)

// Natural batching. A one-hit call (but the sliding log's) takes one of a
// few slots and runs the one-hit script at once: a lone caller never
// waits. Calls that arrive while every slot is taken queue up; when a call
// in flight returns, its slot passes to the queue, whose first call sends
// up to Config.Batch queued hits in one run of batch.lua, which decides
// each exactly and independently as the one-hit script would. Not on a
// cluster, where a batch would have to be one slot's.
//
// A call's deadline starts when it enters AllowAll, so its wait in the
// queue is spent out of its own Timeout: a queued call leaves at its
// deadline if no batch took it, and a batch runs until the earliest
// deadline among its calls.
type batcher struct {
	max, slots int
	mu         sync.Mutex
	inflight   int
	queue      []*batchItem
}

type batchItem struct {
	now      time.Time
	queued   time.Time // when it joined the queue
	deadline time.Time // the caller's, set before it queued
	c        *compiled
	hit      portero.Hit
	key      string
	taken    bool
	lead     []*batchItem // set for the call that sends the batch
	done     chan struct{}
	d        portero.Decision
	err      error
	rerun    bool // the batch could not decide it: run it alone
}

// batchSlots is how many one-hit calls or batches may be in flight before
// calls queue up: with one, Redis would idle while the client turns a
// batch around (bench's TestRedisReport measures it).
const batchSlots = 2

func newBatcher(max int) *batcher { return &batcher{max: max, slots: batchSlots} }

// do decides one hit, alone or in a batch, and fills out[0].
func (b *batcher) do(ctx context.Context, s *Store, cn *conn, now time.Time, cs []*compiled, hits []portero.Hit, c call, out []portero.Decision) error {
	b.mu.Lock()
	if b.inflight < b.slots && len(b.queue) == 0 {
		b.inflight++
		b.mu.Unlock()
		_, err := s.run(ctx, cn, now, cs, hits, c, true, out)
		b.release()
		return err
	}
	it := &batchItem{now: now, c: cs[0], hit: hits[0], key: c.keys[0], done: make(chan struct{}, 1)}
	it.deadline, _ = ctx.Deadline()
	it.queued = time.Now()
	b.queue = append(b.queue, it)
	b.mu.Unlock()
	select {
	case <-it.done:
	case <-ctx.Done():
		b.mu.Lock()
		if !it.taken {
			for i, x := range b.queue {
				if x == it {
					b.queue = append(b.queue[:i:i], b.queue[i+1:]...)
					break
				}
			}
			b.mu.Unlock()
			return ctx.Err()
		}
		b.mu.Unlock()
		<-it.done
	}
	if it.lead != nil {
		s.runBatch(cn, it.lead)
		b.release()
		for _, x := range it.lead[1:] {
			x.done <- struct{}{}
		}
	}
	if it.rerun {
		_, err := s.run(ctx, cn, now, cs, hits, c, true, out)
		return err
	}
	out[0] = it.d
	return it.err
}

// release passes a slot to the queue, or frees it.
func (b *batcher) release() {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.inflight--
		b.mu.Unlock()
		return
	}
	n := min(len(b.queue), b.max)
	batch := b.queue[:n:n]
	b.queue = append([]*batchItem(nil), b.queue[n:]...)
	for _, x := range batch {
		x.taken = true
	}
	b.mu.Unlock()
	batch[0].lead = batch
	batch[0].done <- struct{}{}
}

// runBatch decides the batch's hits in one script and fills each item. It
// runs until the earliest of the items' deadlines, and is not cancelled
// with the leader's context: the other callers still want their answers.
func (s *Store) runBatch(cn *conn, items []*batchItem) {
	var first time.Time
	for _, it := range items {
		if !it.deadline.IsZero() && (first.IsZero() || it.deadline.Before(first)) {
			first = it.deadline
		}
	}
	if first.IsZero() { // AllowAll always sets one; be safe
		first = time.Now().Add(s.cfg.Timeout)
	}
	ctx, cancel := context.WithDeadline(context.Background(), first)
	defer cancel()
	if len(items) == 1 {
		it := items[0]
		out := make([]portero.Decision, 1)
		_, it.err = s.run(ctx, cn, it.now, []*compiled{it.c}, []portero.Hit{it.hit}, oneCall(it.key, it.c.alg), true, out)
		it.d = out[0]
		return
	}
	keys := make([]string, len(items))
	args := make([]string, 5, 5+7*len(items))
	args[0], _, _ = s.clockArgs(time.Time{}, false)
	args[1], args[2], args[3], args[4] = "0", "0", "1", s.minTTL
	for i, it := range items {
		keys[i] = it.key
		a := s.argv(it.c, it.now)
		_, sec, ns := s.clockArgs(it.now, false)
		args = append(args, sec, ns, string(it.c.alg), strconv.FormatInt(it.hit.Cost, 10), a[0], it.c.p2(a, it.hit), a[2])
	}
	err := s.server.exec(func() error { // batches are never on a cluster
		if s.execHook != nil {
			if err := s.execHook(ctx, items); err != nil {
				return err
			}
		}
		res, err := s.scripts.batch.Exec(ctx, cn.client, keys, args).ToArray()
		if err != nil {
			return err
		}
		if len(res) != 5*len(items) {
			return errBatchReply
		}
		s.batches.Add(1)
		s.batched.Add(uint64(len(items)))
		for i, it := range items {
			v, err := five(res[5*i:])
			if err != nil || v[0] < 0 {
				it.rerun = true
				continue
			}
			it.d = it.c.decision(v[0] == 1, v[1], v[2], v[3], v[4])
		}
		return nil
	})
	if err == nil {
		return
	}
	for _, it := range items {
		if unavailable(err) {
			it.err = err // marked with the server (node.exec)
		} else {
			it.rerun = true // a script error: each alone names its own
		}
	}
}

var errBatchReply = fmt.Errorf("redisstore: %w: malformed batch reply", ErrScript)
