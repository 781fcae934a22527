// Package redistest starts real redis-server processes for tests: a single
// server on a free loopback port, a Redis Cluster, or a master with
// replicas watched by Redis Sentinels. Each runs in the test's t.TempDir()
// without persistence and stops in t.Cleanup; a test fails, never skips,
// when redis-server is not installed (testenv.NeedCommand).
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/portero-rl/portero/internal/testenv"
)

// Server is one redis-server process. Its methods are safe for concurrent
// use; the test's cleanup stops the process.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	args []string
	conf string // a configuration file, first on the command line (a sentinel's)

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Start starts a standalone redis-server on a free loopback port and
// returns it ready to accept commands. Extra arguments are appended to the
// command line (for example "--cluster-enabled", "yes").
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	return start(t, nil, extra)
}

// start starts a redis-server whose configuration file, when conf is not
// nil, is written by conf for the port chosen.
func start(t testing.TB, conf func(dir string, port int) string, extra []string) *Server {
	t.Helper()
	bin := testenv.NeedCommand(t, "redis-server")
	dir := t.TempDir()
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort(slices.Contains(extra, "--cluster-enabled"))
		if err != nil {
			lastErr = err
			continue
		}
		s := &Server{t: t, bin: bin, dir: dir, port: port, args: extra}
		if conf != nil {
			s.conf = conf(dir, port)
		}
		if err := s.start(); err != nil {
			lastErr = err
			continue
		}
		t.Cleanup(func() { s.stop() })
		return s
	}
	t.Fatalf("redistest: start redis-server: %v", lastErr)
	return nil
}

// freePort finds a loopback port that is free now (and, for a cluster node,
// whose bus port +10000 is free too). Another process may take it before
// redis-server binds it; Start retries.
func freePort(bus bool) (int, error) {
	for i := 0; i < 20; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !bus {
			return port, nil
		}
		if port+10000 > 65535 {
			continue
		}
		lb, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000))
		if err != nil {
			continue
		}
		lb.Close()
		return port, nil
	}
	return 0, errors.New("no free port pair for a cluster node")
}

func (s *Server) start() error {
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--protected-mode", "no",
		"--loglevel", "warning",
		"--logfile", filepath.Join(s.dir, "redis.log"),
	}
	args = append(args, s.args...)
	if s.conf != "" {
		args = append([]string{s.conf}, args...)
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server on port %d exited: %s", s.port, strings.TrimSpace(string(log)))
		default:
		}
		if r, err := Do(s.Addr(), "PING"); err == nil && r == "PONG" {
			s.mu.Lock()
			s.cmd = cmd
			s.mu.Unlock()
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Kill()
	<-done
	return fmt.Errorf("redis-server on port %d did not answer PING within 5s", s.port)
}

// Addr returns the server's address, "127.0.0.1:PORT".
func (s *Server) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

// URL returns the server's address as a redis:// URL for database 0.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Port returns the server's TCP port.
func (s *Server) Port() int { return s.port }

func (s *Server) process() *os.Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	return s.cmd.Process
}

// Kill ends the process with SIGKILL, as a crash would, and waits until the
// port no longer answers. All data is lost (persistence is off).
func (s *Server) Kill() {
	if !s.stop() {
		return
	}
	for i := 0; i < 200; i++ {
		if _, err := Do(s.Addr(), "PING"); err != nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Freeze stops the process with SIGSTOP: connections stay open but nothing
// is answered, like a hung server.
func (s *Server) Freeze() {
	if p := s.process(); p != nil {
		p.Signal(syscall.SIGSTOP)
	}
}

// Thaw resumes a frozen process with SIGCONT.
func (s *Server) Thaw() {
	if p := s.process(); p != nil {
		p.Signal(syscall.SIGCONT)
	}
}

// Restart starts the server again on the same port after Kill. It fails the
// test if the port was taken meanwhile.
func (s *Server) Restart() {
	s.t.Helper()
	if s.process() != nil {
		s.t.Fatalf("redistest: Restart of a running server on port %d", s.port)
	}
	var err error
	for i := 0; i < 50; i++ {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restart redis-server: %v", err)
}

// stop sends SIGKILL to a running process and reports whether there was one.
func (s *Server) stop() bool {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return false
	}
	cmd.Process.Signal(syscall.SIGCONT) // a frozen process must run to die promptly
	cmd.Process.Kill()
	return true
}

// Do sends one command to addr over a fresh connection and returns the reply
// as text: a simple or bulk string, an integer in decimal, or the elements
// of an array joined by newlines. An error reply is returned as an error.
// It is meant for setting up servers in tests, not for speed.
func Do(addr string, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(conn))
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		parts := make([]string, 0, max(n, 0))
		for i := 0; i < n; i++ {
			p, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}

// Micros reads the server's clock (TIME) in microseconds: the clock that
// concurrency leases expire on.
func (s *Server) Micros(t testing.TB) int64 {
	t.Helper()
	out, err := Do(s.Addr(), "TIME")
	sec, us, _ := strings.Cut(out, "\n")
	a, err1 := strconv.ParseInt(sec, 10, 64)
	b, err2 := strconv.ParseInt(us, 10, 64)
	if err = errors.Join(err, err1, err2); err != nil {
		t.Fatalf("redistest: TIME: %v", err)
	}
	return a*1_000_000 + b
}

// Scores returns the scores of the sorted set at key, lowest first: for
// the leases of a concurrency rule, their expiries in microseconds of the
// server's clock.
func (s *Server) Scores(t testing.TB, key string) []int64 {
	t.Helper()
	out, err := Do(s.Addr(), "ZRANGE", key, "0", "-1", "WITHSCORES")
	if err != nil {
		t.Fatalf("redistest: ZRANGE %s: %v", key, err)
	}
	var scores []int64
	f := strings.Split(out, "\n")
	for i := 1; i < len(f); i += 2 {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			t.Fatalf("redistest: ZRANGE %s: score %q: %v", key, f[i], err)
		}
		scores = append(scores, n)
	}
	return scores
}

// Cluster is a Redis Cluster: its masters, each a Server, and their
// replicas, if any.
type Cluster struct {
	Nodes []*Server
	// Replicas are each master's replicas, by the master's index in
	// Nodes; nil for a cluster without replicas.
	Replicas [][]*Server
}

// StartCluster starts n masters (at least 3) in cluster mode on loopback
// ports, splits the 16384 slots evenly between them, introduces them to each
// other and waits until every node reports cluster_state:ok. Extra
// arguments go to every node's command line (for example
// "--cluster-require-full-coverage", "no").
func StartCluster(t testing.TB, n int, extra ...string) *Cluster {
	t.Helper()
	return StartReplicatedCluster(t, n, 0, extra...)
}

// StartReplicatedCluster is StartCluster with replicas replicas for each
// master, and waits also until every replica's link to its master is up, so
// that a killed master's replica can be promoted (cluster-node-timeout is
// 2 s; replicas replicate asynchronously, as Redis does by default).
func StartReplicatedCluster(t testing.TB, n, replicas int, extra ...string) *Cluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("redistest: a cluster needs at least 3 masters, got %d", n)
	}
	c := &Cluster{}
	var all []*Server
	node := func() *Server {
		s := Start(t, append([]string{"--cluster-enabled", "yes",
			"--cluster-config-file", fmt.Sprintf("nodes-%d.conf", len(all)),
			"--cluster-node-timeout", "2000", "--repl-diskless-sync-delay", "0"}, extra...)...)
		all = append(all, s)
		return s
	}
	for range n {
		c.Nodes = append(c.Nodes, node())
	}
	for range n * replicas {
		node()
	}
	const slots = 16384
	for i, s := range c.Nodes {
		lo, hi := i*slots/n, (i+1)*slots/n-1
		if _, err := Do(s.Addr(), "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			t.Fatalf("redistest: CLUSTER ADDSLOTSRANGE on %s: %v", s.Addr(), err)
		}
	}
	for _, s := range all[1:] {
		if _, err := Do(all[0].Addr(), "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(s.Port())); err != nil {
			t.Fatalf("redistest: CLUSTER MEET %s: %v", s.Addr(), err)
		}
	}
	waitFor(t, 20*time.Second, "cluster ready", func() (bool, string) {
		return clusterOK(all, "cluster_known_nodes:"+strconv.Itoa(len(all)))
	})
	if replicas > 0 {
		c.Replicas = make([][]*Server, n)
		for i, r := range all[n:] {
			m := i % n
			c.Replicas[m] = append(c.Replicas[m], r)
			replicate(t, r, c.Nodes[m])
		}
		waitFor(t, 20*time.Second, "replicas ready", func() (bool, string) { return clusterOK(all, "") })
	}
	return c
}

// clusterOK reports whether every node reports cluster_state:ok and want
// in CLUSTER INFO, or why not.
func clusterOK(nodes []*Server, want string) (bool, string) {
	for _, s := range nodes {
		info, err := Do(s.Addr(), "CLUSTER", "INFO")
		if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, want) {
			return false, fmt.Sprintf("%s: %v\n%s", s.Addr(), err, info)
		}
	}
	return true, ""
}

// replicate makes r a replica of m and waits until its link is up.
func replicate(t testing.TB, r, m *Server) {
	t.Helper()
	id, err := Do(m.Addr(), "CLUSTER", "MYID")
	if err != nil {
		t.Fatalf("redistest: CLUSTER MYID on %s: %v", m.Addr(), err)
	}
	waitFor(t, 20*time.Second, "CLUSTER REPLICATE on "+r.Addr(), func() (bool, string) {
		_, err := Do(r.Addr(), "CLUSTER", "REPLICATE", id)
		return err == nil, fmt.Sprint(err) // the replica may not know the master yet
	})
	waitFor(t, 20*time.Second, "replica "+r.Addr()+" of "+m.Addr(), func() (bool, string) {
		info, err := Do(r.Addr(), "INFO", "replication")
		return err == nil && strings.Contains(info, "master_link_status:up"), info
	})
}

// waitFor calls ready until it reports true, every 20 ms, and fails the
// test with the last reason it gave after timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, ready func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := ready()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: %s: not within %v: %s", what, timeout, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitPromoted waits until a replica of master i has taken its place (its
// ROLE says master) and every live node reports cluster_state:ok, and
// returns it; it fails the test after timeout.
func (c *Cluster) WaitPromoted(t testing.TB, i int, timeout time.Duration) *Server {
	t.Helper()
	var promoted *Server
	waitFor(t, timeout, "a replica of "+c.Nodes[i].Addr()+" promoted", func() (bool, string) {
		for _, r := range c.Replicas[i] {
			if role, err := Do(r.Addr(), "ROLE"); err == nil && strings.HasPrefix(role, "master") {
				promoted = r
			}
		}
		if promoted == nil {
			return false, "no replica is master yet"
		}
		live := slices.DeleteFunc(slices.Concat(c.Nodes, slices.Concat(c.Replicas...)), func(s *Server) bool { return s == c.Nodes[i] })
		return clusterOK(live, "")
	})
	return promoted
}

// Addrs returns the addresses of the cluster's nodes.
func (c *Cluster) Addrs() []string { return addrs(c.Nodes) }

func addrs(servers []*Server) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = s.Addr()
	}
	return out
}

// Sentinel is a Redis master with replicas and the Redis Sentinels that
// watch it (each a redis-server --sentinel process, as Debian's
// redis-sentinel runs), all on loopback ports.
type Sentinel struct {
	// Name is the master set's name, as the sentinels know it.
	Name      string
	Master    *Server
	Replicas  []*Server
	Sentinels []*Server
}

// SentinelDownAfter and SentinelFailoverTimeout are the sentinels'
// down-after-milliseconds and failover-timeout: small, so that a failover
// takes a second or two, not the minutes of the defaults.
const (
	SentinelDownAfter       = 500 * time.Millisecond
	SentinelFailoverTimeout = 2 * time.Second
)

// StartSentinel starts a master named "mymaster" with replicas replicas
// and sentinels sentinels (quorum: a majority of them), and waits until
// every replica is in sync and every sentinel knows the master, its
// replicas and the other sentinels, so that a failover can start at once.
func StartSentinel(t testing.TB, replicas, sentinels int) *Sentinel {
	t.Helper()
	if replicas < 1 || sentinels < 1 {
		t.Fatalf("redistest: a sentinel setup needs a replica and a sentinel, got %d and %d", replicas, sentinels)
	}
	s := &Sentinel{Name: "mymaster", Master: Start(t)}
	for range replicas {
		s.Replicas = append(s.Replicas, Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(s.Master.Port())))
	}
	quorum := sentinels/2 + 1
	for range sentinels {
		s.Sentinels = append(s.Sentinels, startSentinel(t, s.Name, s.Master.Port(), quorum, nil))
	}
	waitFor(t, 30*time.Second, "sentinels ready", func() (bool, string) { return s.ready(replicas, sentinels) })
	return s
}

// StartSentinelFor starts one sentinel (quorum 1) monitoring the master
// at 127.0.0.1:masterPort as "mymaster"; extra arguments go to its command
// line (its TLS port and files, for example). It answers PING on its plain
// port, Addr.
func StartSentinelFor(t testing.TB, masterPort int, extra ...string) *Server {
	t.Helper()
	return startSentinel(t, "mymaster", masterPort, 1, extra)
}

// startSentinel writes a sentinel's configuration file (a sentinel
// rewrites it, so it cannot be a flag) and starts it.
func startSentinel(t testing.TB, name string, masterPort, quorum int, extra []string) *Server {
	t.Helper()
	return start(t, func(dir string, port int) string {
		path := filepath.Join(dir, "sentinel.conf")
		conf := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d\n"+
			"sentinel down-after-milliseconds %s %d\n"+
			"sentinel failover-timeout %s %d\n"+
			"sentinel parallel-syncs %s 1\n",
			name, masterPort, quorum,
			name, SentinelDownAfter.Milliseconds(),
			name, SentinelFailoverTimeout.Milliseconds(), name)
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			t.Fatalf("redistest: %v", err)
		}
		return path
	}, append([]string{"--sentinel"}, extra...))
}

// ready reports whether the setup is ready for a failover, or why not.
func (s *Sentinel) ready(replicas, sentinels int) (bool, string) {
	for _, r := range s.Replicas {
		info, err := Do(r.Addr(), "INFO", "replication")
		if err != nil || !strings.Contains(info, "master_link_status:up") {
			return false, fmt.Sprintf("replica %s: %v %s", r.Addr(), err, info)
		}
	}
	for _, sn := range s.Sentinels {
		m, err := Do(sn.Addr(), "SENTINEL", "MASTER", s.Name)
		if err != nil {
			return false, fmt.Sprintf("sentinel %s: %v", sn.Addr(), err)
		}
		f := fields(m)
		if f["num-slaves"] != strconv.Itoa(replicas) || f["num-other-sentinels"] != strconv.Itoa(sentinels-1) || !strings.HasPrefix(f["flags"], "master") {
			return false, fmt.Sprintf("sentinel %s: %v", sn.Addr(), f)
		}
	}
	return true, ""
}

// fields reads a reply of alternating names and values, one a line.
func fields(reply string) map[string]string {
	ls := strings.Split(reply, "\n")
	m := map[string]string{}
	for i := 0; i+1 < len(ls); i += 2 {
		m[ls[i]] = ls[i+1]
	}
	return m
}

// Addrs returns the sentinels' addresses.
func (s *Sentinel) Addrs() []string { return addrs(s.Sentinels) }

// masterOf is the master's address as sentinel sn reports it.
func (s *Sentinel) masterOf(sn *Server) (string, error) {
	r, err := Do(sn.Addr(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.Name)
	host, port, ok := strings.Cut(r, "\n")
	if err == nil && !ok {
		err = fmt.Errorf("redistest: SENTINEL GET-MASTER-ADDR-BY-NAME = %q", r)
	}
	return net.JoinHostPort(host, port), err
}

// MasterAddr returns the master's address as the sentinels report it (the
// first that answers).
func (s *Sentinel) MasterAddr() (string, error) {
	var err error
	for _, sn := range s.Sentinels {
		var a string
		if a, err = s.masterOf(sn); err == nil {
			return a, nil
		}
	}
	return "", err
}

// Promoted returns the master every sentinel reports, when they agree on
// one other than old and it answers as a master; "" otherwise.
func (s *Sentinel) Promoted(old string) string {
	addr := ""
	for _, sn := range s.Sentinels {
		a, err := s.masterOf(sn)
		if err != nil || a == old || (addr != "" && a != addr) {
			return ""
		}
		addr = a
	}
	if info, err := Do(addr, "INFO", "replication"); err != nil || !strings.Contains(info, "role:master") {
		return ""
	}
	return addr
}

// WaitFailover waits until Promoted reports a master other than old, and
// returns its address; it fails the test after timeout.
func (s *Sentinel) WaitFailover(t testing.TB, old string, timeout time.Duration) string {
	t.Helper()
	var addr string
	waitFor(t, timeout, "failover away from "+old, func() (bool, string) {
		addr = s.Promoted(old)
		return addr != "", "the sentinels promoted no other master"
	})
	return addr
}

// WaitSynced waits until every replica of the master at addr has received
// all it wrote (their replication offsets are equal), or fails the test
// after timeout.
func (s *Sentinel) WaitSynced(t testing.TB, addr string, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, "replicas of "+addr+" in sync", func() (bool, string) {
		info, err := Do(addr, "INFO", "replication")
		want := infoField(info, "master_repl_offset")
		if err != nil || want == "" {
			return false, fmt.Sprintf("master: %v", err)
		}
		for _, srv := range append([]*Server{s.Master}, s.Replicas...) {
			if srv.Addr() == addr || srv.process() == nil {
				continue
			}
			ri, err := Do(srv.Addr(), "INFO", "replication")
			if err != nil || !strings.Contains(ri, "master_link_status:up") || infoField(ri, "slave_repl_offset") != want {
				return false, fmt.Sprintf("replica %s: %v", srv.Addr(), err)
			}
		}
		return true, ""
	})
}

// infoField is one field of an INFO reply.
func infoField(info, name string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), name+":"); ok {
			return v
		}
	}
	return ""
}
