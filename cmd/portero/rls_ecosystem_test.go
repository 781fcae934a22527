package main

import (
	"strings"
	"testing"
)

// TestDogstatsdFlags: --dogstatsd-mogrifier reads one mogrifier per flag,
// in order, and says which flag is wrong and why.
func TestDogstatsdFlags(t *testing.T) {
	f := ecosystemFlags{statsd: "127.0.0.1:8125", statsdFlush: 1, dogstatsd: true, dogMogrifiers: []string{
		`{"pattern":"^a\\.(.*)$","name":"a","tags":{"rest":"$1"}}`, `{"pattern":"b","name":"b"}`}}
	o, err := f.statsdOptions()
	if err != nil {
		t.Fatal(err)
	}
	if !o.DogStatsd || len(o.Mogrifiers) != 2 || o.Mogrifiers[0].Tags["rest"] != "$1" || o.Mogrifiers[1].Name != "b" {
		t.Fatalf("options = %+v", o)
	}
	for _, c := range []struct {
		dog  bool
		mogs []string
		want string
	}{
		{false, []string{`{"pattern":"b","name":"b"}`}, "only with --dogstatsd"},
		{true, []string{`{"pattern":"b","name":"b"}`, `{"pattern":"b"}`}, "--dogstatsd-mogrifier 2: no name"},
		{true, []string{`{"pattern":"(","name":"b"}`}, "--dogstatsd-mogrifier 1: pattern"},
		{true, []string{`{"patern":"b","name":"b"}`}, `unknown field "patern"`},
		{true, []string{`not json`}, "--dogstatsd-mogrifier 1"},
	} {
		f := ecosystemFlags{statsd: "127.0.0.1:8125", statsdFlush: 1, dogstatsd: c.dog, dogMogrifiers: c.mogs}
		if _, err := f.statsdOptions(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v: error %v, want one mentioning %q", c.dog, c.mogs, err, c.want)
		}
	}
}
