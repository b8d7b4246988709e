package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"

	"github.com/aileron-dev/aileron-proxy/internal/hostport"
)

// The HTTP/1.1 upstream: requests from HTTP/1.1 clients go upstream over
// HTTP/1.1, on a pooled connection that the request's own goroutine writes
// and reads. http.Transport gives every connection a read and a write
// goroutine and every request three handoffs between them; its HTTP/2 client
// starts a goroutine per request and hands each response over from its read
// loop. An HTTP/1.1 client sends one request at a time per connection, so
// nothing is gained by multiplexing its requests, and each handoff is a
// wakeup (a futex and a context switch when the cores are idle). HTTP/2
// clients keep the pooled transport: their streams are concurrent and
// HTTP/2 upstream serves them on one connection.
//
// A request body of known length up to inlineBodyMax is written before the
// response is read: the socket buffers hold it whole, so an upstream that
// answers before reading it (an early 413) cannot stall the writer. A larger
// or chunked body is written by a goroutine while the response is read, as
// http.Transport does.

// inlineBodyMax is the largest request body written inline.
const inlineBodyMax = 64 << 10

// h1Conn is one pooled HTTP/1.1 connection to an upstream.
type h1Conn struct {
	target string
	conn   net.Conn
	raw    *readBufConn  // under conn's TLS
	rc     *rawConn      // under raw; nil when the dialer's conn is not TCP
	lim    limitedReader // under br: caps the response header block
	br     *bufio.Reader
	bw     *bufio.Writer
	reused bool
	idle   time.Time // when it was returned to the pool
	// deadline is conn's read deadline; the one goroutine using the
	// connection at a time sets it.
	deadline readDeadline
}

// heldPending reports whether a request waits to be sent: its answer came
// from bytes read before it (an upstream that sent more than it was asked
// for), so the connection cannot be reused.
func (c *h1Conn) heldPending() bool { return c.rc != nil && c.rc.heldPending() }

// limitedReader reads from r while n > 0; n < 0 means no limit. It counts
// what it read, so a failed read on a reused connection can tell whether
// the upstream answered at all.
type limitedReader struct {
	r    io.Reader
	n    int64
	read int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n == 0 {
		return 0, errHeaderTooLarge
	}
	if l.n > 0 && int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	if l.n > 0 {
		l.n -= int64(n)
	}
	l.read += int64(n)
	return n, err
}

// errHeaderTooLarge is limitedReader's error: a request's (serve_h1.go) or
// a response's header block is larger than the limit.
var errHeaderTooLarge = errors.New("the header block is larger than the limit")

// h1Pool holds idle upstream connections by target (normalized host:port).
type h1Pool struct {
	mu      sync.Mutex
	idle    map[string][]*h1Conn
	closed  bool
	maxIdle int
	timeout time.Duration // idle connections older than this are closed
}

func (p *h1Pool) get(target string, now time.Time) *h1Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.idle[target]
	for len(list) > 0 {
		c := list[len(list)-1]
		list[len(list)-1] = nil
		list = list[:len(list)-1]
		p.idle[target] = list
		if now.Sub(c.idle) < p.timeout {
			return c
		}
		_ = c.conn.Close()
	}
	return nil
}

// put returns c to the pool; it is closed when the pool is full or closed.
func (p *h1Pool) put(c *h1Conn, now time.Time) {
	c.idle = now
	c.reused = true
	p.mu.Lock()
	if !p.closed && len(p.idle[c.target]) < p.maxIdle {
		if p.idle == nil {
			p.idle = make(map[string][]*h1Conn)
		}
		p.idle[c.target] = append(p.idle[c.target], c)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	_ = c.conn.Close()
}

// closeIdle closes every idle connection; with stop, the pool keeps none
// from then on.
func (p *h1Pool) closeIdle(stop bool) {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.closed = p.closed || stop
	p.mu.Unlock()
	for _, list := range idle {
		for _, c := range list {
			_ = c.conn.Close()
		}
	}
}

// dialH1 opens a new HTTP/1.1 TLS connection to target.
func (s *Server) dialH1(ctx context.Context, target string) (*h1Conn, error) {
	hp, err := hostport.NewAddr(target)
	if err != nil {
		return nil, fmt.Errorf("dialing: %w", err)
	}
	dctx, cancel := context.WithTimeout(ctx, s.limits.DialTimeout)
	raw, err := s.dialRaw(dctx, "tcp", target)
	cancel()
	if err != nil {
		return nil, err
	}
	cfg := s.h1TLS.Clone()
	cfg.ServerName = hp.Host
	rb := &readBufConn{Conn: raw}
	tc := tls.Client(rb, cfg)
	hctx, cancel := context.WithTimeout(ctx, s.limits.TLSHandshakeTimeout)
	err = tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		_ = raw.Close()
		return nil, err
	}
	c := &h1Conn{target: target, conn: tc, raw: rb}
	c.rc, _ = raw.(*rawConn)
	c.deadline.conn = tc
	c.lim = limitedReader{r: tc, n: -1}
	c.br = bufio.NewReaderSize(&c.lim, 16<<10)
	c.bw = bufio.NewWriterSize(tc, 4<<10)
	return c, nil
}

// isIdempotent reports whether a bodiless request may be sent again after
// a reused connection failed before any answer (as http.Transport does).
func isIdempotent(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return r.Header.Get("Idempotency-Key") != "" || r.Header.Get("X-Idempotency-Key") != ""
}

// roundTripH1 sends out over a pooled HTTP/1.1 connection and returns the
// response; its body returns the connection to the pool when read to the
// end, and closes it when closed early.
func (s *Server) roundTripH1(out *http.Request, watch clientWatcher) (*http.Response, error) {
	ctx := out.Context()
	for attempt := 0; ; attempt++ {
		c := s.h1Pool.get(out.URL.Host, s.now())
		if c == nil {
			var err error
			if c, err = s.dialH1(ctx, out.URL.Host); err != nil {
				return nil, err
			}
		}
		resp, err := s.exchangeH1(c, out, watch)
		if err == nil {
			return resp, nil
		}
		_ = c.conn.Close()
		// A reused connection the upstream closed while it sat idle fails
		// before any byte of an answer: send once more on a new one.
		if c.reused && c.lim.read == 0 && attempt == 0 && out.Body == http.NoBody && isIdempotent(out) && ctx.Err() == nil && !errors.Is(err, errClientClosed) {
			continue
		}
		return nil, err
	}
}

// exchangeH1 writes out on c and reads the response header; watch watches
// the client during a long wait (awaitAnswer).
func (s *Server) exchangeH1(c *h1Conn, out *http.Request, watch clientWatcher) (*http.Response, error) {
	c.lim.read = 0
	var wrote chan error // the body writer's result, when it runs apart
	if out.Body == http.NoBody || (out.ContentLength > 0 && out.ContentLength <= inlineBodyMax) {
		// Nothing of an earlier answer is left unread: the request can wait
		// to be sent by the read of its answer (rawConn.holdWrites).
		hold := c.rc != nil && c.br.Buffered() == 0 && c.raw.buffered() == 0
		if hold {
			c.rc.holdWrites(true)
		}
		err := writeRequest(c.bw, out)
		if hold {
			c.rc.holdWrites(false)
		}
		if err != nil {
			return nil, err
		}
	} else {
		wrote = make(chan error, 1)
		go func() { wrote <- writeRequest(c.bw, out) }()
	}
	sent := time.Now()
	var headerBy time.Time
	if d := s.limits.ResponseHeaderTimeout; d > 0 {
		headerBy = sent.Add(d)
	}
	c.lim.n = int64(s.limits.MaxHeaderBytes)
	var resp *http.Response
	err := awaitAnswer(c, sent, headerBy, watch, wrote)
	for err == nil {
		resp, err = http.ReadResponse(c.br, out)
		if err != nil {
			break
		}
		// 1xx answers (103 Early Hints) precede the final one; a bodiless
		// request never asked for 100 Continue. 101 is not a switch here:
		// WebSockets take the transport.
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		c.lim.n = int64(s.limits.MaxHeaderBytes)
		c.deadline.set(headerBy, time.Now())
	}
	c.lim.n = -1
	if err != nil && wrote != nil {
		_ = c.conn.Close() // stops the writer
		<-wrote
	}
	if err != nil {
		if errors.Is(err, errHeaderTooLarge) {
			err = fmt.Errorf("reading the response from %s: %w", c.target, err)
		}
		return nil, err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		_ = c.conn.Close()
		if wrote != nil {
			<-wrote
		}
		return nil, fmt.Errorf("%s switched protocols for a request that did not ask to", c.target)
	}
	if resp.ContentLength < 0 || int64(c.br.Buffered()) < resp.ContentLength {
		// The body is streamed without the header's deadline; one already
		// buffered whole is not read from the connection again, and the
		// next exchange sets its own deadline.
		c.deadline.setExactly(time.Time{})
	}
	reuse := !resp.Close && !out.Close
	resp.Body = &h1Body{rc: resp.Body, c: c, s: s, reuse: reuse, empty: resp.Body == http.NoBody, wrote: wrote}
	return resp, nil
}

// clientWatchAfter is how long a wait for an upstream's answer goes
// before the client is watched too.
const clientWatchAfter = time.Second

// errClientClosed ends an exchange whose client left while the upstream
// had not answered yet.
var errClientClosed = errors.New("the client closed the connection before the upstream answered")

// clientWatcher watches the client of an exchange during a long wait for
// the upstream's answer; the zero value watches nothing.
type clientWatcher struct {
	w    http.ResponseWriter
	r    *http.Request
	body *countingBody // nil for a bodiless request
}

// start starts the watch; see watchClient.
func (cw clientWatcher) start() (context.Context, func()) {
	// A body sent upstream is read to io.EOF, even one of known length
	// (net/http's writer checks nothing follows it).
	return clientWatch(cw.w, cw.r, cw.body == nil || cw.body.eof.Load())
}

// awaitAnswer waits until the first byte of the answer to a request sent
// at sent is here, or the header deadline headerBy (zero for none)
// passes. A wait longer than clientWatchAfter also watches the client with
// watch once the request's body, if any, was read whole (wrote, when a
// goroutine writes it, holds its result), as http.Server's background read
// does: a client that leaves ends the wait (errClientClosed), so an
// upstream is not kept computing an answer nobody will read. The first
// part of the wait is bounded by the same lazy deadline as every request,
// so a fast answer costs no timer.
func awaitAnswer(c *h1Conn, sent, headerBy time.Time, watch clientWatcher, wrote chan error) error {
	first := sent.Add(clientWatchAfter)
	if watch.w == nil || c.br.Buffered() > 0 || (!headerBy.IsZero() && !headerBy.After(first)) {
		c.deadline.set(headerBy, sent)
		return nil
	}
	c.deadline.set(first, sent)
	if _, err := c.br.Peek(1); !errors.Is(err, os.ErrDeadlineExceeded) || time.Now().Before(first) {
		// The answer, an error ReadResponse meets again, or a deadline
		// kept from an earlier request (deadlineSlack): the rest of the
		// header, if not here yet, gets the header deadline.
		if err != nil || !headerBuffered(c.br) {
			c.deadline.set(headerBy, time.Now())
		}
		return nil
	}
	if wrote != nil {
		// A body written apart must have been read from the client whole
		// before the client can be watched.
		select {
		case err := <-wrote:
			wrote <- err // the writer has ended; its result stays for the exchange
		default:
			c.deadline.set(headerBy, time.Now())
			return nil
		}
	}
	ctx, stop := watch.start()
	defer stop()
	c.deadline.set(headerBy, time.Now())
	unblock := context.AfterFunc(ctx, func() { _ = c.conn.SetReadDeadline(time.Unix(1, 0)) })
	_, _ = c.br.Peek(1)
	if !unblock() {
		return errClientClosed // the connection's deadline is spent: it is not reused
	}
	return nil
}

// writeRequest writes out and flushes it.
func writeRequest(bw *bufio.Writer, out *http.Request) error {
	if !writeRequestHead(bw, out) {
		if err := out.Write(bw); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// requestHeadSkip are the header keys (*http.Request).Write writes from
// the request's fields, never from Header.
var requestHeadSkip = map[string]bool{
	"Host":              true,
	"User-Agent":        true,
	"Content-Length":    true,
	"Transfer-Encoding": true,
	"Trailer":           true,
}

// writeRequestHead writes a bodiless request as (*http.Request).Write
// does, less its cost (three fmt.Fprintf, a transfer writer and a sort per
// request), and reports whether it did. Header fields keep the map's order,
// as writeHeaderLines does for responses; everything else is the same
// bytes. A request with a body, trailers, Close, CONNECT, or a host or
// target Write would rewrite or refuse is left to Write: false, nothing
// written. TestWriteRequestHeadMatchesWrite and FuzzWriteRequestHead
// compare the two.
func writeRequestHead(bw *bufio.Writer, r *http.Request) bool {
	if (r.Body != nil && r.Body != http.NoBody) || r.ContentLength != 0 ||
		len(r.TransferEncoding) > 0 || r.Trailer != nil || r.Close ||
		r.Method == http.MethodConnect || r.URL == nil || r.URL.Opaque != "" {
		return false
	}
	host := r.Host
	if host == "" {
		host = r.URL.Host
	}
	// Write would punycode a non-ASCII host and drop an IPv6 zone.
	for i := 0; i < len(host); i++ {
		if host[i] >= utf8.RuneSelf || host[i] == '%' {
			return false
		}
	}
	if !httpguts.ValidHostHeader(host) {
		return false
	}
	target := r.URL.RequestURI()
	for i := 0; i < len(target); i++ {
		if target[i] < ' ' || target[i] == 0x7f {
			return false
		}
	}
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	bw.WriteString(method)
	bw.WriteByte(' ')
	bw.WriteString(target)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	userAgent := "Go-http-client/1.1" // Write's default
	if _, ok := r.Header["User-Agent"]; ok {
		userAgent = r.Header.Get("User-Agent")
	}
	if userAgent != "" {
		bw.WriteString("User-Agent: ")
		writeFieldValue(bw, userAgent)
		bw.WriteString("\r\n")
	}
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		// Write sends a zero length for the methods that usually have a body.
		bw.WriteString("Content-Length: 0\r\n")
	}
	_ = writeHeaderLines(bw, r.Header, requestHeadSkip)
	bw.WriteString("\r\n")
	return true
}

// h1Body is a response body read from a pooled connection.
type h1Body struct {
	rc    io.ReadCloser
	c     *h1Conn // nil once returned or closed
	s     *Server
	reuse bool
	empty bool // the response has no body: closing it is reading it to the end
	// wrote is the result of a body writer still running apart, or nil.
	wrote chan error
}

func (b *h1Body) Read(p []byte) (int, error) {
	if b.c == nil {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	// A fast body: go on while the next record is already read from the
	// socket (the read cannot wait), so the body moves in large pieces.
	for err == nil && len(p)-n >= 16<<10 && b.c.raw.buffered() >= maxRecordWire {
		var m int
		m, err = b.rc.Read(p[n:])
		n += m
	}
	if err != nil {
		b.done(err == io.EOF)
	}
	return n, err
}

// Close before the end of the body closes the connection: what is left of
// the body would have to be read first.
func (b *h1Body) Close() error {
	if b.c != nil {
		b.done(b.empty)
	}
	return nil
}

func (b *h1Body) done(eof bool) {
	c := b.c
	b.c = nil
	if b.wrote != nil {
		// The request must be written whole before the connection is
		// reused; an upstream that answered without reading all of it
		// leaves the rest unread, so the connection is not reused.
		select {
		case err := <-b.wrote:
			eof = eof && err == nil
		default:
			eof = false
			_ = c.conn.Close()
			<-b.wrote
		}
	}
	if eof && b.reuse && c.br.Buffered() == 0 && !c.heldPending() {
		b.s.h1Pool.put(c, b.s.now())
		return
	}
	_ = c.conn.Close()
}
