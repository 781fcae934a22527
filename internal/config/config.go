// Package config reads Portero's YAML configuration file into what the
// gateway runs: a policy, client-IP, store, upstreams and routes, and the
// API-gateway model (package plans). Parse returns a validated Config or
// every problem at once, each with file:line:column and field; the format
// is documented in docs/configuration.md.
package config

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/portero-rl/portero"
	"github.com/portero-rl/portero/clientip"
	"github.com/portero-rl/portero/internal/config/fileerr"
	"github.com/portero-rl/portero/internal/config/yamlwalk"
	"github.com/portero-rl/portero/internal/plans"
	"github.com/portero-rl/portero/internal/tlsreload"
	"github.com/portero-rl/portero/overload"
	"github.com/portero-rl/portero/policy"
	"github.com/portero-rl/portero/store/redisstore"
)

//go:embed default.yaml
var defaultYAML []byte

// Default returns the embedded default configuration file, the one
// `portero serve` runs without --config.
func Default() []byte { return bytes.Clone(defaultYAML) }

// DefaultName is the file name errors in the default configuration mention.
const DefaultName = "(built-in default.yaml)"

// File is the configuration as written in YAML. Field documentation lives
// in docs/configuration.md; zero values mean the documented defaults.
type File struct {
	Server    Server              `yaml:"server,omitempty"`
	Admin     Admin               `yaml:"admin,omitempty"`
	Store     Store               `yaml:"store,omitempty"`
	ClientIP  ClientIP            `yaml:"client_ip,omitempty"`
	Identity  Identity            `yaml:"identity,omitempty"`
	Headers   Headers             `yaml:"headers,omitempty"`
	Upstreams map[string]Upstream `yaml:"upstreams,omitempty"`
	Routes    []Route             `yaml:"routes,omitempty"`
	Rules     []Rule              `yaml:"rules,omitempty"`
	// The API-gateway model (model.go).
	AddressLists   map[string][]string `yaml:"address_lists,omitempty"`
	Levels         Levels              `yaml:"levels,omitempty"`
	Plans          map[string]Plan     `yaml:"plans,omitempty"`
	APIKeys        APIKeys             `yaml:"api_keys,omitempty"`
	RateRules      []RateRule          `yaml:"rate_rules,omitempty"`
	LimitsEndpoint string              `yaml:"limits_endpoint,omitempty"`
	Overload       *Overload           `yaml:"overload,omitempty"`
}

// Server is the gateway listener and its timeouts (Go durations).
type Server struct {
	Listen            string `yaml:"listen,omitempty"`
	ReadHeaderTimeout string `yaml:"read_header_timeout,omitempty"`
	ReadTimeout       string `yaml:"read_timeout,omitempty"`
	WriteTimeout      string `yaml:"write_timeout,omitempty"`
	IdleTimeout       string `yaml:"idle_timeout,omitempty"`
	ShutdownTimeout   string `yaml:"shutdown_timeout,omitempty"`
	DrainPeriod       string `yaml:"drain_period,omitempty"`
	MaxInFlight       int    `yaml:"max_in_flight,omitempty"`
	TLS               TLS    `yaml:"tls,omitempty"`
}

// TLS is a listener's certificate, read again when the files change.
type TLS struct {
	CertFile string `yaml:"cert_file,omitempty"`
	KeyFile  string `yaml:"key_file,omitempty"`
	ClientCA string `yaml:"client_ca,omitempty"`
}

// Admin is the admin listener.
type Admin struct {
	Listen   string `yaml:"listen,omitempty"`
	Token    string `yaml:"token,omitempty"`
	TokenEnv string `yaml:"token_env,omitempty"`
	TLS      TLS    `yaml:"tls,omitempty"`
}

// Store selects where counters live.
type Store struct {
	Type       string  `yaml:"type,omitempty"`
	URL        string  `yaml:"url,omitempty"`
	OnError    string  `yaml:"on_error,omitempty"`
	LocalShare float64 `yaml:"local_share,omitempty"`
	Timeout    string  `yaml:"timeout,omitempty"`
	MaxKeys    int     `yaml:"max_keys,omitempty"`
}

// ClientIP says how the client address is found.
type ClientIP struct {
	TrustedProxies []string `yaml:"trusted_proxies,omitempty"`
	Header         string   `yaml:"header,omitempty"`
	IPv6Prefix     int      `yaml:"ipv6_prefix,omitempty"`
	IPv4Prefix     int      `yaml:"ipv4_prefix,omitempty"`
}

// Identity names the headers an authenticating proxy sets.
type Identity struct {
	UserHeader   string `yaml:"user_header,omitempty"`
	TenantHeader string `yaml:"tenant_header,omitempty"`
}

// Headers selects optional response headers.
type Headers struct {
	Legacy bool `yaml:"legacy,omitempty"`
}

// Upstream is a service the gateway forwards to.
type Upstream struct {
	Type          string `yaml:"type,omitempty"`
	URL           string `yaml:"url,omitempty"`
	Timeout       string `yaml:"timeout,omitempty"`
	DialTimeout   string `yaml:"dial_timeout,omitempty"`
	PreserveHost  bool   `yaml:"preserve_host,omitempty"`
	MaxIdleConns  int    `yaml:"max_idle_conns,omitempty"`
	FlushInterval string `yaml:"flush_interval,omitempty"`
}

// Match selects requests, for rules and routes.
type Match struct {
	Methods []string          `yaml:"methods,omitempty"`
	Path    string            `yaml:"path,omitempty"`
	Host    string            `yaml:"host,omitempty"`
	Headers map[string]string `yaml:"headers,omitempty"`
	// Addresses and NotAddresses name address lists or give CIDRs.
	Addresses    []string `yaml:"addresses,omitempty"`
	NotAddresses []string `yaml:"not_addresses,omitempty"`
}

// Route sends matching requests to an upstream; the first match wins.
type Route struct {
	Name        string `yaml:"name,omitempty"`
	Match       Match  `yaml:"match,omitempty"`
	Upstream    string `yaml:"upstream"`
	StripPrefix string `yaml:"strip_prefix,omitempty"`
}

// Rule is one entry of the file's rules, as written (compiled into a
// policy.Rule).
type Rule struct {
	Name      string `yaml:"name"`
	Match     Match  `yaml:"match,omitempty"`
	Key       string `yaml:"key"`
	Algorithm string `yaml:"algorithm,omitempty"`
	Limit     string `yaml:"limit"`
	Cost      string `yaml:"cost,omitempty"`
	Mode      string `yaml:"mode,omitempty"`
	// CountResponses and Reserve: rules settled after the response.
	CountResponses []string     `yaml:"count_responses,omitempty"`
	Reserve        int64        `yaml:"reserve,omitempty"`
	Budget         string       `yaml:"budget,omitempty"` // a batch's duration
	Concurrency    *Concurrency `yaml:"concurrency,omitempty"`
	Queue          *Queue       `yaml:"queue,omitempty"`
	Shape          *Shape       `yaml:"shape,omitempty"`
	Priority       string       `yaml:"priority,omitempty"`
}

// Config is a validated configuration, ready to run.
type Config struct {
	Source   string // the file it came from (or DefaultName)
	File     File   // as written
	Policy   *policy.Policy
	ClientIP clientip.Config
	// AdminListen is empty when the admin listener is off; AdminToken when
	// it takes no bearer token.
	Listen, AdminListen string
	AdminToken          string

	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout, ShutdownTimeout time.Duration
	// DrainPeriod is how long /readyz answers 503 on SIGTERM before the
	// listeners close.
	DrainPeriod time.Duration
	// Overload is the whole service's load shedding; nil when off.
	Overload *OverloadConfig
	// Priorities give requests their class for shedding: the first of the
	// rules with a priority that matches decides.
	Priorities []PriorityRule
	// Shapes and Queues are the rules' shape and queue sections, by name.
	Shapes map[string]overload.Shape
	Queues map[string]overload.Queue
	// StoreType is "memory" or "redis"; StoreURL the Redis URL.
	StoreType, StoreURL string
	// OnError is FailAllow (the default), FailDeny or FailLocal (redis
	// only); never FailError: the gateway has no caller to tell.
	OnError portero.FailurePolicy
	// LocalShare is what one instance may admit from memory while Redis
	// fails (on_error: local); 0 means 1.
	LocalShare   float64
	StoreTimeout time.Duration // 0 means the store's default
	MaxKeys      int           // per rule of the memory store; 0 its default
	// Env lists the environment variables the file reads.
	Env []EnvVar
	// ServerTLS and AdminTLS are off where not Enabled.
	ServerTLS, AdminTLS tlsreload.Files
	// Files lists the TLS files missing under Options.AllowUnsetEnv.
	Files []FileNeed
	// Warnings are settings that load but do less than they seem to say.
	Warnings  []Warning
	Upstreams map[string]*UpstreamConfig
	Routes    []*RouteConfig
	Gateway   plans.Model
}

// UpstreamConfig is a validated upstream.
type UpstreamConfig struct {
	Name                              string
	Demo                              bool
	URL                               *url.URL
	Timeout, DialTimeout, FlushPeriod time.Duration
	PreserveHost                      bool
	MaxIdleConns                      int
}

// RouteConfig is a validated route.
type RouteConfig struct {
	Name        string
	Match       policy.Match
	Upstream    *UpstreamConfig
	StripPrefix string
}

// Defaults of the fields whose zero value means "default".
const (
	DefaultListen            = "127.0.0.1:8080"
	DefaultAdminListen       = "127.0.0.1:9090"
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 60 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultShutdownTimeout   = 30 * time.Second
	DefaultDrainPeriod       = 5 * time.Second
	DefaultUpstreamTimeout   = 30 * time.Second
	DefaultDialTimeout       = 5 * time.Second
)

// FieldError is one problem in a configuration file, at its line, column
// and field.
type FieldError = fileerr.Error

// Options tune ParseWith and LoadWith; the zero value is `portero serve`'s.
type Options struct {
	// AllowUnsetEnv lists an unset environment variable (Config.Env) and
	// a missing TLS file (Config.Files) instead of refusing them: for
	// `portero config validate` where the production secrets are not.
	AllowUnsetEnv bool
}

// Place is where a setting is: its file, line, column and field.
type Place struct {
	File         string
	Line, Column int
	Field        string
}

func (pl Place) say(msg string) string {
	return fileerr.Format(pl.File, pl.Line, pl.Column, pl.Field, msg)
}

// place returns where the field at path is.
func (p *parser) place(path []any) Place {
	n := p.node(path...)
	return Place{File: p.file, Line: n.Line, Column: n.Column, Field: fieldName(path)}
}

// EnvVar is an environment variable a configuration reads, and where.
type EnvVar struct {
	Place
	Name string
	Set  bool // it had a value when the file was read
}

// String describes the need, as `config validate` prints it.
func (e EnvVar) String() string {
	state := "set here"
	if !e.Set {
		state = "unset here"
	}
	return e.say(fmt.Sprintf("needs environment variable %s (%s)", e.Name, state))
}

// FileNeed is a file a configuration names that was missing where checked.
type FileNeed struct {
	Place
	Path string
}

// String describes the need, as `config validate` prints it.
func (n FileNeed) String() string { return n.say(fmt.Sprintf("needs file %s (missing here)", n.Path)) }

// Warning is a setting that loads but may not do what its writer meant.
type Warning struct {
	Place
	Msg string
}

// String describes the warning as `FILE:LINE:COLUMN: warning: FIELD: MESSAGE`.
func (w Warning) String() string {
	return fileerr.Format(w.File, w.Line, w.Column, "warning: "+w.Field, w.Msg)
}

// Errors lists every problem of a configuration, in file order.
type Errors []*FieldError

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Load reads and parses the file at path (at most fileerr.MaxSize).
func Load(path string) (*Config, error) { return LoadWith(path, Options{}) }

// LoadWith is Load with options.
func LoadWith(path string, opts Options) (*Config, error) {
	data, err := fileerr.Read(path)
	if errors.Is(err, fileerr.ErrTooLarge) {
		return nil, Errors{{File: path, Msg: fileerr.ErrTooLarge.Error()}}
	}
	if err != nil {
		return nil, err
	}
	return ParseWith(path, data, opts)
}

// LoadDefault parses the embedded default configuration.
func LoadDefault() (*Config, error) { return Parse(DefaultName, defaultYAML) }

// Parse reads a configuration from data, named name in its Errors.
func Parse(name string, data []byte) (*Config, error) { return ParseWith(name, data, Options{}) }

// ParseWith is Parse with options.
func ParseWith(name string, data []byte, opts Options) (*Config, error) {
	p := &parser{file: name, data: data, opts: opts, walked: map[string]bool{}}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, p.yamlErrors(err)
	}
	p.root = &root
	var f File
	p.walk(&root, &f)
	c := p.validate(&f)
	if len(p.errs) > 0 {
		return nil, sortErrors(p.errs)
	}
	c.Warnings = p.warnings
	return c, nil
}

// Marshal renders f as YAML, for `portero config` and the admin API.
func Marshal(f *File) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(f); err != nil {
		return nil, err
	}
	return b.Bytes(), enc.Close()
}

type parser struct {
	file string
	data []byte // the file's text, for syntax errors
	opts Options
	root *yaml.Node
	errs Errors
	// problems counts the problems found, unsaid ones too: a section with
	// any is not built further.
	problems int
	// walked holds the fields the walker reported (and those its
	// suggestions name): validation would speak of the zero left there.
	walked   map[string]bool
	warnings []Warning
	// zeros holds the number fields written as 0, which their zero value
	// cannot tell from a field left out.
	zeros map[string]bool
	lists plans.AddressLists
}

// yamlErrors turns a YAML syntax error into Errors.
func (p *parser) yamlErrors(err error) error {
	line, col, msg := yamlwalk.SyntaxError(p.data, err)
	return Errors{{File: p.file, Line: line, Column: col, Msg: msg}}
}

// node finds the YAML node at a path of keys (string) and indexes (int),
// or the deepest found: a missing field's error points at its parent.
func (p *parser) node(path ...any) *yaml.Node {
	n := p.root
	if n == nil {
		return nil
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for _, step := range path {
		var next *yaml.Node
		switch s := step.(type) {
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == s {
						next = n.Content[i+1]
						break
					}
				}
			}
		case int:
			if n.Kind == yaml.SequenceNode && s < len(n.Content) {
				next = n.Content[s]
			}
		}
		if next == nil {
			return n
		}
		n = next
	}
	return n
}

// fieldName renders a path as rules[2].limit.
func fieldName(path []any) string {
	var b strings.Builder
	for _, step := range path {
		switch s := step.(type) {
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s)
		case int:
			fmt.Fprintf(&b, "[%d]", s)
		}
	}
	return b.String()
}

// warnf notes a warning about the field at path.
func (p *parser) warnf(path []any, format string, args ...any) {
	p.warnings = append(p.warnings, Warning{Place: p.place(path), Msg: fmt.Sprintf(format, args...)})
}

func (p *parser) errorf(path []any, format string, args ...any) {
	p.nodeErr(p.node(path...), path, false, format, args...)
}

// nodeErr reports a problem at node n (nil: line 1, column 1) in field
// path; walker errors also mark path as reported.
func (p *parser) nodeErr(n *yaml.Node, path []any, walker bool, format string, args ...any) {
	p.problems++
	field := fieldName(path)
	if !walker && p.reported(field) {
		return
	}
	if walker {
		p.walked[field] = true
	}
	line, col := 1, 1
	if n != nil && n.Line > 0 {
		line, col = n.Line, n.Column
	}
	p.errs = append(p.errs, &FieldError{File: p.file, Line: line, Column: col, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// reported reports whether the walker reported field or one containing it.
func (p *parser) reported(field string) bool {
	if p.walked[""] {
		return true // the file is no mapping: nothing more to say
	}
	for f := field; f != ""; {
		if p.walked[f] {
			return true
		}
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return false
}

func at(path ...any) []any { return path }

// zero reports whether the number at path was written as 0: checked as a
// value, not taken as the default.
func (p *parser) zero(path []any) bool { return p.zeros[fieldName(path)] }

func (p *parser) duration(s string, def time.Duration, path []any) time.Duration {
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		p.errorf(path, "%q: want a duration such as 5s or 1m30s", s)
		return def
	}
	return d
}

// validate checks f, section by section, into a Config.
func (p *parser) validate(f *File) *Config {
	c := &Config{Source: p.file, File: *f}
	p.server(f, c)
	p.admin(f, c)
	p.store(f, c)
	p.clientIP(f, c)
	p.upstreams(f, c)
	p.addressLists(f)
	p.routes(f, c)
	rules, seen, ruleOK := p.rules(f, c)
	rules = p.gatewayModel(f, c, rules, seen)
	if ruleOK && len(p.errs) == 0 {
		pol, err := policy.New(rules, policy.Options{IPv6Prefix: f.ClientIP.IPv6Prefix, IPv4Prefix: f.ClientIP.IPv4Prefix})
		if err != nil {
			p.errorf(at("rules"), "%v", err)
		}
		c.Policy = pol
	}
	return c
}

// server reads the gateway listener.
func (p *parser) server(f *File, c *Config) {
	c.Listen = f.Server.Listen
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	p.address(c.Listen, at("server", "listen"))
	c.ReadHeaderTimeout = p.duration(f.Server.ReadHeaderTimeout, DefaultReadHeaderTimeout, at("server", "read_header_timeout"))
	c.ReadTimeout = p.duration(f.Server.ReadTimeout, DefaultReadTimeout, at("server", "read_timeout"))
	c.WriteTimeout = p.duration(f.Server.WriteTimeout, DefaultWriteTimeout, at("server", "write_timeout"))
	c.IdleTimeout = p.duration(f.Server.IdleTimeout, DefaultIdleTimeout, at("server", "idle_timeout"))
	c.ShutdownTimeout = p.duration(f.Server.ShutdownTimeout, DefaultShutdownTimeout, at("server", "shutdown_timeout"))
	c.DrainPeriod = p.duration(f.Server.DrainPeriod, DefaultDrainPeriod, at("server", "drain_period"))
	p.overload(f, c)
	c.ServerTLS = p.tls(c, f.Server.TLS, at("server", "tls"))
}

// admin reads the admin listener.
func (p *parser) admin(f *File, c *Config) {
	switch f.Admin.Listen {
	case "":
		c.AdminListen = DefaultAdminListen
	case "off":
	default:
		c.AdminListen = f.Admin.Listen
		p.address(c.AdminListen, at("admin", "listen"))
	}
	c.AdminToken = f.Admin.Token
	if f.Admin.TokenEnv != "" {
		path := at("admin", "token_env")
		if f.Admin.Token != "" {
			p.errorf(path, "give token or token_env, not both")
		}
		c.AdminToken = os.Getenv(f.Admin.TokenEnv)
		c.Env = append(c.Env, EnvVar{Place: p.place(path), Name: f.Admin.TokenEnv, Set: c.AdminToken != ""})
		if c.AdminToken == "" && !p.opts.AllowUnsetEnv {
			p.errorf(path, "environment variable %s is empty or unset", f.Admin.TokenEnv)
		}
	}
	c.AdminTLS = p.tls(c, f.Admin.TLS, at("admin", "tls"))
}

// store reads where counters live and what happens when the store fails.
func (p *parser) store(f *File, c *Config) {
	switch f.Store.Type {
	case "", "memory":
		c.StoreType = "memory"
		if f.Store.URL != "" {
			p.errorf(at("store", "url"), "a memory store takes no url (did you mean type: redis?)")
		}
	case "redis":
		c.StoreType = "redis"
		c.StoreURL = f.Store.URL
		if f.Store.URL == "" {
			p.errorf(at("store", "url"), "required for type redis, such as redis://127.0.0.1:6379/0")
		} else if _, err := redisstore.ParseURL(f.Store.URL); err != nil {
			p.errorf(at("store", "url"), "%v: want redis://[user:password@]host:port[/db], rediss://… for TLS, or redis-sentinel://host:port[,host:port…]/master[/db]", err)
		}
	default:
		p.errorf(at("store", "type"), "%q: want memory or redis", f.Store.Type)
	}
	c.OnError = portero.FailAllow
	if f.Store.OnError != "" {
		pol, err := portero.ParseFailurePolicy(f.Store.OnError)
		switch {
		case err != nil:
			p.errorf(at("store", "on_error"), "%v: allow lets requests pass when the store fails, deny answers 503, local decides in memory (redis only)", err)
		case pol == portero.FailError:
			p.errorf(at("store", "on_error"), "error: the gateway has no caller to report a store failure to; want allow, deny or local")
		case pol == portero.FailLocal && c.StoreType != "redis":
			p.errorf(at("store", "on_error"), "local applies to the redis store only")
		default:
			c.OnError = pol
		}
	}
	if v := f.Store.LocalShare; (v != 0 || p.zero(at("store", "local_share"))) && (v <= 0 || v > 1 || c.OnError != portero.FailLocal) {
		p.errorf(at("store", "local_share"), "%v: want a share in (0, 1], with on_error: local", v)
	}
	c.LocalShare = f.Store.LocalShare
	before := p.problems
	c.StoreTimeout = p.duration(f.Store.Timeout, 0, at("store", "timeout"))
	if p.problems == before && f.Store.Timeout != "" && c.StoreTimeout == 0 {
		p.errorf(at("store", "timeout"), "%s: want how long one decision may wait for the store, more than zero (leave timeout out for the default)", f.Store.Timeout)
	}
	if f.Store.MaxKeys < 0 || p.zero(at("store", "max_keys")) {
		p.errorf(at("store", "max_keys"), "%d: want the most keys per rule, at least 1 (leave max_keys out for the default)", f.Store.MaxKeys)
	}
	c.MaxKeys = f.Store.MaxKeys
}

// clientIP reads how the client's address is found, and identity headers.
func (p *parser) clientIP(f *File, c *Config) {
	for i, s := range f.ClientIP.TrustedProxies {
		pfx, err := clientip.ParsePrefixes([]string{s})
		if err != nil {
			p.errorf(at("client_ip", "trusted_proxies", i), "%v", err)
			continue
		}
		c.ClientIP.TrustedProxies = append(c.ClientIP.TrustedProxies, pfx...)
	}
	c.ClientIP.Header = f.ClientIP.Header
	if f.ClientIP.Header != "" && !clientip.ValidHeaderName(f.ClientIP.Header) {
		p.errorf(at("client_ip", "header"), "%q: not a header name", f.ClientIP.Header)
	}
	if f.ClientIP.Header != "" && len(f.ClientIP.TrustedProxies) == 0 {
		p.errorf(at("client_ip", "header"), "is only read from trusted proxies: set client_ip.trusted_proxies too")
	}
	if v := f.ClientIP.IPv6Prefix; (v != 0 || p.zero(at("client_ip", "ipv6_prefix"))) && (v < 1 || v > 128) {
		p.errorf(at("client_ip", "ipv6_prefix"), "%d: want 1 to 128 (default 64)", v)
	}
	if v := f.ClientIP.IPv4Prefix; (v != 0 || p.zero(at("client_ip", "ipv4_prefix"))) && (v < 1 || v > 32) {
		p.errorf(at("client_ip", "ipv4_prefix"), "%d: want 1 to 32 (default 32)", v)
	}
	for _, h := range []struct{ v, name string }{{f.Identity.UserHeader, "user_header"}, {f.Identity.TenantHeader, "tenant_header"}} {
		if h.v != "" && !clientip.ValidHeaderName(h.v) {
			p.errorf(at("identity", h.name), "%q: not a header name", h.v)
		}
	}
}

// upstreams reads the services the gateway forwards to.
func (p *parser) upstreams(f *File, c *Config) {
	c.Upstreams = map[string]*UpstreamConfig{}
	for _, name := range sortedKeys(f.Upstreams) {
		u := f.Upstreams[name]
		path := at("upstreams", name)
		uc := &UpstreamConfig{Name: name, PreserveHost: u.PreserveHost, MaxIdleConns: u.MaxIdleConns}
		if err := policy.ValidName(name); err != nil {
			p.errorf(path, "%v", err)
		}
		switch u.Type {
		case "", "proxy":
			if u.URL == "" {
				p.errorf(append(path, "url"), "required, such as http://127.0.0.1:3000")
				break
			}
			pu, err := url.Parse(u.URL)
			if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
				p.errorf(append(path, "url"), "%q: want an http:// or https:// URL with a host", u.URL)
				break
			}
			uc.URL = pu
		case "demo":
			uc.Demo = true
			if u.URL != "" {
				p.errorf(append(path, "url"), "a demo upstream takes no url")
			}
		default:
			p.errorf(append(path, "type"), "%q: want proxy (the default) or demo", u.Type)
		}
		uc.Timeout = p.duration(u.Timeout, DefaultUpstreamTimeout, append(path, "timeout"))
		uc.DialTimeout = p.duration(u.DialTimeout, DefaultDialTimeout, append(path, "dial_timeout"))
		uc.FlushPeriod = p.duration(u.FlushInterval, 0, append(path, "flush_interval"))
		if u.MaxIdleConns < 0 {
			p.errorf(append(path, "max_idle_conns"), "%d: must not be negative", u.MaxIdleConns)
		}
		c.Upstreams[name] = uc
	}
}

// routes reads which upstream each request goes to.
func (p *parser) routes(f *File, c *Config) {
	if len(f.Routes) == 0 {
		p.errorf(at("routes"), "at least one route is required, such as - upstream: NAME")
	}
	for i, r := range f.Routes {
		path := at("routes", i)
		rc := &RouteConfig{Name: r.Name, StripPrefix: r.StripPrefix}
		if rc.Name == "" {
			rc.Name = fmt.Sprintf("route%d", i)
		} else if err := policy.ValidName(r.Name); err != nil {
			p.errorf(append(path, "name"), "%v", err)
		}
		rc.Match = p.match(r.Match, append(path, "match"))
		if r.Upstream == "" {
			p.errorf(append(path, "upstream"), "required: the name of an upstream")
		} else if u, ok := c.Upstreams[r.Upstream]; !ok {
			have := strings.Join(sortedKeys(f.Upstreams), ", ")
			if have == "" {
				have = "none defined under upstreams"
			}
			p.errorf(append(path, "upstream"), "%q: no such upstream (have %s)", r.Upstream, have)
		} else {
			rc.Upstream = u
		}
		if r.StripPrefix != "" && (!strings.HasPrefix(r.StripPrefix, "/") || strings.HasSuffix(r.StripPrefix, "/")) {
			p.errorf(append(path, "strip_prefix"), "%q: want a path such as /api (leading /, no trailing /)", r.StripPrefix)
		}
		c.Routes = append(c.Routes, rc)
	}
}

// rules reads the file's own rules; seen maps each name to its index.
func (p *parser) rules(f *File, c *Config) (rules []policy.Rule, seen map[string]int, ok bool) {
	seen, ok = map[string]int{}, true
	for i, r := range f.Rules {
		pr, counts, rok := p.rule(c, r, at("rules", i), i, seen)
		if counts {
			rules = append(rules, pr)
		}
		ok = ok && rok
	}
	return rules, seen, ok
}

// rule reads rules[i]; counts is false for a rule that only gives a
// priority.
func (p *parser) rule(c *Config, r Rule, path []any, i int, seen map[string]int) (pr policy.Rule, counts, ok bool) {
	pr = policy.Rule{Name: r.Name}
	ok = true
	bad := func(field []any, format string, args ...any) {
		p.errorf(field, format, args...)
		ok = false
	}
	if err := policy.ValidName(r.Name); err != nil {
		bad(append(path, "name"), "%v", strings.TrimPrefix(err.Error(), "name: "))
	} else if j, dup := seen[r.Name]; dup {
		bad(append(path, "name"), "%q: already used by rules[%d]", r.Name, j)
	} else {
		seen[r.Name] = i
	}
	before := p.problems
	pr.Match = p.match(r.Match, append(path, "match"))
	ok = ok && p.problems == before // reported once, not again below
	kind, nok := p.overloadSections(c, r, &pr, path)
	ok = ok && nok
	if kind == priorityOnly {
		return pr, false, ok // it gives requests a class; nothing to count
	}
	if r.Key == "" {
		bad(append(path, "key"), "required, such as ip, header:X-API-Key, user, tenant+user or global")
	} else if k, err := policy.ParseKey(r.Key); err != nil {
		bad(append(path, "key"), "%v", err)
	} else {
		pr.Key = k
	}
	if r.Algorithm != "" && kind != concurrency {
		a, err := portero.ParseAlgorithm(r.Algorithm)
		if err != nil {
			bad(append(path, "algorithm"), "%v", err)
		}
		pr.Algorithm = a
	}
	if kind != concurrency { // whose limit and cost are its section's
		if r.Limit == "" {
			bad(append(path, "limit"), "required, such as 100/min or 10/s burst 20 (or a concurrency section)")
		} else if l, err := portero.ParseLimit(r.Limit); err != nil {
			bad(append(path, "limit"), "%s: %s", r.Limit, limitMessage(err, r.Limit))
		} else {
			pr.Limit = l
		}
		if cost, err := policy.ParseCost(r.Cost); err != nil {
			bad(append(path, "cost"), "%v", err)
		} else {
			pr.Cost = cost
		}
	}
	switch r.Mode {
	case "", "enforce":
		pr.Mode = policy.Enforce
	case "shadow":
		pr.Mode = policy.Shadow
	default:
		bad(append(path, "mode"), "%q: want enforce or shadow", r.Mode)
	}
	if p.zero(append(path, "reserve")) {
		bad(append(path, "reserve"), "0: want the units counted at the decision, at least 1 (leave reserve out for 1)")
	}
	if set, err := policy.ParseStatuses(r.CountResponses); err != nil {
		bad(append(path, "count_responses"), "%v", err)
	} else {
		pr.Responses, pr.Reserve = set, r.Reserve
	}
	ok = p.budget(r, &pr, kind, append(path, "budget")) && ok
	if ok = ok && p.checkRule(pr, path); ok {
		p.shapeHolds(r, pr.Limit, path)
	}
	return pr, true, ok
}

// checkRule reports what only the rule as a whole tells (a cost its limit
// never admits, an algorithm's own bounds), at path.
func (p *parser) checkRule(r policy.Rule, path []any) bool {
	if _, err := policy.New([]policy.Rule{r}, policy.Options{}); err != nil {
		_, msg, _ := strings.Cut(err.Error(), "): ")
		p.errorf(path, "%s", msg)
		return false
	}
	return true
}

// budget reads a rule's budget into pr: a duration from 1ms to
// portero.MaxBudget, on an algorithm that leases.
func (p *parser) budget(r Rule, pr *policy.Rule, kind ruleKind, path []any) bool {
	if r.Budget == "" {
		return true
	}
	before := p.problems
	b := p.duration(r.Budget, 0, path)
	alg := pr.Algorithm
	if alg == "" {
		alg = portero.SlidingCounter // the default
	}
	switch {
	case p.problems != before:
	case kind == concurrency:
		p.errorf(path, "a concurrency limit takes no budget: its leases are its own")
	case b < time.Millisecond || b > portero.MaxBudget:
		p.errorf(path, "%v: want the time a batch lasts, from 1ms to %v (50ms is a good start)", b, portero.MaxBudget)
	case !portero.Leasable(alg) && !pr.Limit.IsCalendar():
		p.errorf(path, "%s cannot lease budgets; set algorithm to fixed-window, fixed-window-anchored, token-bucket, leaky-meter or gcra (or a calendar quota)", alg)
	default:
		pr.Budget = b
	}
	return p.problems == before
}

// limitMessage drops the repetition of the input from ParseLimit's error.
func limitMessage(err error, in string) string {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, strconv.Quote(in)+": ")
	msg = strings.Replace(msg, ": "+strconv.Quote(in)+":", ":", 1)
	return msg
}

func (p *parser) match(m Match, path []any) policy.Match {
	pm := policy.Match{Methods: m.Methods, Path: m.Path, Host: m.Host, Headers: m.Headers}
	pm.Addresses = p.addresses(m.Addresses, append(path, "addresses"))
	pm.NotAddresses = p.addresses(m.NotAddresses, append(path, "not_addresses"))
	for i, meth := range m.Methods {
		if up := strings.ToUpper(meth); up != meth {
			pm.Methods = append([]string(nil), m.Methods...)
			pm.Methods[i] = up
		}
	}
	if err := pm.Compile(); err != nil {
		field, msg, _ := strings.Cut(err.Error(), ": ")
		p.errorf(append(path, strings.SplitN(field, "[", 2)[0]), "%s", msg)
	}
	return pm
}

func (p *parser) address(a string, path []any) {
	i := strings.LastIndexByte(a, ':')
	if i < 0 {
		p.errorf(path, "%q: want host:port, such as 127.0.0.1:8080 or :8080", a)
		return
	}
	if port, err := strconv.Atoi(a[i+1:]); err != nil || port < 0 || port > 65535 {
		p.errorf(path, "%q: port %q: want 0 to 65535", a, a[i+1:])
	}
}

// tls checks a listener's TLS section: the fields go together and the
// files load, each error at its field.
func (p *parser) tls(c *Config, t TLS, path []any) tlsreload.Files {
	f := tlsreload.Files{CertFile: t.CertFile, KeyFile: t.KeyFile, ClientCAFile: t.ClientCA}
	if !f.Enabled() {
		return f
	}
	fieldPath := func(field string) []any { return append(append([]any{}, path...), field) }
	tlsErr := func(err error) {
		var fe *tlsreload.FileError
		if errors.As(err, &fe) {
			p.errorf(fieldPath(fe.Field), "%v", err)
		} else {
			p.errorf(path, "%v", err)
		}
	}
	if err := f.Validate(); err != nil {
		tlsErr(err)
		return f
	}
	if p.opts.AllowUnsetEnv { // a missing file is listed, a present one checked
		present := true
		for _, pf := range [][2]string{{tlsreload.FieldCert, f.CertFile}, {tlsreload.FieldKey, f.KeyFile}, {tlsreload.FieldClientCA, f.ClientCAFile}} {
			if pf[1] == "" {
				continue
			}
			if _, err := os.Stat(pf[1]); errors.Is(err, fs.ErrNotExist) {
				c.Files = append(c.Files, FileNeed{Place: p.place(fieldPath(pf[0])), Path: pf[1]})
				present = false
			}
		}
		if !present {
			return f
		}
	}
	if _, err := tlsreload.Load(f); err != nil {
		tlsErr(err)
	}
	return f
}

// Redacted returns a copy of f with secrets (admin token, Redis password)
// hidden, for display.
func (f File) Redacted() File {
	if f.Admin.Token != "" {
		f.Admin.Token = "REDACTED"
	}
	f.Store.URL = redisstore.Redact(f.Store.URL)
	return f
}
