package rlsstats

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/DataDog/datadog-go/v5/statsd"
)

// Mogrifier rewrites a statistic's name into a DogStatsD name and tags, as
// envoyproxy/ratelimit's USE_DOG_STATSD_MOGRIFIERS do: the first one whose
// Pattern matches a name renames it to Name and adds Tags, where $0, $1, …
// stand for the pattern's match and groups (e.g. pattern
// `^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$`, name
// `ratelimit.service.rate_limit.$3`, tags domain:$1, descriptor:$2).
type Mogrifier struct {
	Pattern *regexp.Regexp
	Name    string
	Tags    map[string]string
}

// NewMogrifier compiles a mogrifier; what is missing or does not compile
// is an error that names it.
func NewMogrifier(pattern, name string, tags map[string]string) (Mogrifier, error) {
	if pattern == "" {
		return Mogrifier{}, fmt.Errorf("no pattern")
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return Mogrifier{}, fmt.Errorf("pattern %q: %w", pattern, err)
	}
	if name == "" {
		return Mogrifier{}, fmt.Errorf("no name")
	}
	for k, v := range tags {
		if k == "" || v == "" {
			return Mogrifier{}, fmt.Errorf("tag %q:%q: want a key and a value", k, v)
		}
	}
	return Mogrifier{Pattern: re, Name: name, Tags: tags}, nil
}

var groupRef = regexp.MustCompile(`\$\d+`)

// expand replaces $N in s by the Nth of matches; a reference past the
// groups stays as written, as there.
func expand(s string, matches []string) string {
	return groupRef.ReplaceAllStringFunc(s, func(ref string) string {
		i, err := strconv.Atoi(ref[1:])
		if err != nil || i >= len(matches) {
			return ref
		}
		return matches[i]
	})
}

// dogSink is a gostats sink that sends DogStatsD: gostats's serialized
// tags (name.__key=value) become DogStatsD tags (key:value), and the
// mogrifiers rename. It sends through DataDog's own client, as
// envoyproxy/ratelimit does (without client-side aggregation: gostats
// already sends counters as the difference since the last flush).
type dogSink struct {
	client     *statsd.Client
	mogrifiers []Mogrifier
}

func newDogSink(addr string, mogrifiers []Mogrifier) (*dogSink, error) {
	c, err := statsd.New(addr, statsd.WithoutClientSideAggregation())
	if err != nil {
		return nil, fmt.Errorf("dogstatsd address %q: %w", addr, err)
	}
	return &dogSink{client: c, mogrifiers: mogrifiers}, nil
}

// nameAndTags splits gostats's name.__key=value serialization and applies
// the first mogrifier that matches. Tags are sorted by key (DogStatsD
// gives their order no meaning; sorted, the lines are reproducible).
func (d *dogSink) nameAndTags(name string) (string, []string) {
	var tags []string
	if short, rest, ok := strings.Cut(name, ".__"); ok {
		name = short
		for _, pair := range strings.Split(rest, ".__") {
			if k, v, ok := strings.Cut(pair, "="); ok {
				tags = append(tags, k+":"+v)
			}
		}
	}
	for _, m := range d.mogrifiers {
		matches := m.Pattern.FindStringSubmatch(name)
		if matches == nil {
			continue
		}
		keys := make([]string, 0, len(m.Tags))
		for k := range m.Tags {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			tags = append(tags, k+":"+expand(m.Tags[k], matches))
		}
		return expand(m.Name, matches), tags
	}
	return name, tags
}

func (d *dogSink) FlushCounter(name string, value uint64) {
	name, tags := d.nameAndTags(name)
	_ = d.client.Count(name, int64(value), tags, 1) // a lost datagram is statsd's contract
}

func (d *dogSink) FlushGauge(name string, value uint64) {
	name, tags := d.nameAndTags(name)
	_ = d.client.Gauge(name, float64(value), tags, 1)
}

func (d *dogSink) FlushTimer(name string, milliseconds float64) {
	name, tags := d.nameAndTags(name)
	_ = d.client.Timing(name, time.Duration(milliseconds)*time.Millisecond, tags, 1)
}

// Flush sends what the client buffered (gostats calls it after a flush).
func (d *dogSink) Flush() { _ = d.client.Flush() }
