package client

import "time"

// Backoff returns the ceiling of the wait before retry n when the server gave
// no usable Retry-After: min(cap, base·2^(n−1)). Retries are numbered from 1
// (the first retry is n = 1, i.e. the second attempt), so with base 0.5 s and
// cap 10 s the ceilings are 0.5 s, 1 s, 2 s, 4 s, 8 s, 10 s, 10 s, … It returns
// 0 for n < 1 or base <= 0, and never overflows for large n.
//
// The Transport waits a duration drawn uniformly from [0, Backoff(n, …))
// ("full jitter"), see [FullJitter].
func Backoff(n int, base, cap time.Duration) time.Duration {
	if n < 1 || base <= 0 {
		return 0
	}
	d := base
	for i := 1; i < n; i++ {
		if d >= cap || d > (1<<62)/time.Duration(2) {
			break
		}
		d *= 2
	}
	if cap > 0 && d > cap {
		d = cap
	}
	return d
}

// FullJitter scales ceiling by u, a uniform random number in [0, 1): the
// "full jitter" of the AWS backoff study, which spreads clients refused at
// the same instant over the whole interval instead of sending them back in
// waves. u outside [0, 1) is clamped.
func FullJitter(ceiling time.Duration, u float64) time.Duration {
	switch {
	case u <= 0 || ceiling <= 0:
		return 0
	case u >= 1:
		return ceiling
	}
	return time.Duration(float64(ceiling) * u)
}
