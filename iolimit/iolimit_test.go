package iolimit_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/iolimit"
)

// The example: a bucket of B = 16 MB refilling at R = 2 MB/s, on a
// link of M = 10 MB/s.
const (
	mb    = 1_000_000
	burst = 16 * mb
	rate  = 2 * mb
	link  = 10 * mb
	chunk = 50_000 // bytes per write or read: 5 ms on the link
)

// slowLink is a writer and reader that moves link bytes per second: each
// call sleeps len(p)/link (virtual time under synctest) and records when
// it finished and how many bytes had gone through by then.
type slowLink struct {
	start time.Time
	total int64
	at    []time.Duration
	sum   []int64
}

func (l *slowLink) move(n int) {
	time.Sleep(time.Duration(n) * time.Second / link)
	l.total += int64(n)
	l.at = append(l.at, time.Since(l.start))
	l.sum = append(l.sum, l.total)
}

func (l *slowLink) Write(p []byte) (int, error) { l.move(len(p)); return len(p), nil }

func (l *slowLink) Read(p []byte) (int, error) { l.move(len(p)); return len(p), nil }

// bytesBy returns the bytes that had gone through by t.
func (l *slowLink) bytesBy(t time.Duration) int64 {
	var n int64
	for i, at := range l.at {
		if at <= t {
			n = l.sum[i]
		}
	}
	return n
}

// rate returns the mean rate in bytes per second over (from, to].
func (l *slowLink) rate(from, to time.Duration) float64 {
	return float64(l.bytesBy(to)-l.bytesBy(from)) / (to - from).Seconds()
}

// TestByteShapingBurstThenRate reproduces the 16 MB burst, 2 MB/s example on a virtual
// clock, through a Writer and through a Reader: a full 16 MB bucket lets
// the 10 MB/s link run at full speed for B/(M−R) = 16/8 = 2 s, then the
// transfer falls to R = 2 MB/s. With 50 kB pieces (5 ms on the link), the
// arithmetic: piece k may start at 5k ms while 16 MB + 2 MB/s·5k ms ≥
// 50 kB·(k+1), that is k ≤ 398, so 399 pieces (19.95 MB) go at full speed
// until 1.995 s; from 2 s on a piece starts every 25 ms.
func TestByteShapingBurstThenRate(t *testing.T) {
	for _, dir := range []string{"writer", "reader"} {
		t.Run(dir, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				b, err := iolimit.NewBucket(rate, burst)
				if err != nil {
					t.Fatal(err)
				}
				l := &slowLink{start: time.Now()}
				buf := make([]byte, chunk)
				end := l.start.Add(10*time.Second + 10*time.Millisecond)
				if dir == "writer" {
					w := iolimit.NewWriter(ctx, l, b)
					for time.Now().Before(end) {
						if _, err := w.Write(buf); err != nil {
							t.Fatal(err)
						}
					}
				} else {
					r := iolimit.NewReader(ctx, l, b)
					for time.Now().Before(end) {
						if _, err := io.ReadFull(r, buf); err != nil {
							t.Fatal(err)
						}
					}
				}
				// Full speed until the switch, then the refill rate.
				full := l.rate(0, 1900*time.Millisecond)
				slow := l.rate(2100*time.Millisecond, 10*time.Second)
				if math.Abs(full-link)/link > 0.003 {
					t.Errorf("rate over the first 1.9 s = %.0f B/s, want the link's %d (±0.3%%)", full, link)
				}
				if math.Abs(slow-rate)/rate > 0.005 {
					t.Errorf("rate from 2.1 s to 10 s = %.0f B/s, want the refill rate %d (±0.5%%)", slow, rate)
				}
				// The switch: the first gap between pieces longer than the
				// link's 5 ms, at B/(M−R) = 2 s, within a piece.
				var first time.Duration
				for i := 1; i < len(l.at); i++ {
					if l.at[i]-l.at[i-1] > 6*time.Millisecond {
						first = l.at[i-1]
						break
					}
				}
				if want := 2 * time.Second; first < want-10*time.Millisecond || first > want+10*time.Millisecond {
					t.Errorf("full speed ended at %v, want B/(M−R) = %v (±10 ms)", first, want)
				}
				if got := l.bytesBy(first); got < 19_950_000 || got > 20_000_000 {
					t.Errorf("bytes at full speed = %d, want about M·2 s = 20 MB (B + R·2 s)", got)
				}
				t.Logf("%s: %.3f MB/s until %v, %d bytes; then %.3f MB/s", dir, full/mb, first, l.bytesBy(first), slow/mb)
			})
		})
	}
}

// TestBucketShared: two writers on one bucket share its rate.
func TestBucketShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := iolimit.NewBucket(1000, 1000) // 1 kB/s, 1 kB burst
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var x, y bytes.Buffer
		done := make(chan struct{})
		go func() {
			iolimit.NewWriter(context.Background(), &x, b).Write(make([]byte, 3000))
			close(done)
		}()
		iolimit.NewWriter(context.Background(), &y, b).Write(make([]byte, 3000))
		<-done
		// 6000 bytes: the burst of 1000 at once, the other 5000 at 1 kB/s.
		if el := time.Since(start); el != 5*time.Second {
			t.Errorf("two writers of 3 kB on one 1 kB/s bucket took %v, want 5 s", el)
		}
	})
}

// TestDeadline: a write that would wait past ctx's deadline stops at once
// with DeadlineExceeded, reporting what it wrote.
func TestDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := iolimit.NewBucket(100, 100)
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		var out bytes.Buffer
		start := time.Now()
		n, err := iolimit.NewWriter(ctx, &out, b).Write(make([]byte, 250))
		if n != 100 || !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 0 {
			t.Errorf("Write past the deadline = %d, %v after %v; want the 100-byte burst, DeadlineExceeded, at once", n, err, time.Since(start))
		}
	})
}

func TestNewBucketErrors(t *testing.T) {
	for _, c := range []struct {
		rate  float64
		burst int64
	}{{0, 10}, {-1, 10}, {10, 0}, {2e9, 10}, {math.NaN(), 10}} {
		if _, err := iolimit.NewBucket(c.rate, c.burst); !errors.Is(err, portero.ErrInvalidLimit) {
			t.Errorf("NewBucket(%v, %d) = %v, want ErrInvalidLimit", c.rate, c.burst, err)
		}
	}
	b, _ := iolimit.NewBucket(10, 10)
	if err := b.WaitN(context.Background(), 11); !errors.Is(err, portero.ErrCostExceedsLimit) {
		t.Errorf("WaitN(more than the burst) = %v, want ErrCostExceedsLimit", err)
	}
}
