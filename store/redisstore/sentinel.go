package redisstore

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Redis Sentinel: the store asks the sentinels which server is the master
// of a master set, sends every script there, and follows a failover when
// the sentinels announce one (+switch-master), checking with them every
// DefaultSentinelRefresh too in case it missed the announcement. Two
// spellings: Config.Addrs with Config.SentinelMaster, or a URL
//
//	redis-sentinel://[[user]:password@]host:port[,host:port…]/master[/db][?sentinel_username=…&sentinel_password=…]
//
// (rediss-sentinel:// for TLS to the sentinels and the master), where the
// hosts are the sentinels (port 26379 when left out), the user and
// password those of the master, and the sentinel_ parameters the
// sentinels' own, when they require AUTH. See docs/distributed.md.

// Sentinel URL schemes.
const (
	SentinelScheme    = "redis-sentinel"
	SentinelTLSScheme = "rediss-sentinel"
)

// DefaultSentinelPort is the port of a sentinel address that names none.
const DefaultSentinelPort = "26379"

// DefaultSentinelRefresh is how often the store checks with the sentinels
// which server is the master, besides listening for their announcements
// (rueidis's SentinelOption.TopologyRefreshInterval).
const DefaultSentinelRefresh = 2 * time.Second

// parseSentinelURL reads the sentinel form above (ParseURL).
func parseSentinelURL(raw, scheme string) (rueidis.ClientOption, error) {
	var opt rueidis.ClientOption
	// url.Parse takes one host only: the authority is cut here.
	_, rest, _ := strings.Cut(raw, "://")
	rest, rawQuery, _ := strings.Cut(rest, "?")
	authority, rawPath, _ := strings.Cut(rest, "/")
	var user *url.Userinfo
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		u, err := url.Parse("redis://" + authority[:at+1] + "host")
		if err != nil {
			return opt, errors.New("malformed user or password")
		}
		user, authority = u.User, authority[at+1:]
	}
	if authority == "" {
		return opt, errors.New("no sentinel address: want " + scheme + "://host:port[,host:port…]/master")
	}
	for _, h := range strings.Split(authority, ",") {
		if !strings.Contains(h, ":") || strings.HasSuffix(h, "]") {
			h = net.JoinHostPort(strings.Trim(h, "[]"), DefaultSentinelPort)
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil || host == "" {
			return opt, fmt.Errorf("sentinel address %q: want host:port", h)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return opt, fmt.Errorf("sentinel address %q: bad port", h)
		}
		opt.InitAddress = append(opt.InitAddress, h)
	}
	upath, err := url.PathUnescape(rawPath)
	if err != nil {
		return opt, fmt.Errorf("path: %w", err)
	}
	query, err := url.ParseQuery(rawQuery)
	if err != nil {
		return opt, fmt.Errorf("query: %w", err)
	}
	path := strings.Split(upath, "/")
	if path[0] == "" || len(path) > 2 {
		return opt, errors.New("want the master set's name after the sentinels, and at most a database: " + scheme + "://host:port/master[/db]")
	}
	opt.Sentinel.MasterSet = path[0]
	if len(path) == 2 {
		if opt.SelectDB, err = strconv.Atoi(path[1]); err != nil || opt.SelectDB < 0 {
			return opt, fmt.Errorf("database %q: want a number", path[1])
		}
	}
	if user != nil {
		opt.Username = user.Username()
		opt.Password, _ = user.Password()
	}
	for k, v := range query {
		switch k {
		case "sentinel_username":
			opt.Sentinel.Username = v[0]
		case "sentinel_password":
			opt.Sentinel.Password = v[0]
		default:
			return opt, fmt.Errorf("unknown parameter %q: want sentinel_username or sentinel_password", k)
		}
	}
	if scheme == SentinelTLSScheme {
		opt.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		opt.Sentinel.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return opt, nil
}

// sentinelDefaults completes the sentinel options of opt, if any: the
// sentinels' dial timeout is the servers', and the topology is checked
// every DefaultSentinelRefresh.
func sentinelDefaults(opt *rueidis.ClientOption) {
	if opt.Sentinel.MasterSet == "" {
		return
	}
	opt.Sentinel.Dialer.Timeout = cmp.Or(opt.Sentinel.Dialer.Timeout, opt.Dialer.Timeout)
	opt.Sentinel.TopologyRefreshInterval = cmp.Or(opt.Sentinel.TopologyRefreshInterval, DefaultSentinelRefresh)
}
