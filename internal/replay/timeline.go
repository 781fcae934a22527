package replay

import "time"

// widths are the bucket widths of a timeline, each a multiple of the one
// before, so that buckets merge exactly when the replay outgrows one.
var widths = []time.Duration{time.Second, 10 * time.Second, time.Minute, 5 * time.Minute, 15 * time.Minute,
	time.Hour, 6 * time.Hour, 24 * time.Hour, 7 * 24 * time.Hour}

// MaxBuckets is the most buckets a timeline keeps: past it, the width
// grows (1 s, 10 s, 1 min, 5 min, 15 min, 1 h, 6 h, 1 d, 1 week), so that a
// week of logs is 5-minute buckets and memory never follows the log's
// length.
const MaxBuckets = 2100

// timeline counts events of several series in buckets of one width,
// aligned to multiples of the width since the Unix epoch.
type timeline struct {
	series int
	width  time.Duration
	wi     int
	start  time.Time // the first bucket's start
	counts [][]int64 // [bucket][series]
}

func newTimeline(series int) *timeline { return &timeline{series: series, width: widths[0]} }

// add counts n in series s at t; t never goes back before the first
// bucket (the replay's clock only goes forward).
func (tl *timeline) add(t time.Time, s int, n int64) {
	if tl.start.IsZero() {
		tl.start = t.Truncate(tl.width)
	}
	i := int(t.Sub(tl.start) / tl.width)
	for i >= MaxBuckets && tl.wi+1 < len(widths) {
		tl.widen()
		i = int(t.Sub(tl.start) / tl.width)
	}
	if i < 0 {
		i = 0
	}
	for len(tl.counts) <= i {
		tl.counts = append(tl.counts, make([]int64, tl.series))
	}
	tl.counts[i][s] += n
}

// widen moves to the next width, merging buckets.
func (tl *timeline) widen() {
	tl.wi++
	w := widths[tl.wi]
	start := tl.start.Truncate(w)
	var merged [][]int64
	for i, c := range tl.counts {
		j := int(tl.start.Add(time.Duration(i)*tl.width).Sub(start) / w)
		for len(merged) <= j {
			merged = append(merged, make([]int64, tl.series))
		}
		for s, n := range c {
			merged[j][s] += n
		}
	}
	tl.width, tl.start, tl.counts = w, start, merged
}

// at returns the start of bucket i.
func (tl *timeline) at(i int) time.Time { return tl.start.Add(time.Duration(i) * tl.width) }
