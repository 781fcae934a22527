package bench

// h2Client is a minimal gRPC unary client over one plaintext HTTP/2
// connection (h2c with prior knowledge), the load generator of the RLS
// report beside grpc-go's client. grpc-go's client costs about as much CPU
// per call as the servers it measures; Envoy, the real client of a rate
// limit service, uses a C++ HTTP/2 codec that costs far less. This client
// does what such a codec does and little else:
//
//   - one reader goroutine reads every frame and demultiplexes by stream
//     id; under Run it also starts the next call when one ends, so a
//     closed loop of N calls in flight needs no goroutine per call;
//   - writes go through one bufio.Writer under a mutex; the reader flushes
//     only when it is about to block on the socket, so the requests and
//     control frames of one batch of responses leave in one write;
//   - the request header block is encoded once per connection: the first
//     request adds every field to the HPACK dynamic table (as nghttp2 and
//     grpc-go do), every later one refers to them by index, so the steady
//     block is a few bytes and encoding it costs nothing;
//   - request bodies are built by the caller (the 5-byte gRPC prefix and
//     the protobuf message, see grpcFrame), so that a load generator can
//     precompute them.
//
// It keeps HTTP/2 correct where a server could tell: client preface and
// SETTINGS, SETTINGS and PING acknowledged, the server's
// MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE and
// HEADER_TABLE_SIZE respected, send windows (connection and stream)
// respected, receive windows replenished with WINDOW_UPDATE as DATA is
// consumed, RST_STREAM and GOAWAY honoured. A response counts as success
// only with :status 200, a single uncompressed gRPC message and
// grpc-status 0; any other grpc-status is an *h2StatusError.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Options tune an h2Client; the zero value is the default.
type h2Options struct {
	// StreamWindow is each stream's receive window, announced as
	// SETTINGS_INITIAL_WINDOW_SIZE; 0 means 1 MiB.
	StreamWindow uint32
	// ConnWindow is the connection's receive window; 0 means 64 MiB.
	// Values below 65535 (the initial window) mean 65535.
	ConnWindow uint32
	// Timeout is the grpc-timeout header of every call; "" means "1S".
	Timeout string
}

// h2StatusError is a call that ended with a grpc-status other than 0.
type h2StatusError struct {
	Code int
	Msg  string
}

func (e *h2StatusError) Error() string {
	return fmt.Sprintf("grpc-status %d: %s", e.Code, e.Msg)
}

// h2Stream is one call.
type h2Stream struct {
	id      uint32
	t0      time.Time
	body    []byte // the request: gRPC prefix and message
	sent    int    // bytes of body sent
	sendWin int64  // the stream's send window
	queued  bool   // in h2Client.pending

	recvUnacked uint32 // DATA bytes consumed and not yet given back
	headers     bool   // the response headers have ended
	httpStatus  string
	grpcStatus  int // -1 until seen
	grpcMsg     string
	msg         []byte // the response DATA: gRPC prefix and message

	load bool       // started by Run
	ch   chan error // Do's: receives the outcome
}

func (s *h2Stream) reset() {
	*s = h2Stream{body: s.body[:0], msg: s.msg[:0], grpcStatus: -1}
}

// h2Load is the state of one Run.
type h2Load struct {
	n      int
	stop   time.Time
	next   func() []byte
	check  func([]byte) error
	active int
	res    h2RunResult
	done   chan struct{}
}

// h2RunGrace is how long Run waits for the calls in flight at its end.
const h2RunGrace = 5 * time.Second

// h2RunResult is what Run measured.
type h2RunResult struct {
	// Lats holds the latency of every call, success or not, from the
	// moment its request was queued to its last frame.
	Lats     []time.Duration
	Errs     int64 // calls that failed or whose response check refused
	FirstErr error
}

type h2Client struct {
	conn  net.Conn
	br    *bufio.Reader
	fr    *http2.Framer // reads from br; writes (under mu) to bw
	dec   *hpack.Decoder
	opts  h2Options
	done  chan struct{} // closed when the reader has stopped
	ready chan error    // the handshake's outcome

	// Reader-only state: the header block being decoded.
	cur       *h2Stream
	hdrStream uint32
	hdrEnd    bool // the block's HEADERS frame had END_STREAM
	connRecv  uint32

	mu         sync.Mutex
	cond       *sync.Cond // signalled when a stream ends or the connection dies
	bw         *bufio.Writer
	streams    map[uint32]*h2Stream
	nextID     uint32
	active     int
	maxStreams uint32 // the server's MAX_CONCURRENT_STREAMS
	connSend   int64  // the connection's send window
	initSend   int64  // the server's INITIAL_WINDOW_SIZE
	maxFrame   uint32 // the server's MAX_FRAME_SIZE
	pending    []*h2Stream
	hdr        h2HeaderBlocks
	goingAway  bool
	err        error // why the connection is dead
	free       []*h2Stream
	load       *h2Load
}

// h2Dial connects to addr and performs the HTTP/2 handshake, for unary
// calls of the gRPC method path ("/package.Service/Method").
func h2Dial(addr, path string, opts h2Options) (*h2Client, error) {
	if opts.StreamWindow == 0 {
		opts.StreamWindow = 1 << 20
	}
	if opts.ConnWindow == 0 {
		opts.ConnWindow = 64 << 20
	}
	if opts.ConnWindow < 65535 {
		opts.ConnWindow = 65535
	}
	if opts.Timeout == "" {
		opts.Timeout = "1S"
	}
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c := &h2Client{
		conn:       conn,
		br:         bufio.NewReaderSize(conn, 64<<10),
		bw:         bufio.NewWriterSize(conn, 64<<10),
		opts:       opts,
		done:       make(chan struct{}),
		ready:      make(chan error, 1),
		streams:    make(map[uint32]*h2Stream),
		nextID:     1,
		maxStreams: 1<<32 - 1,
		connSend:   65535,
		initSend:   65535,
		maxFrame:   16384,
	}
	c.cond = sync.NewCond(&c.mu)
	c.hdr.tableLimit = 4096 // until the server's SETTINGS say otherwise
	c.fr = http2.NewFramer(c.bw, c.br)
	c.fr.SetReuseFrames()
	c.fr.SetMaxReadFrameSize(16384) // the default we announce
	c.dec = hpack.NewDecoder(4096, c.emit)
	c.dec.SetMaxStringLength(64 << 10)
	c.hdr.fields = []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "http"},
		{Name: ":path", Value: path},
		{Name: ":authority", Value: addr},
		{Name: "content-type", Value: "application/grpc"},
		{Name: "te", Value: "trailers"},
		{Name: "grpc-timeout", Value: opts.Timeout},
	}

	c.mu.Lock()
	c.bw.WriteString(http2.ClientPreface)
	c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: opts.StreamWindow},
	)
	if d := opts.ConnWindow - 65535; d > 0 {
		c.fr.WriteWindowUpdate(0, d)
	}
	err = c.bw.Flush()
	c.mu.Unlock()
	if err != nil {
		conn.Close()
		return nil, err
	}
	go c.readLoop()
	select {
	case err = <-c.ready:
	case <-time.After(5 * time.Second):
		err = errors.New("h2: no SETTINGS from the server within 5s")
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close closes the connection; calls in flight fail.
func (c *h2Client) Close() error {
	err := c.conn.Close()
	<-c.done
	return err
}

// grpcFrame returns msg with the 5-byte gRPC message prefix (uncompressed).
func grpcFrame(msg []byte) []byte {
	b := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:5], uint32(len(msg)))
	copy(b[5:], msg)
	return b
}

// Do makes one call with body (see grpcFrame) and returns the response
// message (without the gRPC prefix).
func (c *h2Client) Do(ctx context.Context, body []byte) ([]byte, error) {
	s := &h2Stream{body: body, grpcStatus: -1, ch: make(chan error, 1)}
	c.mu.Lock()
	for c.err == nil && !c.goingAway && uint32(c.active) >= c.maxStreams {
		c.cond.Wait()
	}
	if err := c.openErrLocked(); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	s.t0 = time.Now()
	err := c.startLocked(s)
	if err == nil {
		err = c.flushLocked()
	}
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	select {
	case err := <-s.ch:
		if err != nil {
			return nil, err
		}
		return bytes.Clone(s.msg[5:]), nil
	case <-ctx.Done():
		c.mu.Lock()
		if c.streams[s.id] == s {
			c.endLocked(s)
			c.fr.WriteRSTStream(s.id, http2.ErrCodeCancel)
			c.flushLocked()
		}
		c.mu.Unlock()
		return nil, ctx.Err()
	}
}

// Run keeps n calls in flight for d: each call's body is next(), each
// successful response message (without the gRPC prefix) goes to check,
// which may refuse it. next and check run on the reader goroutine, one at
// a time. Run returns when every call it started has ended, or h2RunGrace
// after d, when it resets the calls still in flight and counts them as
// failed; its error says why calls were cut short (the connection died,
// or the server sent GOAWAY).
func (c *h2Client) Run(n int, d time.Duration, next func() []byte, check func([]byte) error) (h2RunResult, error) {
	if n < 1 {
		n = 1
	}
	ld := &h2Load{n: n, stop: time.Now().Add(d), next: next, check: check, done: make(chan struct{})}
	ld.res.Lats = make([]time.Duration, 0, 1<<16)
	c.mu.Lock()
	if c.load != nil {
		c.mu.Unlock()
		return h2RunResult{}, errors.New("h2: Run already running")
	}
	if err := c.openErrLocked(); err != nil {
		c.mu.Unlock()
		return h2RunResult{}, err
	}
	c.load = ld
	c.topUpLocked(time.Now())
	if ld.active == 0 {
		c.load = nil
		err := c.openErrLocked()
		if err == nil {
			err = fmt.Errorf("h2: cannot open a stream (MAX_CONCURRENT_STREAMS %d, %d in flight)", c.maxStreams, c.active)
		}
		c.mu.Unlock()
		return h2RunResult{}, err
	}
	err := c.flushLocked()
	c.mu.Unlock()
	if err != nil {
		c.conn.Close() // the reader fails every stream, ending the load
	}
	t := time.NewTimer(d + h2RunGrace)
	select {
	case <-ld.done:
		t.Stop()
	case <-t.C:
		// Calls still in flight long after the end: the client gives up
		// on them, as Envoy does at its timeout.
		c.mu.Lock()
		for _, s := range c.streams {
			if s.load {
				c.fr.WriteRSTStream(s.id, http2.ErrCodeCancel)
				c.finishLocked(s, fmt.Errorf("h2: no response within %v after the end of the run", h2RunGrace))
			}
		}
		c.flushLocked()
		c.mu.Unlock()
		<-ld.done
	}
	c.mu.Lock()
	c.load = nil
	err = c.openErrLocked() // calls were cut short
	c.mu.Unlock()
	return ld.res, err
}

// openErrLocked says why no stream can be opened now, if so.
func (c *h2Client) openErrLocked() error {
	if c.goingAway {
		return errors.New("h2: the server sent GOAWAY")
	}
	return c.err
}

// topUpLocked starts load calls until n are in flight, as long as the
// load runs and the server allows more streams.
func (c *h2Client) topUpLocked(now time.Time) {
	ld := c.load
	if ld == nil {
		return
	}
	for ld.active < ld.n && uint32(c.active) < c.maxStreams && now.Before(ld.stop) && c.openErrLocked() == nil {
		var s *h2Stream
		if k := len(c.free); k > 0 {
			s = c.free[k-1]
			c.free = c.free[:k-1]
		} else {
			s = &h2Stream{grpcStatus: -1}
		}
		s.load = true
		s.body = ld.next()
		s.t0 = now
		if err := c.startLocked(s); err != nil {
			s.reset()
			c.free = append(c.free, s)
			return
		}
		ld.active++
	}
}

// startLocked sends s's HEADERS and as much of its DATA as the windows
// allow.
func (c *h2Client) startLocked(s *h2Stream) error {
	if c.nextID > 1<<31-1 {
		return errors.New("h2: stream ids exhausted")
	}
	s.id = c.nextID
	c.nextID += 2
	s.sendWin = c.initSend
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: s.id, BlockFragment: c.hdr.next(), EndHeaders: true}); err != nil {
		c.err = err
		return err
	}
	c.streams[s.id] = s
	c.active++
	c.sendDataLocked(s)
	return nil
}

// sendDataLocked sends what the windows allow of s's body, the last frame
// with END_STREAM, and queues s when something is left.
func (c *h2Client) sendDataLocked(s *h2Stream) bool {
	for s.sent < len(s.body) {
		n := int64(len(s.body) - s.sent)
		n = min(n, int64(c.maxFrame), c.connSend, s.sendWin)
		if n <= 0 {
			if !s.queued {
				s.queued = true
				c.pending = append(c.pending, s)
			}
			return false
		}
		end := s.sent+int(n) == len(s.body)
		if err := c.fr.WriteData(s.id, end, s.body[s.sent:s.sent+int(n)]); err != nil {
			c.err = err
			return false
		}
		s.sent += int(n)
		c.connSend -= n
		s.sendWin -= n
	}
	return true
}

// drainLocked sends the DATA of queued streams that the windows now allow.
func (c *h2Client) drainLocked() {
	keep := c.pending[:0]
	for _, s := range c.pending {
		if c.streams[s.id] != s { // ended meanwhile
			continue
		}
		s.queued = false
		if !c.sendDataLocked(s) {
			keep = append(keep, s)
		}
	}
	clear(c.pending[len(keep):])
	c.pending = keep
}

func (c *h2Client) flushLocked() error {
	if c.bw.Buffered() == 0 {
		return nil
	}
	err := c.bw.Flush()
	if err != nil && c.err == nil {
		c.err = err
	}
	return err
}

// endLocked forgets s.
func (c *h2Client) endLocked(s *h2Stream) {
	delete(c.streams, s.id)
	c.active--
	c.cond.Broadcast()
	if c.goingAway && c.active == 0 {
		// Nothing more will happen on this connection: closing it lets
		// a server that is stopping gracefully stop now.
		c.conn.Close()
	}
}

// finishLocked ends s with err (nil: see result) and hands the outcome to
// Do or to the load.
func (c *h2Client) finishLocked(s *h2Stream, err error) {
	c.endLocked(s)
	if err == nil {
		err = s.result()
	}
	if !s.load {
		s.ch <- err
		c.topUpLocked(time.Now()) // a slot is free
		return
	}
	ld := c.load
	now := time.Now()
	ld.res.Lats = append(ld.res.Lats, now.Sub(s.t0))
	if err == nil && ld.check != nil {
		err = ld.check(s.msg[5:])
	}
	if err != nil {
		ld.res.Errs++
		if ld.res.FirstErr == nil {
			ld.res.FirstErr = err
		}
	}
	s.reset()
	c.free = append(c.free, s)
	ld.active--
	c.topUpLocked(now)
	if ld.active == 0 {
		close(ld.done)
	}
}

// result checks a response that ended normally.
func (s *h2Stream) result() error {
	if s.httpStatus != "200" {
		return fmt.Errorf("h2: :status %q", s.httpStatus)
	}
	if s.grpcStatus < 0 {
		return errors.New("h2: no grpc-status")
	}
	if s.grpcStatus != 0 {
		return &h2StatusError{Code: s.grpcStatus, Msg: s.grpcMsg}
	}
	if len(s.msg) < 5 {
		return fmt.Errorf("h2: response of %d bytes, no gRPC message", len(s.msg))
	}
	if s.msg[0] != 0 {
		return errors.New("h2: compressed response")
	}
	if n := binary.BigEndian.Uint32(s.msg[1:5]); int(n) != len(s.msg)-5 {
		return fmt.Errorf("h2: gRPC message of %d bytes in %d", n, len(s.msg)-5)
	}
	return nil
}

// emit takes one decoded response header field.
func (c *h2Client) emit(f hpack.HeaderField) {
	s := c.cur
	if s == nil {
		return
	}
	switch f.Name {
	case ":status":
		s.httpStatus = f.Value
	case "grpc-status":
		if v, err := strconv.Atoi(f.Value); err == nil && v >= 0 {
			s.grpcStatus = v
		} else {
			s.grpcStatus = 2 // UNKNOWN: an unparsable status
		}
	case "grpc-message":
		s.grpcMsg = percentDecode(f.Value)
	}
}

// percentDecode undoes grpc-message's percent-encoding.
func percentDecode(v string) string {
	if !strings.Contains(v, "%") {
		return v
	}
	var b []byte
	for i := 0; i < len(v); i++ {
		if v[i] == '%' && i+2 < len(v) {
			if n, err := strconv.ParseUint(v[i+1:i+3], 16, 8); err == nil {
				b = append(b, byte(n))
				i += 2
				continue
			}
		}
		b = append(b, v[i])
	}
	return string(b)
}

// readLoop reads frames until the connection dies, then fails what is in
// flight.
func (c *h2Client) readLoop() {
	err := c.readFrames()
	c.conn.Close()
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	for _, s := range c.streams {
		c.finishLocked(s, c.err)
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	select {
	case c.ready <- c.err:
	default:
	}
	close(c.done)
}

// mustFlush reports whether reading the next frame may block on the
// socket: then whatever was written for the frames before must go out
// first.
func (c *h2Client) mustFlush() bool {
	n := c.br.Buffered()
	if n < 9 {
		return true
	}
	h, _ := c.br.Peek(9)
	return n < 9+int(h[0])<<16|int(h[1])<<8|int(h[2])
}

func (c *h2Client) readFrames() error {
	first := true
	for {
		if c.mustFlush() {
			c.mu.Lock()
			err := c.flushLocked()
			c.mu.Unlock()
			if err != nil {
				return err
			}
		}
		f, err := c.fr.ReadFrame()
		if err != nil {
			return err
		}
		if first {
			// The server's preface is a SETTINGS frame; no HEADERS
			// leaves before it has been seen, so that the header
			// blocks can follow its HEADER_TABLE_SIZE.
			sf, ok := f.(*http2.SettingsFrame)
			if !ok || sf.IsAck() {
				return fmt.Errorf("h2: the server's first frame is %v, not SETTINGS", f.Header().Type)
			}
		}
		c.mu.Lock()
		err = c.handleLocked(f)
		c.mu.Unlock()
		if err != nil {
			return err
		}
		if first {
			first = false
			c.ready <- nil
		}
	}
}

func (c *h2Client) handleLocked(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.HeadersFrame:
		s := c.streams[f.StreamID]
		if s != nil && s.headers && !f.StreamEnded() {
			return fmt.Errorf("h2: stream %d: trailers without END_STREAM", f.StreamID)
		}
		c.cur, c.hdrStream, c.hdrEnd = s, f.StreamID, f.StreamEnded()
		return c.onHeaderFragment(f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.ContinuationFrame:
		if f.StreamID != c.hdrStream {
			return fmt.Errorf("h2: CONTINUATION of stream %d after HEADERS of %d", f.StreamID, c.hdrStream)
		}
		return c.onHeaderFragment(f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		return c.onSettings(f)
	case *http2.PingFrame:
		if !f.IsAck() {
			return c.fr.WritePing(true, f.Data)
		}
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			c.connSend += int64(f.Increment)
			if c.connSend > 1<<31-1 {
				return errors.New("h2: connection send window above 2^31-1")
			}
		} else if s := c.streams[f.StreamID]; s != nil {
			s.sendWin += int64(f.Increment)
		}
		if len(c.pending) > 0 {
			c.drainLocked()
		}
	case *http2.RSTStreamFrame:
		if s := c.streams[f.StreamID]; s != nil {
			c.finishLocked(s, fmt.Errorf("h2: stream reset by the server: %v", f.ErrCode))
		}
	case *http2.GoAwayFrame:
		c.goingAway = true
		c.cond.Broadcast()
		for id, s := range c.streams {
			if id > f.LastStreamID {
				c.finishLocked(s, fmt.Errorf("h2: GOAWAY %v (last stream %d): %q", f.ErrCode, f.LastStreamID, f.DebugData()))
			}
		}
		if c.active == 0 {
			c.conn.Close()
		}
	case *http2.PushPromiseFrame:
		return errors.New("h2: PUSH_PROMISE although push is disabled")
	}
	return nil // PRIORITY and unknown frames are ignored
}

func (c *h2Client) onData(f *http2.DataFrame) error {
	// Flow control counts the whole payload, padding included.
	n := f.Header().Length
	c.connRecv += n
	if c.connRecv > 0 && c.connRecv >= c.opts.ConnWindow/2 {
		if err := c.fr.WriteWindowUpdate(0, c.connRecv); err != nil {
			return err
		}
		c.connRecv = 0
	}
	s := c.streams[f.StreamID]
	if s == nil {
		return nil // a stream we reset
	}
	if !s.headers {
		c.finishLocked(s, errors.New("h2: DATA before the response headers"))
		return c.fr.WriteRSTStream(f.StreamID, http2.ErrCodeProtocol)
	}
	s.msg = append(s.msg, f.Data()...)
	if f.StreamEnded() {
		c.finishLocked(s, errors.New("h2: response ended without trailers"))
		return nil
	}
	s.recvUnacked += n
	if s.recvUnacked > 0 && s.recvUnacked >= c.opts.StreamWindow/2 {
		if err := c.fr.WriteWindowUpdate(s.id, s.recvUnacked); err != nil {
			return err
		}
		s.recvUnacked = 0
	}
	return nil
}

func (c *h2Client) onHeaderFragment(p []byte, end bool) error {
	if _, err := c.dec.Write(p); err != nil {
		return fmt.Errorf("h2: HPACK: %w", err)
	}
	if !end {
		return nil
	}
	if err := c.dec.Close(); err != nil {
		return fmt.Errorf("h2: HPACK: %w", err)
	}
	s := c.cur
	c.cur = nil
	if s == nil {
		return nil
	}
	if !s.headers {
		s.headers = true
		if s.httpStatus == "" {
			c.finishLocked(s, errors.New("h2: response headers without :status"))
			return c.fr.WriteRSTStream(s.id, http2.ErrCodeProtocol)
		}
	}
	if c.hdrEnd {
		c.finishLocked(s, nil)
	}
	return nil
}

func (c *h2Client) onSettings(f *http2.SettingsFrame) error {
	err := f.ForeachSetting(func(st http2.Setting) error {
		switch st.ID {
		case http2.SettingMaxConcurrentStreams:
			c.maxStreams = st.Val
		case http2.SettingInitialWindowSize:
			d := int64(st.Val) - c.initSend
			c.initSend = int64(st.Val)
			for _, s := range c.streams {
				s.sendWin += d
			}
		case http2.SettingMaxFrameSize:
			c.maxFrame = st.Val
		case http2.SettingHeaderTableSize:
			c.hdr.setTableSize(st.Val)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := c.fr.WriteSettingsAck(); err != nil {
		return err
	}
	if !c.hdr.built() {
		if err := c.hdr.build(); err != nil {
			return err
		}
	}
	if len(c.pending) > 0 {
		c.drainLocked()
	}
	c.topUpLocked(time.Now())
	return nil
}

// h2HeaderBlocks are the request header blocks of one connection, encoded
// once: with the dynamic table, the first block adds every field to it and
// every later block is the same few index bytes; without it (when the
// server's HEADER_TABLE_SIZE is too small, or shrinks during the
// connection), the first block sets the table size to 0 and every block
// is the same literals.
type h2HeaderBlocks struct {
	fields          []hpack.HeaderField
	tableLimit      uint32 // the server's HEADER_TABLE_SIZE
	tableUsed       uint32 // the dynamic table size the encoder assumed
	first, steady   []byte
	noTableFirst    []byte
	noTable         []byte
	sent, noTableOn bool
	noTableSent     bool
}

func (h *h2HeaderBlocks) built() bool { return h.steady != nil }

func (h *h2HeaderBlocks) setTableSize(v uint32) {
	if !h.built() {
		h.tableLimit = v
		return
	}
	if v < h.tableUsed && !h.noTableOn {
		// The next block must shrink the table; from then on no
		// field is indexed.
		h.noTableOn = true
	}
}

func (h *h2HeaderBlocks) build() error {
	var buf bytes.Buffer
	encode := func(e *hpack.Encoder) []byte {
		buf.Reset()
		for _, f := range h.fields {
			e.WriteField(f)
		}
		return bytes.Clone(buf.Bytes())
	}
	e0 := hpack.NewEncoder(&buf)
	e0.SetMaxDynamicTableSizeLimit(0)
	h.noTableFirst = encode(e0)
	h.noTable = encode(e0)

	e := hpack.NewEncoder(&buf)
	e.SetMaxDynamicTableSizeLimit(h.tableLimit)
	h.tableUsed = e.MaxDynamicTableSize()
	h.first = encode(e)
	h.steady = encode(e)
	if !bytes.Equal(h.steady, encode(e)) || h.tableUsed == 0 {
		// The table cannot hold every field: no dynamic table.
		h.first, h.steady = h.noTableFirst, h.noTable
		h.noTableOn, h.noTableSent = false, false
	}
	if len(h.first) > 16384 || len(h.noTableFirst) > 16384 {
		return errors.New("h2: request headers do not fit one frame")
	}
	return nil
}

// next returns the block of the next HEADERS frame; blocks must be sent in
// the order next returns them.
func (h *h2HeaderBlocks) next() []byte {
	if h.noTableOn {
		if !h.noTableSent {
			h.noTableSent = true
			return h.noTableFirst
		}
		return h.noTable
	}
	if !h.sent {
		h.sent = true
		return h.first
	}
	return h.steady
}
