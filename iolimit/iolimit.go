// Package iolimit limits the bytes per second that flow through an
// io.Reader or io.Writer with a token bucket of bytes: a Bucket refills at
// Rate bytes per second up to Burst bytes, and a Reader or Writer waits for
// a token per byte (backpressure, not dropping). With a burst B, a rate R
// and a link of M bytes per second, a transfer runs at full speed for
// B/(M−R) seconds (16 MB, 2 MB/s and 10 MB/s give 2 s), then at R.
//
// One Bucket may be shared by many Readers, Writers and goroutines, which
// then share its rate: the total of a host's uploads, say. The bucket is
// package algorithm's token bucket and the waiting portero.WaitN's.
package iolimit

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/algorithm"
)

// Bucket is a token bucket of bytes. Create it with NewBucket; it is safe
// for concurrent use, starts no goroutines, and starts full.
type Bucket struct {
	dec   algorithm.Decider
	burst int64

	mu    sync.Mutex
	state algorithm.State
	found bool
}

var _ portero.Limiter = (*Bucket)(nil)

// NewBucket returns a full bucket of burst bytes refilling at rate bytes
// per second. The rate may be at most 1e9 (1 GB/s: one byte per
// nanosecond, the bucket's resolution) and the burst must refill within 292
// years; errors wrap portero.ErrInvalidLimit.
func NewBucket(rate float64, burst int64) (*Bucket, error) {
	l := portero.Limit{Count: max(burst, 1), Window: time.Second, Burst: burst, Rate: rate}
	if burst <= 0 {
		return nil, fmt.Errorf("iolimit: %w: burst %d bytes: must be positive", portero.ErrInvalidLimit, burst)
	}
	if !(rate > 0) {
		return nil, fmt.Errorf("iolimit: %w: rate %v bytes/s: must be positive", portero.ErrInvalidLimit, rate)
	}
	d, err := algorithm.New(portero.TokenBucket, l)
	if err != nil {
		return nil, fmt.Errorf("iolimit: %w", err)
	}
	return &Bucket{dec: d, burst: burst}, nil
}

// Burst returns the bucket's capacity in bytes: the most a Reader or
// Writer asks for at once.
func (b *Bucket) Burst() int64 { return b.burst }

// AllowN implements portero.Limiter: it takes n tokens at now if the bucket
// holds them. The key is ignored: a Bucket is one key.
func (b *Bucket) AllowN(_ context.Context, _ string, now time.Time, n int64) (portero.Decision, error) {
	if err := algorithm.CheckCost(n, b.burst); err != nil {
		return portero.Decision{}, fmt.Errorf("iolimit: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s, d := b.dec.Decide(b.state, b.found, now.UnixNano(), n)
	if d.Allowed {
		b.state, b.found = s, true
	}
	return d, nil
}

// WaitN blocks until the bucket holds n tokens and takes them (n at most
// Burst), as portero.WaitN: it returns at once with an error wrapping
// context.DeadlineExceeded when the tokens would come after ctx's deadline.
func (b *Bucket) WaitN(ctx context.Context, n int64) error {
	_, err := portero.WaitN(ctx, b, "", n, time.Now)
	return err
}

// Reader limits the bytes read through it. It is not safe for concurrent
// Reads (no io.Reader is); its Bucket may be shared.
type Reader struct {
	ctx context.Context
	r   io.Reader
	b   *Bucket
}

// NewReader returns a Reader that reads from r at most Burst bytes at a
// time and waits for a token for each byte read before returning it. ctx
// bounds the waits: once it ends, Read returns its error.
func NewReader(ctx context.Context, r io.Reader, b *Bucket) *Reader {
	return &Reader{ctx: ctx, r: r, b: b}
}

// Read implements io.Reader. The bytes come from the underlying reader
// first, and Read returns them once the bucket has paid for them; when the
// wait fails, it returns them with the wait's error.
func (r *Reader) Read(p []byte) (int, error) {
	if int64(len(p)) > r.b.burst {
		p = p[:r.b.burst]
	}
	n, err := r.r.Read(p)
	if n > 0 {
		if werr := r.b.WaitN(r.ctx, int64(n)); werr != nil {
			return n, werr
		}
	}
	return n, err
}

// Writer limits the bytes written through it. It is not safe for
// concurrent Writes; its Bucket may be shared.
type Writer struct {
	ctx context.Context
	w   io.Writer
	b   *Bucket
}

// NewWriter returns a Writer that passes to w at most Burst bytes at a
// time, each piece once the bucket holds its tokens. ctx bounds the waits.
func NewWriter(ctx context.Context, w io.Writer, b *Bucket) *Writer {
	return &Writer{ctx: ctx, w: w, b: b}
}

// Write implements io.Writer. When a wait fails it returns the bytes
// written so far and the wait's error.
func (w *Writer) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		chunk := p
		if int64(len(chunk)) > w.b.burst {
			chunk = chunk[:w.b.burst]
		}
		if err := w.b.WaitN(w.ctx, int64(len(chunk))); err != nil {
			return written, err
		}
		n, err := w.w.Write(chunk)
		written += n
		if err != nil {
			return written, err
		}
		p = p[n:]
	}
	return written, nil
}
