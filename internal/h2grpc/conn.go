package h2grpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	// maxWindow is the largest flow-control window RFC 9113 allows.
	maxWindow = 1<<31 - 1
	// defaultWindow is every window before SETTINGS or WINDOW_UPDATE.
	defaultWindow = 65535
	// maxReadFrame is the largest frame read: the default
	// SETTINGS_MAX_FRAME_SIZE, which this server does not raise.
	maxReadFrame = 16384
	// maxMessageLen bounds grpc-message so that a trailer block always
	// fits in one frame.
	maxMessageLen = 1024
	// keptBuffer is the largest write buffer kept between flushes.
	keptBuffer = 256 << 10
	// maxQueuedData bounds the DATA queued for the writer; the rest of an
	// answer waits as for flow-control window, so that large answers to a
	// slow reader neither pile up nor trip maxPendingWrite.
	maxQueuedData = 128 << 10
)

// conn is one client connection. Its reader goroutine (serve) owns the
// reading Framer and every stream until it is dispatched; its writer
// goroutine (writeLoop) sends, in one Write, all the frames queued in out
// under mu by the reader and the workers.
type conn struct {
	srv *Server
	nc  net.Conn
	br  *bufio.Reader // reader only
	fr  *http2.Framer // reader only, reads br
	// The header block being read (reader only), decoded into hdr as its
	// HEADERS and CONTINUATION frames arrive.
	hdec       *hpack.Decoder
	hdr        requestHeaders
	hdrStream  uint32
	hdrEnded   bool // the HEADERS frame had END_STREAM
	hdrSelfDep bool // the HEADERS frame made the stream depend on itself
	// ctx, every call's parent, is cancelled when the connection ends.
	ctx    context.Context
	cancel context.CancelFunc

	// Reader only.
	connRecvAvail   int64  // bytes the peer may still send on the connection
	connRecvUnacked uint32 // bytes consumed and not yet granted back

	mu                sync.Mutex
	streams           map[uint32]*stream
	maxStreamID       uint32 // highest stream the client opened
	active            uint32 // streams counted against MaxConcurrentStreams
	held              int    // request bytes buffered by counted streams, at most srv.maxHeld
	out, spare        []byte // frames for the writer, and its other buffer
	wfr               *http2.Framer
	henc              *hpack.Encoder
	hbuf              bytes.Buffer
	data              []byte // scratch DATA payload
	sendWindow        int64  // connection send window
	peerInitialWindow int64
	peerMaxFrame      uint32
	blocked           []*stream // answers waiting for window, in order
	queueFull         bool      // an answer waits for room in out (maxQueuedData)
	wakePending       bool
	goingAway         bool // GOAWAY sent: no new streams
	closing           bool // the writer ends once out is flushed
	dead              bool // the connection is gone: answers are dropped
	wake              chan struct{}
	writerDone        chan struct{}
	// The last streams this side reset (c.mu): frames the client sent on
	// them before it saw the reset are ignored (RFC 9113 §5.1).
	resetIDs  [64]uint32
	resetNext uint8

	// Connection lifetime (c.mu): when the last call ended, the last
	// client PING and its strikes, the timers of IdleTimeout and
	// MaxConnectionAge.
	idleSince   time.Time
	lastPing    time.Time
	pingStrikes int
	idleTimer   *time.Timer
	ageTimer    *time.Timer
}

// maxPingStrikes is grpc-go's: the third PING too soon ends the connection.
const maxPingStrikes = 2

// outWriter appends the write Framer's frames to conn.out (mu held).
type outWriter struct{ c *conn }

func (w outWriter) Write(p []byte) (int, error) {
	w.c.out = append(w.c.out, p...)
	return len(p), nil
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{
		srv:               s,
		nc:                nc,
		streams:           map[uint32]*stream{},
		sendWindow:        defaultWindow,
		peerInitialWindow: defaultWindow,
		peerMaxFrame:      maxReadFrame,
		connRecvAvail:     connRecvWindow,
		wake:              make(chan struct{}, 1),
		writerDone:        make(chan struct{}),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.br = bufio.NewReaderSize(nc, 32<<10)
	c.fr = http2.NewFramer(nil, c.br)
	c.fr.SetMaxReadFrameSize(maxReadFrame)
	c.fr.SetReuseFrames()
	c.hdec = hpack.NewDecoder(4096, c.hdr.emit)
	c.hdec.SetMaxStringLength(int(s.opts.MaxHeaderListSize))
	c.wfr = http2.NewFramer(outWriter{c}, nil)
	c.henc = hpack.NewEncoder(&c.hbuf)
	// The server's preface, queued before anything else can be.
	c.wfr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: s.opts.MaxConcurrentStreams},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: recvWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: s.opts.MaxHeaderListSize},
	)
	c.wfr.WriteWindowUpdate(0, connRecvWindow-defaultWindow)
	return c
}

// serve is the reader goroutine.
func (c *conn) serve() {
	go c.writeLoop()
	c.mu.Lock()
	c.signalLocked()
	c.startTimersLocked()
	c.mu.Unlock()
	defer c.finish()
	if err := c.handshake(); err != nil {
		c.fail(err)
		return
	}
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				// A HEADERS frame with too much padding (HPACK would be
				// out of sync) or a zero WINDOW_UPDATE: they end the
				// connection, as RFC 9113 §5.4.1 allows.
				err = http2.ConnectionError(se.Code)
			}
			c.fail(err)
			return
		}
		if err := c.process(f); err != nil {
			c.fail(err)
			return
		}
	}
}

// startTimersLocked starts the timers of IdleTimeout and
// MaxConnectionAge; c.mu held.
func (c *conn) startTimersLocked() {
	o := &c.srv.opts
	if o.IdleTimeout > 0 {
		c.idleSince = time.Now()
		c.idleTimer = time.AfterFunc(o.IdleTimeout, c.checkIdle)
	}
	if o.MaxConnectionAge > 0 {
		// ±10%, as grpc-go's MaxConnectionAge.
		age := o.MaxConnectionAge + time.Duration((rand.Float64()*0.2-0.1)*float64(o.MaxConnectionAge))
		c.ageTimer = time.AfterFunc(age, c.expire)
	}
}

// checkIdle sends GOAWAY once IdleTimeout has passed without a call.
func (c *conn) checkIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead || c.goingAway {
		return
	}
	timeout := c.srv.opts.IdleTimeout
	if c.active > 0 {
		c.idleTimer.Reset(timeout)
		return
	}
	if left := timeout - time.Since(c.idleSince); left > 0 {
		c.idleTimer.Reset(left)
		return
	}
	c.goAwayLocked()
}

// expire runs at MaxConnectionAge: GOAWAY, and after the grace a close.
func (c *conn) expire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return
	}
	c.goAwayLocked()
	if g := c.srv.opts.MaxConnectionAgeGrace; g > 0 {
		c.ageTimer = time.AfterFunc(g, func() { c.nc.Close() })
	}
}

// onPing answers a client PING, and enforces PingMinInterval.
func (c *conn) onPing(f *http2.PingFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gap := c.srv.opts.PingMinInterval; gap > 0 {
		now := time.Now()
		if !c.lastPing.IsZero() && now.Sub(c.lastPing) < gap {
			c.pingStrikes++
		}
		c.lastPing = now
		if c.pingStrikes > maxPingStrikes {
			c.srv.opts.Logger.Debug("h2grpc: too many pings", "remote", c.nc.RemoteAddr().String())
			c.wfr.WriteGoAway(c.maxStreamID, http2.ErrCodeEnhanceYourCalm, []byte("too_many_pings"))
			c.signalLocked()
			return errTooManyPings
		}
	}
	c.wfr.WritePing(true, f.Data)
	c.signalLocked()
	return nil
}

// errTooManyPings ends the reader after the GOAWAY of onPing.
var errTooManyPings = errors.New("h2grpc: too many pings")

// handshake reads the client preface and the client's first SETTINGS.
func (c *conn) handshake() error {
	c.nc.SetReadDeadline(time.Now().Add(c.srv.opts.HandshakeTimeout))
	var preface [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(c.br, preface[:]); err != nil {
		return err
	}
	if string(preface[:]) != http2.ClientPreface {
		return errBadPreface
	}
	f, err := c.fr.ReadFrame()
	if err != nil {
		return err
	}
	if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	c.mu.Lock()
	// Once closing, the writer sets the deadline that ends the reader.
	if !c.closing {
		c.nc.SetReadDeadline(time.Time{})
	}
	c.mu.Unlock()
	return c.process(f)
}

var errBadPreface = errors.New("h2grpc: not an HTTP/2 client preface (only h2c with prior knowledge is served)")

// fail ends the connection after err: protocol errors are answered with
// GOAWAY and their code, I/O errors just close.
func (c *conn) fail(err error) {
	code, ok := http2.ErrCode(0), false
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &ce):
		code, ok = http2.ErrCode(ce), true
	case errors.Is(err, http2.ErrFrameTooLarge):
		code, ok = http2.ErrCodeFrameSize, true
	}
	if !ok {
		c.mu.Lock()
		closing := c.closing
		c.mu.Unlock()
		var ne net.Error
		if closing && errors.As(err, &ne) && ne.Timeout() {
			return // the client did not close its side after ours
		}
		if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			c.srv.opts.Logger.Debug("h2grpc: connection closed", "remote", c.nc.RemoteAddr().String(), "err", err)
		}
		return
	}
	var debug []byte
	if d := c.fr.ErrorDetail(); d != nil {
		debug = []byte(d.Error())
	}
	c.srv.opts.Logger.Debug("h2grpc: protocol error", "remote", c.nc.RemoteAddr().String(), "code", code.String(), "detail", string(debug))
	c.mu.Lock()
	c.wfr.WriteGoAway(c.maxStreamID, code, debug)
	c.signalLocked()
	c.mu.Unlock()
}

// finish runs when the reader stops: it lets the writer flush what is
// queued (GOAWAY included), closes the socket and cancels every call.
func (c *conn) finish() {
	c.mu.Lock()
	c.closing = true
	c.signalLocked()
	c.mu.Unlock()
	t := time.NewTimer(time.Second)
	select {
	case <-c.writerDone:
	case <-t.C:
	}
	t.Stop()
	c.nc.Close()
	c.cancel()
	c.mu.Lock()
	c.dead = true
	if c.idleTimer != nil {
		c.idleTimer.Stop()
	}
	if c.ageTimer != nil {
		c.ageTimer.Stop()
	}
	for id, st := range c.streams {
		delete(c.streams, id)
		st.reset = true
	}
	c.blocked = nil
	c.mu.Unlock()
	c.srv.forget(c)
}

// writeLoop sends everything queued each time it is woken.
func (c *conn) writeLoop() {
	defer close(c.writerDone)
	for range c.wake {
		runtime.Gosched() // let running calls finish: one Write for all their answers
		c.mu.Lock()
		buf := c.out
		c.out, c.spare = c.spare[:0], nil
		c.wakePending = false
		if c.queueFull { // queue the next batch while this one is written
			c.queueFull = false
			c.flushBlockedLocked()
			if len(c.out) > 0 {
				c.signalLocked()
			}
		}
		c.mu.Unlock()
		if len(buf) > 0 {
			if _, err := c.nc.Write(buf); err != nil {
				c.nc.Close()
				return
			}
		}
		c.mu.Lock()
		if cap(buf) <= keptBuffer {
			c.spare = buf[:0]
		}
		done := c.closing && len(c.out) == 0
		if done {
			// Half-close, so that the client reads the GOAWAY and the
			// last answers; the reader then sees EOF or a deadline.
			if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
				cw.CloseWrite()
				c.nc.SetReadDeadline(time.Now().Add(time.Second))
			} else {
				c.nc.Close()
			}
		}
		c.mu.Unlock()
		if done {
			return
		}
	}
}

// signalLocked wakes the writer; c.mu held. A peer that lets more than
// maxPendingWrite bytes pile up is not reading: the socket is closed, and
// the writer woken to fail on it and end.
func (c *conn) signalLocked() {
	if len(c.out) > maxPendingWrite {
		c.nc.Close()
	}
	if !c.wakePending {
		c.wakePending = true
		c.wake <- struct{}{}
	}
}

// process handles one frame; an error ends the connection.
func (c *conn) process(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		return c.onSettings(f)
	case *http2.HeadersFrame:
		c.hdr.reset(c.srv.opts.MaxHeaderListSize)
		c.hdrStream, c.hdrEnded = f.StreamID, f.StreamEnded()
		c.hdrSelfDep = f.HasPriority() && f.Priority.StreamDep == f.StreamID
		return c.headerFragment(f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.ContinuationFrame:
		// The Framer has checked that it continues c.hdrStream's block.
		return c.headerFragment(f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.PingFrame:
		if !f.IsAck() {
			return c.onPing(f)
		}
	case *http2.RSTStreamFrame:
		return c.onReset(f)
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID {
			c.resetStream(f.StreamID, http2.ErrCodeProtocol)
		}
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol)
	case *http2.GoAwayFrame:
		// The client opens no more streams; those in flight are answered.
	}
	return nil
}

func (c *conn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - c.peerInitialWindow
			c.peerInitialWindow = int64(s.Val)
			for _, st := range c.streams {
				st.sendWindow += delta
				if st.sendWindow > maxWindow {
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
			}
		case http2.SettingMaxFrameSize:
			c.peerMaxFrame = s.Val
		case http2.SettingHeaderTableSize:
			c.henc.SetMaxDynamicTableSizeLimit(s.Val)
		}
		return nil
	})
	if err != nil {
		return err
	}
	c.wfr.WriteSettingsAck()
	c.flushBlockedLocked()
	c.signalLocked()
	return nil
}

// headerFragment decodes one fragment of the header block of
// c.hdrStream; the last one hands the block to onHeaders.
func (c *conn) headerFragment(frag []byte, end bool) error {
	h := &c.hdr
	// As x/net's Framer: more fragments after a bad field, or a fragment
	// far beyond what is left of the budget, are a flood.
	if h.blockBytes > 0 && (h.malformed || h.tooLarge) {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if !h.tooLarge && int64(len(frag)) > 4*int64(h.maxSize-min(h.size, h.maxSize)) {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	h.blockBytes += len(frag)
	if _, err := c.hdec.Write(frag); err != nil {
		return http2.ConnectionError(http2.ErrCodeCompression)
	}
	if !end {
		return nil
	}
	if err := c.hdec.Close(); err != nil {
		return http2.ConnectionError(http2.ErrCodeCompression)
	}
	return c.onHeaders()
}

// onHeaders takes a whole header block, c.hdr, of stream c.hdrStream: a
// new request, or the client's trailers.
func (c *conn) onHeaders() error {
	h := &c.hdr
	id := c.hdrStream
	if id%2 == 0 {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	c.mu.Lock()
	if st := c.streams[id]; st != nil {
		c.mu.Unlock()
		// Trailers must end the stream and carry no pseudo-header (RFC
		// 9113 §8.1).
		switch {
		case st.remoteEnded:
			return http2.ConnectionError(http2.ErrCodeStreamClosed)
		case !c.hdrEnded:
			return http2.ConnectionError(http2.ErrCodeProtocol)
		case h.malformed || h.pseudo != 0:
			c.resetStream(id, http2.ErrCodeProtocol)
		default:
			c.endRemote(st)
		}
		return nil
	}
	if id <= c.maxStreamID {
		ignore := c.wasResetLocked(id)
		c.mu.Unlock()
		if ignore {
			return nil
		}
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	c.maxStreamID = id
	if c.goingAway || c.active >= c.srv.opts.MaxConcurrentStreams {
		c.resetLocked(id, http2.ErrCodeRefusedStream)
		c.signalLocked()
		c.mu.Unlock()
		return nil
	}
	// The stream counts from here, in the critical section that raised
	// maxStreamID, so that a GOAWAY covering it never finds the connection
	// idle before it is answered. Every way out releases it.
	st := &stream{c: c, id: id, recvAvail: recvWindow, lenLeft: -1, sendWindow: c.peerInitialWindow, counted: true}
	c.streams[id] = st
	c.active++
	c.mu.Unlock()
	if h.malformed || c.hdrSelfDep {
		c.resetStream(id, http2.ErrCodeProtocol)
		return nil
	}
	if c.route(st) && c.hdrEnded {
		c.endRemote(st)
	}
	return nil
}

// route finds what answers a new request: a handler, or an HTTP status for
// a request that is not a gRPC call (answered when it ends, its body read
// and dropped). It reports false when it has answered or reset the stream.
func (c *conn) route(st *stream) bool {
	h, ended := &c.hdr, c.hdrEnded
	if h.tooLarge {
		st.status = 431
		return true
	}
	if h.method == "" || h.path == "" || h.scheme == "" {
		c.resetStream(st.id, http2.ErrCodeProtocol)
		return false
	}
	if h.contentLength != "" { // when sent, it must match the DATA (RFC 9113 §8.1.1)
		n, err := strconv.ParseInt(h.contentLength, 10, 64)
		if err != nil || n < 0 {
			c.resetStream(st.id, http2.ErrCodeProtocol)
			return false
		}
		st.lenLeft = n
	}
	hd := c.srv.handlers[h.path]
	switch {
	case h.method != "POST":
		st.status = 405
	case !isGRPC(h.contentType):
		st.status = 415
	case hd == nil:
		c.answerStatus(st, codes.Unimplemented, "unknown method "+h.path, ended)
		return false
	case h.encoding != "" && h.encoding != "identity":
		c.answerStatus(st, codes.Unimplemented, fmt.Sprintf("grpc-encoding %q is not supported; send uncompressed messages", h.encoding), ended)
		return false
	case h.timeout != "":
		d, ok := parseTimeout(h.timeout)
		if !ok {
			c.answerStatus(st, codes.Internal, fmt.Sprintf("malformed grpc-timeout %q", h.timeout), ended)
			return false
		}
		st.timeout, st.hasTimeout = d, true
		fallthrough
	default:
		st.handler = hd
	}
	return true
}

// isGRPC reports whether a content-type is gRPC's: application/grpc,
// alone or with a "+codec" or ";parameters" suffix.
func isGRPC(ct string) bool {
	const base = "application/grpc"
	if len(ct) < len(base) || !strings.EqualFold(ct[:len(base)], base) {
		return false
	}
	return len(ct) == len(base) || ct[len(base)] == '+' || ct[len(base)] == ';'
}

// parseTimeout reads grpc-timeout: at most 8 digits and a unit.
func parseTimeout(s string) (time.Duration, bool) {
	if len(s) < 2 || len(s) > 9 {
		return 0, false
	}
	n, err := strconv.ParseUint(s[:len(s)-1], 10, 64)
	if err != nil {
		return 0, false
	}
	var unit time.Duration
	switch s[len(s)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	const maxD = time.Duration(1<<63 - 1)
	if n > uint64(maxD/unit) {
		return maxD, true
	}
	return time.Duration(n) * unit, true
}

func (c *conn) onData(f *http2.DataFrame) error {
	n := int64(f.Header().Length)
	c.connRecvAvail -= n
	if c.connRecvAvail < 0 {
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	// Data is consumed as it arrives: its window is granted back in
	// batches.
	c.connRecvUnacked += uint32(n)
	if c.connRecvUnacked >= connRecvWindow/2 {
		c.grant(0, c.connRecvUnacked)
		c.connRecvAvail += int64(c.connRecvUnacked)
		c.connRecvUnacked = 0
	}
	id, data := f.StreamID, f.Data()
	c.mu.Lock()
	st := c.streams[id]
	idle := id > c.maxStreamID
	if st == nil && !idle && c.wasResetLocked(id) {
		c.mu.Unlock()
		return nil
	}
	// A call's request bytes count against the connection's budget from
	// the moment they are buffered until its handler returns.
	held := false
	if st != nil && !st.remoteEnded && st.status == 0 && c.held+len(data) <= c.srv.maxHeld {
		c.held += len(data)
		st.held += len(data)
		held = true
	}
	c.mu.Unlock()
	switch {
	case st == nil && idle:
		return http2.ConnectionError(http2.ErrCodeProtocol)
	case st == nil || st.remoteEnded:
		c.resetStream(id, http2.ErrCodeStreamClosed)
		return nil
	}
	st.recvAvail -= int32(n)
	if st.recvAvail < 0 {
		c.resetStream(id, http2.ErrCodeFlowControl)
		return nil
	}
	if st.lenLeft >= 0 {
		if st.lenLeft -= int64(len(data)); st.lenLeft < 0 {
			c.resetStream(id, http2.ErrCodeProtocol)
			return nil
		}
	}
	switch {
	case st.status != 0:
		// The body of a request that is not a call is dropped, and its
		// window never granted back: a body longer than the window is
		// answered before its end, then reset.
		switch {
		case f.StreamEnded():
			c.endRemote(st)
		case st.recvAvail < maxReadFrame:
			c.answerHTTP(st, strconv.Itoa(int(st.status)))
		}
		return nil
	case len(st.msg)+len(data) > 5+c.srv.opts.MaxRecvMsgSize:
		c.answerStatus(st, codes.ResourceExhausted, fmt.Sprintf("request message larger than max (%d bytes)", c.srv.opts.MaxRecvMsgSize), f.StreamEnded())
		return nil
	case !held:
		c.answerStatus(st, codes.ResourceExhausted, "the server buffers too many request bytes for this connection; retry later", f.StreamEnded())
		return nil
	default:
		st.msg = append(st.msg, data...)
	}
	if f.StreamEnded() {
		c.endRemote(st)
		return nil
	}
	st.recvUnacked += uint32(n)
	if st.recvUnacked >= recvWindow/2 {
		c.grant(id, st.recvUnacked)
		st.recvAvail += int32(st.recvUnacked)
		st.recvUnacked = 0
	}
	return nil
}

// grant gives n bytes of receive window back on stream id (0: the
// connection).
func (c *conn) grant(id, n uint32) {
	c.mu.Lock()
	c.wfr.WriteWindowUpdate(id, n)
	c.signalLocked()
	c.mu.Unlock()
}

// endRemote runs when the client has sent its whole request: the message
// is checked and the call dispatched, or the HTTP error answered.
func (c *conn) endRemote(st *stream) {
	st.remoteEnded = true
	if st.lenLeft > 0 {
		c.resetStream(st.id, http2.ErrCodeProtocol)
		return
	}
	if st.status != 0 {
		c.mu.Lock()
		if !st.reset {
			c.answerPlainLocked(st)
		}
		c.mu.Unlock()
		return
	}
	code, msg := codes.OK, ""
	switch {
	case len(st.msg) < 5:
		code, msg = codes.Internal, "request has no message"
	case st.msg[0] != 0:
		code, msg = codes.Internal, "compressed flag set without a supported grpc-encoding"
	case uint64(binary.BigEndian.Uint32(st.msg[1:5])) != uint64(len(st.msg)-5):
		code, msg = codes.Internal, "request must carry exactly one message"
	}
	if code != codes.OK {
		c.answerStatus(st, code, msg, true)
		return
	}
	st.ctx.init(c.ctx, st.timeout, st.hasTimeout)
	c.mu.Lock()
	if st.reset {
		c.mu.Unlock()
		st.ctx.cancel()
		return
	}
	st.dispatched = true
	c.mu.Unlock()
	c.srv.dispatch(st)
}

func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	inc := int64(f.Increment)
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID == 0 {
		c.sendWindow += inc
		if c.sendWindow > maxWindow {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
	} else {
		st := c.streams[f.StreamID]
		if st == nil {
			if f.StreamID > c.maxStreamID {
				return http2.ConnectionError(http2.ErrCodeProtocol)
			}
			return nil
		}
		st.sendWindow += inc
		if st.sendWindow > maxWindow {
			c.resetLocked(st.id, http2.ErrCodeFlowControl)
			c.signalLocked()
			return nil
		}
	}
	c.flushBlockedLocked()
	c.signalLocked()
	return nil
}

func (c *conn) onReset(f *http2.RSTStreamFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID > c.maxStreamID {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if st := c.streams[f.StreamID]; st != nil {
		c.forgetLocked(st)
	}
	return nil
}

// resetStream sends RST_STREAM with code and forgets the stream.
func (c *conn) resetStream(id uint32, code http2.ErrCode) {
	c.mu.Lock()
	c.resetLocked(id, code)
	c.signalLocked()
	c.mu.Unlock()
}

func (c *conn) resetLocked(id uint32, code http2.ErrCode) {
	c.wfr.WriteRSTStream(id, code)
	c.noteResetLocked(id)
	if st := c.streams[id]; st != nil {
		c.forgetLocked(st)
	}
}

// noteResetLocked remembers that this side reset stream id.
func (c *conn) noteResetLocked(id uint32) {
	c.resetIDs[c.resetNext%uint8(len(c.resetIDs))] = id
	c.resetNext++
}

// wasResetLocked reports whether this side reset stream id lately.
func (c *conn) wasResetLocked(id uint32) bool {
	for _, r := range c.resetIDs {
		if r == id {
			return true
		}
	}
	return false
}

// forgetLocked removes st: its handler, if running, is cancelled and its
// answer dropped; otherwise it stops counting against the limits now (a
// running handler's stream counts until the handler returns, so that a
// client resetting streams cannot pile up work).
func (c *conn) forgetLocked(st *stream) {
	delete(c.streams, st.id)
	st.reset = true
	if st.dispatched && !st.answered {
		st.ctx.cancel()
	} else {
		c.releaseLocked(st)
	}
}

// releaseLocked ends st's share of MaxConcurrentStreams and of the
// connection's request bytes; it runs once per stream, when its answer is
// completely queued or it is forgotten.
func (c *conn) releaseLocked(st *stream) {
	if !st.counted {
		return
	}
	st.counted = false
	c.active--
	c.held -= st.held
	st.held = 0
	if c.active == 0 && c.idleTimer != nil {
		c.idleSince = time.Now()
	}
	c.drainCheckLocked()
}

// drainCheckLocked lets the writer close a connection that was sent
// GOAWAY once nothing is left to answer (answers waiting for window
// count as active).
func (c *conn) drainCheckLocked() {
	if c.goingAway && c.active == 0 {
		c.closing = true
		c.signalLocked()
	}
}

// goAway starts a graceful shutdown of the connection.
func (c *conn) goAway() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.goAwayLocked()
}

func (c *conn) goAwayLocked() {
	if c.goingAway {
		return
	}
	c.goingAway = true
	c.wfr.WriteGoAway(c.maxStreamID, http2.ErrCodeNo, nil)
	c.signalLocked()
	c.drainCheckLocked()
}

// answerHTTP answers a request that is not gRPC with a bare HTTP status
// before its end, and drops the stream (as answerStatus).
func (c *conn) answerHTTP(st *stream, status string) {
	c.mu.Lock()
	c.writeHeadersLocked(st.id, true, hpack.HeaderField{Name: ":status", Value: status})
	c.answeredEarlyLocked(st, false)
	c.mu.Unlock()
}

// answerPlainLocked answers a complete request that is not a gRPC call:
// its HTTP status and a line of text, sent under flow control like any
// answer.
func (c *conn) answerPlainLocked(st *stream) {
	c.writeHeadersLocked(st.id, false, hpack.HeaderField{Name: ":status", Value: strconv.Itoa(int(st.status))}, fieldTextType)
	st.pending = plainBody
	if st.status == 431 {
		st.pending = plainBody431
	}
	if !c.sendLocked(st) {
		c.blocked = append(c.blocked, st)
	}
	c.signalLocked()
}

// answerStatus answers a call that never reached its handler with a
// trailers-only response, and drops the stream.
func (c *conn) answerStatus(st *stream, code codes.Code, msg string, ended bool) {
	c.mu.Lock()
	c.writeStatusLocked(st.id, true, code, msg)
	c.answeredEarlyLocked(st, ended)
	c.mu.Unlock()
}

// answeredEarlyLocked drops a stream whose answer was just queued, in the
// same critical section, so that a draining connection cannot close in
// between. When the client was still sending, RST_STREAM NO_ERROR tells it
// to stop (RFC 9113 §8.1).
func (c *conn) answeredEarlyLocked(st *stream, ended bool) {
	if !ended {
		c.wfr.WriteRSTStream(st.id, http2.ErrCodeNo)
		c.noteResetLocked(st.id)
	}
	if c.streams[st.id] == st {
		delete(c.streams, st.id)
	}
	st.reset = true
	c.releaseLocked(st)
	c.signalLocked()
}

var (
	fieldStatus200 = hpack.HeaderField{Name: ":status", Value: "200"}
	fieldGRPCType  = hpack.HeaderField{Name: "content-type", Value: "application/grpc"}
	fieldStatusOK  = hpack.HeaderField{Name: "grpc-status", Value: "0"}
	fieldTextType  = hpack.HeaderField{Name: "content-type", Value: "text/plain; charset=utf-8"}

	// The bodies of HTTP errors; never modified.
	plainBody    = []byte("h2grpc: this server answers gRPC calls only (HTTP/2 POST, content-type application/grpc)\n")
	plainBody431 = []byte("h2grpc: request header fields too large\n")
)

// writeStatusLocked writes the trailers of a call: after its message, or
// alone (trailers-only, with :status and content-type).
func (c *conn) writeStatusLocked(id uint32, trailersOnly bool, code codes.Code, msg string) {
	c.hbuf.Reset()
	if trailersOnly {
		c.henc.WriteField(fieldStatus200)
		c.henc.WriteField(fieldGRPCType)
	}
	if code == codes.OK {
		c.henc.WriteField(fieldStatusOK)
	} else {
		c.henc.WriteField(hpack.HeaderField{Name: "grpc-status", Value: strconv.Itoa(int(code))})
		if msg != "" {
			c.henc.WriteField(hpack.HeaderField{Name: "grpc-message", Value: encodeMessage(msg)})
		}
	}
	c.writeBlockLocked(id, true)
}

func (c *conn) writeHeadersLocked(id uint32, end bool, fields ...hpack.HeaderField) {
	c.hbuf.Reset()
	for _, f := range fields {
		c.henc.WriteField(f)
	}
	c.writeBlockLocked(id, end)
}

// writeBlockLocked sends the header block in c.hbuf as HEADERS and, if it
// exceeds the peer's frame size, CONTINUATION frames.
func (c *conn) writeBlockLocked(id uint32, end bool) {
	block := c.hbuf.Bytes()
	max := int(c.peerMaxFrame)
	first := block[:min(len(block), max)]
	block = block[len(first):]
	c.wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: end, EndHeaders: len(block) == 0})
	for len(block) > 0 {
		frag := block[:min(len(block), max)]
		block = block[len(frag):]
		c.wfr.WriteContinuation(id, len(block) == 0, frag)
	}
}

// encodeMessage percent-encodes grpc-message as the gRPC HTTP/2 protocol
// says (bytes outside printable ASCII, and '%'), cut to maxMessageLen.
func encodeMessage(msg string) string {
	msg = msg[:min(len(msg), maxMessageLen)]
	const hex = "0123456789ABCDEF"
	var b []byte // nil while msg needs no escape
	for i := 0; i < len(msg); i++ {
		switch c := msg[i]; {
		case c < 0x20 || c > 0x7e || c == '%':
			if b == nil {
				b = append(make([]byte, 0, len(msg)+8), msg[:i]...)
			}
			b = append(b, '%', hex[c>>4], hex[c&15])
		case b != nil:
			b = append(b, c)
		}
	}
	if b == nil {
		return msg
	}
	return string(b)
}

// respond sends a handler's answer (worker goroutine).
func (c *conn) respond(st *stream, out []byte, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st.answered = true
	c.pingStrikes = 0 // as grpc-go forgives them when it sends data
	// The request is no longer needed.
	st.msg = nil
	c.held -= st.held
	st.held = 0
	if c.dead || st.reset {
		c.releaseLocked(st)
		return
	}
	if err != nil {
		code, msg := errorStatus(err)
		if code == codes.OK {
			code = codes.Unknown
		}
		c.writeStatusLocked(st.id, true, code, msg)
		delete(c.streams, st.id)
		c.releaseLocked(st)
		c.signalLocked()
		return
	}
	c.writeHeadersLocked(st.id, false, fieldStatus200, fieldGRPCType)
	var prefix [5]byte
	binary.BigEndian.PutUint32(prefix[1:], uint32(len(out)))
	c.data = append(append(c.data[:0], prefix[:]...), out...)
	st.pending = c.data
	if !c.sendLocked(st) {
		st.pending = bytes.Clone(st.pending)
		c.blocked = append(c.blocked, st)
	}
	if cap(c.data) > keptBuffer {
		c.data = nil
	}
	c.signalLocked()
}

// sendLocked sends as much of st's answer as the flow-control windows and
// maxQueuedData allow, then its end (a call's trailers, or an empty DATA
// frame ending an HTTP error); it reports whether the answer is complete.
func (c *conn) sendLocked(st *stream) bool {
	for len(st.pending) > 0 {
		room := maxQueuedData - len(c.out)
		if room <= 0 {
			c.queueFull = true
			return false
		}
		n := min(int64(len(st.pending)), c.sendWindow, st.sendWindow, int64(c.peerMaxFrame), int64(room))
		if n <= 0 {
			return false
		}
		c.wfr.WriteData(st.id, false, st.pending[:n])
		st.pending = st.pending[n:]
		c.sendWindow -= n
		st.sendWindow -= n
	}
	if st.status == 0 {
		c.writeStatusLocked(st.id, false, codes.OK, "")
	} else {
		c.wfr.WriteData(st.id, true, nil)
	}
	delete(c.streams, st.id)
	c.releaseLocked(st)
	return true
}

// flushBlockedLocked sends the answers that waited for window or room, in
// order.
func (c *conn) flushBlockedLocked() {
	kept := c.blocked[:0]
	for _, st := range c.blocked {
		if st.reset || c.sendLocked(st) {
			continue
		}
		kept = append(kept, st)
	}
	clear(c.blocked[len(kept):])
	c.blocked = kept
}

// stream is one call, or one request that is not a call. Its fields are
// ordered to keep it small: it is the one allocation per call of the
// reader.
type stream struct {
	c       *conn
	handler Handler

	// Reader only, until dispatched; then the worker reads msg and ctx.
	msg     []byte // gRPC length-prefixed request
	lenLeft int64  // content-length minus the DATA received; -1 without content-length
	timeout time.Duration
	ctx     callCtx

	// c.mu.
	held       int // bytes of msg counted in c.held
	sendWindow int64
	pending    []byte // answer DATA not yet sent

	id uint32
	// Reader only.
	recvAvail   int32
	recvUnacked uint32
	// status is the HTTP status answering a request that is not a gRPC
	// call (405, 415, 431), 0 for a call.
	status      uint16
	remoteEnded bool
	hasTimeout  bool

	// c.mu.
	counted    bool // in c.active, and its held bytes in c.held
	dispatched bool // its handler was started
	answered   bool // its handler returned
	reset      bool // forgotten: reset by either side, or the conn ended
}

var outPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// run calls the handler and sends its answer (worker goroutine). A
// panicking handler answers INTERNAL instead of ending the process.
func (st *stream) run() {
	bp := outPool.Get().(*[]byte)
	out, err := st.call((*bp)[:0])
	st.c.respond(st, out, err)
	st.ctx.cancel()
	if cap(out) <= keptBuffer {
		*bp = out[:0]
	}
	outPool.Put(bp)
}

func (st *stream) call(out []byte) (res []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			st.c.srv.opts.Logger.Error("h2grpc: handler panicked", "stream", st.id, "panic", p)
			res, err = nil, errInternal
		}
	}()
	return st.handler(&st.ctx, st.msg[5:], out)
}

var errInternal = status.Error(codes.Internal, "internal error")
