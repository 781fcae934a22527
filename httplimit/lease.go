package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/engine"
	"github.com/portero-rl/portero/overload"
	"github.com/portero-rl/portero/policy"
)

// Concurrency rules: the engine's Admit takes a lease per rule that
// applies, and the middleware renews it while the handler runs
// (engine.Keeper) and gives it back however the handler returns (a panic,
// a client gone, a hijacked connection). A rule named in Config.Queues
// lets a request it refuses wait for a slot of its key in this process
// (overload.Waitlist, kept across Updates): a lease given back here wakes
// the first waiter, and every waiter tries again every leasePoll, for the
// slots other instances give back; one that waits in vain gets the refusal
// it would have had at once.

// leasePoll is how often a waiter for a slot tries again unwoken.
const leasePoll = 100 * time.Millisecond

// setQueues resolves queues by rule name into pre.queue, by rule index.
func (pre *prepared) setQueues(p *policy.Policy, queues map[string]overload.Queue) error {
	pre.queue = nil
	if len(queues) == 0 {
		return nil
	}
	pre.queue = make([]overload.Queue, len(p.Rules()))
	for name, q := range queues {
		r := p.Rule(name)
		switch {
		case r == nil:
			return fmt.Errorf("httplimit: Queues[%q]: no such rule", name)
		case !r.IsConcurrency():
			return fmt.Errorf("httplimit: Queues[%q]: not a concurrency rule; a rate rule waits by shaping (a %s rule and Shapes)", name, portero.LeakyQueue)
		}
		if err := q.Validate(); err != nil {
			return fmt.Errorf("httplimit: Queues[%q]: %w", name, err)
		}
		pre.queue[r.Index()] = q
	}
	return nil
}

// queueOf returns the queue of rule index i; ok is false when it has none.
func (pre *prepared) queueOf(i int) (overload.Queue, bool) {
	if i < len(pre.queue) && pre.queue[i].Size > 0 {
		return pre.queue[i], true
	}
	return overload.Queue{}, false
}

// lineKey names the waiting line of a concurrency rule's key.
func lineKey(rule, key string) string { return rule + "\x00" + key }

// queued returns the line and queue a refused verdict may wait in: when
// only concurrency rules refused it (not a failure policy) and the first
// has a queue.
func (pre *prepared) queued(v *engine.Verdict) (line string, q overload.Queue, ok bool) {
	if len(pre.queue) == 0 || len(v.Violated) == 0 {
		return "", overload.Queue{}, false
	}
	for _, i := range v.Violated {
		if res := &v.Results[i]; !res.Rule.IsConcurrency() || res.Failure != "" {
			return "", overload.Queue{}, false
		}
	}
	res := &v.Results[v.Violated[0]]
	if q, ok = pre.queueOf(res.Rule.Index); !ok {
		return "", overload.Queue{}, false
	}
	return lineKey(res.Rule.Name, res.Key), q, true
}

// errGone is the wait's error when the request ended while it waited.
var errGone = errors.New("httplimit: the request ended while it waited for a slot")

// wait holds a request a queued concurrency rule refused until it is
// admitted or waiting is no use (a deadline, a full queue, another
// refusal), leaving the last verdict in s.v. It returns errGone when the
// request's context ends first, or the engine's error.
func (l *Limiter) wait(cfg *Config, r *http.Request, s *scratch) error {
	ctx := r.Context()
	var w *overload.Waiter
	var line string
	defer func() {
		if w != nil {
			w.Leave()
		}
	}()
	for {
		next, q, ok := cfg.pre.queued(&s.v)
		if !ok {
			return nil
		}
		if w == nil || next != line {
			if w != nil {
				w.Leave()
			}
			dl, _ := ctx.Deadline()
			var err error
			if w, err = l.waiting.Join(next, q, time.Now(), dl); err != nil {
				w = nil
				return nil // a full FIFO queue: refused at once
			}
			line = next
		}
		switch err := w.Wait(ctx, leasePoll); {
		case errors.Is(err, overload.ErrEvicted), errors.Is(err, overload.ErrQueueTimeout):
			w = nil
			return nil // the refusal, after waiting as long as was any use
		case err != nil:
			w = nil
			return errGone
		}
		if err := cfg.admit(ctx, cfg.Now(), s); err != nil {
			return err
		}
	}
}

// signal wakes a waiter for each lease given back, whatever the
// configuration it joined under.
func (l *Limiter) signal(held []engine.Held) {
	if l.waiting.Idle() {
		return
	}
	for _, h := range held {
		l.waiting.Signal(lineKey(h.Rule.Name, h.Key))
	}
}

// releaseAll gives back every lease in held (engine.Release), reporting
// errors to Config.OnError.
func releaseAll(cfg *Config, r *http.Request, held []engine.Held) {
	engine.Release(r.Context(), held, cfg.onError(r))
}

// onError returns Config.OnError for r, or nil.
func (cfg *Config) onError(r *http.Request) func(error) {
	if cfg.OnError == nil {
		return nil
	}
	return func(err error) { cfg.OnError(r, err) }
}

// keep has an engine.Keeper renew v's leases while r runs; nil for none.
func (l *Limiter) keep(cfg *Config, r *http.Request, v *engine.Verdict) *engine.Keeper {
	return engine.Keep(r.Context(), v.Held(), cfg.Now, cfg.onError(r))
}

// release gives k's leases back and wakes a waiter for each; k may be nil.
func (l *Limiter) release(k *engine.Keeper) { l.signal(k.Release()) }
