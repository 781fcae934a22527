package redisstore

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseSentinelURL(t *testing.T) {
	for _, tc := range []struct {
		url                 string
		addrs               []string
		master              string
		db                  int
		user, pass          string
		sentinelUser, sPass string
		tls                 bool
		err                 string
	}{
		{url: "redis-sentinel://127.0.0.1:26379/mymaster", addrs: []string{"127.0.0.1:26379"}, master: "mymaster"},
		{url: "redis-sentinel://a:1,b:2,c/mymaster/3", addrs: []string{"a:1", "b:2", "c:26379"}, master: "mymaster", db: 3},
		{url: "redis-sentinel://[::1]:5000,[::1]/m", addrs: []string{"[::1]:5000", "[::1]:26379"}, master: "m"},
		{url: "rediss-sentinel://u:p%40ss@h:1/m?sentinel_username=su&sentinel_password=sp", addrs: []string{"h:1"}, master: "m",
			user: "u", pass: "p@ss", sentinelUser: "su", sPass: "sp", tls: true},
		{url: "redis-sentinel://h:1", err: "master set's name"},
		{url: "redis-sentinel://h:1/", err: "master set's name"},
		{url: "redis-sentinel://h:1/m/0/x", err: "master set's name"},
		{url: "redis-sentinel://h:1/m/x", err: `database "x"`},
		{url: "redis-sentinel:///m", err: "no sentinel address"},
		{url: "redis-sentinel://h:99999/m", err: "bad port"},
		{url: "redis-sentinel://h:1,:2/m", err: `sentinel address ":2"`},
		{url: "redis-sentinel://h:1/m?master_set=x", err: `unknown parameter "master_set"`},
		{url: "redis://h:1/2", addrs: []string{"h:1"}, db: 2}, // rueidis's own forms pass through
	} {
		opt, err := ParseURL(tc.url)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseURL(%q) = %v, want an error with %q", tc.url, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseURL(%q) = %v", tc.url, err)
			continue
		}
		got := []any{opt.InitAddress, opt.Sentinel.MasterSet, opt.SelectDB, opt.Username, opt.Password, opt.Sentinel.Username, opt.Sentinel.Password, opt.TLSConfig != nil, opt.Sentinel.TLSConfig != nil}
		want := []any{tc.addrs, tc.master, tc.db, tc.user, tc.pass, tc.sentinelUser, tc.sPass, tc.tls, tc.tls}
		for i := range got {
			if g, w := got[i], want[i]; !equalAny(g, w) {
				t.Errorf("ParseURL(%q) field %d = %v, want %v", tc.url, i, g, w)
			}
		}
	}
}

func equalAny(a, b any) bool {
	if as, ok := a.([]string); ok {
		return slices.Equal(as, b.([]string))
	}
	return a == b
}

// sentinelDefaults refreshes the topology and bounds the sentinels' dial.
func TestSentinelDefaults(t *testing.T) {
	opt, err := ParseURL("redis-sentinel://h:1/m")
	if err != nil {
		t.Fatal(err)
	}
	opt.Dialer.Timeout = time.Second
	sentinelDefaults(&opt)
	if opt.Sentinel.TopologyRefreshInterval != DefaultSentinelRefresh || opt.Sentinel.Dialer.Timeout != time.Second {
		t.Errorf("sentinelDefaults: refresh %v, dial %v; want %v, 1s", opt.Sentinel.TopologyRefreshInterval, opt.Sentinel.Dialer.Timeout, DefaultSentinelRefresh)
	}
}

func FuzzParseSentinelURL(f *testing.F) {
	for _, s := range []string{"redis-sentinel://a:1,b:2/m/0", "rediss-sentinel://u:p@h/m?sentinel_password=x", "redis-sentinel://[::1]/m", "redis-sentinel://,/m"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		opt, err := ParseURL(s)
		if err != nil || !strings.HasPrefix(s, SentinelScheme) {
			return
		}
		if len(opt.InitAddress) == 0 || opt.Sentinel.MasterSet == "" || opt.SelectDB < 0 {
			t.Fatalf("ParseURL(%q) accepted %v, master %q, db %d", s, opt.InitAddress, opt.Sentinel.MasterSet, opt.SelectDB)
		}
	})
}
