package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/http/httpguts"
)

// Serving intercepted HTTP/1.1 connections.
//
// An intercepted HTTP/1.1 connection is served by a loop on the goroutine
// hijackConnect starts for its tunnel: net/http's own parser
// (http.ReadRequest) reads each request, the checks http.Server adds after
// it are repeated here (h1Check), and innerHandler decides and forwards it.
// http.Server would cost, per request, a goroutine that reads ahead to
// notice a client that went away (started, parked in the poller, woken by a
// deadline and waited for) and a handoff of every connection from the
// listener; with the HTTP/1.1 upstream driven by the same goroutine
// (upstream_h1.go), a request crosses no goroutine at all. The framing scan (smuggle.go) sees every byte
// the parser reads, exactly as under http.Server.
//
// What a client sees is what http.Server gives it: the same status lines for
// malformed requests, "100 Continue" when the body is first read, a
// Content-Length on short bodies that finished before a flush, chunked
// encoding with trailers otherwise, keep-alive unless either side asks to
// close, the read-header and idle timeouts.

// h1DiscardMax is how much of an unread request body is read (and
// discarded) so the connection can carry the next request; a longer rest
// closes it, as http.Server does.
const h1DiscardMax = 256 << 10

// h1AutoLengthMax is how much body is held back before the header is sent:
// a response that ends within it gets a Content-Length.
const h1AutoLengthMax = 2048

// h1 connection states for graceful shutdown.
const (
	h1Active int32 = iota
	h1Idle
	h1Closing
)

// h1ServerConn is one intercepted HTTP/1.1 connection being served.
type h1ServerConn struct {
	s   *Server
	t   *tunnel
	tc  *tunnelConn // under fc's TLS
	fc  *framedConn
	lim limitedReader // under src: caps a request's header block
	// src is what br reads: the first byte of a request read while the
	// connection held no buffers, then lim.
	src firstByteReader
	// bufs holds br, bw and pending while a request is served; nil while
	// the connection waits for one (releaseBufs).
	bufs *h1Bufs
	br   *bufio.Reader
	bw   *bufio.Writer
	ctx  context.Context
	addr string
	// state is h1Idle while waiting for a request; Shutdown moves an idle
	// connection to h1Closing and closes it.
	state atomic.Int32
	// pending holds body bytes written before the header was sent.
	pending  []byte
	one      [1]byte      // the first byte of a request, read without buffers
	parked   bool         // counted in Server.h1BufsReleased
	deadline readDeadline // of fc
	// lastPOST is set after a POST: up to 4 CR or LF bytes after its body
	// are skipped, as http.Server tolerates (RFC 9112 §2.2).
	lastPOST bool
}

// serveH1 serves fc until the client closes it, an error, or shutdown.
func (s *Server) serveH1(t *tunnel, tc *tunnelConn, fc *framedConn) {
	c := &h1ServerConn{s: s, t: t, tc: tc, fc: fc, addr: fc.RemoteAddr().String()}
	c.lim = limitedReader{r: fc, n: -1}
	c.src.r = &c.lim
	c.deadline.conn = fc
	c.acquireBufs()
	ctx, cancel := context.WithCancel(context.WithValue(context.WithValue(context.Background(), tunnelKey{}, t), framedConnKey{}, fc))
	c.ctx = ctx
	t.h1.Store(c)
	hijacked := false
	defer func() {
		cancel()
		if !hijacked {
			_ = fc.Close()
			c.dropBufs(false)
			c.unpark()
		}
	}()
	first := true
	for {
		if !c.waitRequest(first) {
			return
		}
		first = false
		var keep bool
		keep, hijacked = c.serveOne()
		if !keep || hijacked || s.closing.Load() {
			return
		}
	}
}

// waitRequest waits for the first byte of the next request under the idle
// timeout (the read-header timeout for the first) and marks the connection
// active; false when the connection is to be closed. The read-header
// timeout is set only when the header block is not already read whole.
//
// A connection with nothing buffered waits without its buffers: they go
// back to h1BufPool, the wait reads one byte (TLS keeps the rest of its
// record), and buffers are taken again when it arrives. An idle tunnel then
// holds no bufio buffers (docs/proxy-limits.md).
func (c *h1ServerConn) waitRequest(first bool) bool {
	lim := c.s.limits
	if c.br.Buffered() == 0 {
		d := lim.IdleTimeout
		if first || d == 0 {
			d = lim.ConnectTimeout
		}
		c.state.Store(h1Idle)
		if c.s.closing.Load() {
			return false
		}
		if d > 0 {
			now := time.Now()
			c.deadline.set(now.Add(d), now)
		}
		c.releaseBufs()
		n, _ := c.lim.Read(c.one[:])
		if n == 0 {
			return false // closed, reset or timed out
		}
		c.src.b, c.src.has = c.one[0], true
		c.acquireBufs()
		// The rest of the record that carried the byte is decrypted and
		// waiting in TLS: take it now (the second fill), so that a header
		// block that came whole needs no header deadline below, as when the
		// wait read into the buffer itself. Only a record of one byte makes
		// this wait for the next, still under the idle deadline. An error
		// stays in the reader for ReadRequest.
		_, _ = c.br.Peek(2)
		if !c.state.CompareAndSwap(h1Idle, h1Active) {
			return false // Shutdown closed it while idle
		}
	}
	if d := lim.ConnectTimeout; d > 0 && !headerBuffered(c.br) {
		now := time.Now()
		c.deadline.set(now.Add(d), now)
	}
	return true
}

// h1Bufs are the buffers of an HTTP/1.1 connection serving a request.
type h1Bufs struct {
	br      *bufio.Reader
	bw      *bufio.Writer
	pending []byte
}

// h1BufPool holds the buffers of connections waiting for a request.
var h1BufPool = sync.Pool{New: func() any {
	return &h1Bufs{
		br:      bufio.NewReaderSize(nil, 4<<10),
		bw:      bufio.NewWriterSize(nil, 4<<10),
		pending: make([]byte, 0, h1AutoLengthMax),
	}
}}

// acquireBufs takes buffers for the next request.
func (c *h1ServerConn) acquireBufs() {
	b := h1BufPool.Get().(*h1Bufs)
	if b.br == nil {
		b.br = bufio.NewReaderSize(nil, 4<<10) // a hijacker kept the last one
	}
	b.br.Reset(&c.src)
	b.bw.Reset(c.fc)
	c.bufs, c.br, c.bw, c.pending = b, b.br, b.bw, b.pending[:0]
	c.unpark()
}

// releaseBufs returns the buffers, which hold nothing: the reader is read
// to its end, the writer flushed, pending sent. A hijacked connection's
// buffers belong to the hijacker and are never released.
func (c *h1ServerConn) releaseBufs() {
	if c.dropBufs(false) {
		c.parked = true
		c.s.h1BufsReleased.Add(1)
	}
}

// dropBufs returns c's buffers to h1BufPool, but for the reader when a
// hijacker keeps it, and reports whether c held any.
func (c *h1ServerConn) dropBufs(hijacked bool) bool {
	b := c.bufs
	if b == nil {
		return false
	}
	c.bufs, c.br, c.bw, c.pending = nil, nil, nil, nil
	if hijacked {
		b.br = nil
	} else {
		b.br.Reset(nil)
	}
	b.bw.Reset(nil)
	h1BufPool.Put(b)
	return true
}

// unpark stops counting c in Server.h1BufsReleased.
func (c *h1ServerConn) unpark() {
	if c.parked {
		c.parked = false
		c.s.h1BufsReleased.Add(-1)
	}
}

// firstByteReader returns b, when has, before reading r.
type firstByteReader struct {
	r   io.Reader
	b   byte
	has bool
}

func (f *firstByteReader) Read(p []byte) (int, error) {
	if f.has && len(p) > 0 {
		p[0], f.has = f.b, false
		return 1, nil
	}
	return f.r.Read(p)
}

// headerBuffered reports whether br already holds a whole header block,
// so reading it cannot wait on the connection. Stray CR/LF before it (after
// a POST, skipped in serveOne) must not pass for its end.
func headerBuffered(br *bufio.Reader) bool {
	buf, _ := br.Peek(br.Buffered())
	return bytes.Contains(bytes.TrimLeft(buf, "\r\n"), []byte("\r\n\r\n"))
}

// deadlineSlack is how much earlier than asked a read deadline may stay:
// a deadline already set at most this much before the one asked for is
// kept, so a busy connection does not update its timer on every request.
// A kept deadline is still at least deadlineKeepAhead away: one about to
// pass, or passed (a timeout shorter than the slack, set by an earlier
// request), would end the next read at once.
const (
	deadlineSlack     = time.Second
	deadlineKeepAhead = 100 * time.Millisecond
)

// readDeadline sets a connection's read deadline, skipping updates within
// deadlineSlack. Only the goroutine serving the connection uses it.
type readDeadline struct {
	conn interface{ SetReadDeadline(time.Time) error }
	at   time.Time // the deadline set; zero for none
}

// set makes t, computed from now, the read deadline, or keeps the one set
// (see deadlineSlack).
func (d *readDeadline) set(t, now time.Time) {
	if !t.IsZero() && !t.Before(d.at) && t.Sub(d.at) < deadlineSlack && d.at.Sub(now) >= deadlineKeepAhead {
		return
	}
	d.setExactly(t)
}

// setExactly makes t the read deadline; zero clears it, a time passed ends
// a read at once.
func (d *readDeadline) setExactly(t time.Time) {
	if t.IsZero() && d.at.IsZero() {
		return
	}
	d.at = t
	_ = d.conn.SetReadDeadline(t)
}

// closeIfIdle closes c when it is waiting for a request (Shutdown).
func (c *h1ServerConn) closeIfIdle() {
	if c.state.CompareAndSwap(h1Idle, h1Closing) {
		_ = c.fc.Close()
	}
}

// serveOne reads one request and serves it; keep reports whether the
// connection may carry another.
func (c *h1ServerConn) serveOne() (keep, hijacked bool) {
	s := c.s
	if c.lastPOST {
		peek, _ := c.br.Peek(4)
		n := 0
		for n < len(peek) && (peek[n] == '\r' || peek[n] == '\n') {
			n++
		}
		_, _ = c.br.Discard(n)
	}
	c.lim.n = int64(s.limits.MaxHeaderBytes) + 4096 // http.Server's slack for the request line
	req, err := http.ReadRequest(c.br)
	c.lim.n = -1
	if err != nil {
		c.refuseRead(err)
		return false, false
	}
	if req.ContentLength != 0 {
		// The body is read without the header's deadline; a bodiless
		// request reads nothing more until waitRequest sets the next one.
		c.deadline.setExactly(time.Time{})
	}
	c.lastPOST = req.Method == http.MethodPost
	if status, msg := h1Check(req); status != 0 {
		c.writeStatus(status, msg)
		return false, false
	}
	req.RemoteAddr = c.addr
	req = req.WithContext(c.ctx)
	w := &h1Response{c: c, req: req, contentLength: -1}
	w.closeAfter = req.Close || req.ProtoMinor == 0
	if ex := req.Header.Get("Expect"); ex != "" {
		if !strings.EqualFold(ex, "100-continue") || req.ProtoMinor == 0 {
			c.writeStatus(http.StatusExpectationFailed, "")
			return false, false
		}
		if req.ContentLength != 0 {
			w.expect = &expectContinue{rc: req.Body, w: w}
			req.Body = w.expect
		}
	}
	if !c.serveHandler(w) {
		return false, w.hijacked
	}
	if w.hijacked {
		return false, true
	}
	if err := w.finish(); err != nil {
		return false, false
	}
	if w.closeAfter {
		return false, false
	}
	// Read what the handler left of the body, so the next request starts
	// where this one ends; a client waiting for 100 Continue sent none.
	if w.expect != nil && !w.expect.sent {
		return false, false
	}
	if req.Body != nil && req.ContentLength != 0 {
		// A body closed by its reader was read to its end by Close.
		n, err := io.CopyN(io.Discard, req.Body, h1DiscardMax+1)
		if n > h1DiscardMax || (err != nil && err != io.EOF && !errors.Is(err, http.ErrBodyReadAfterClose)) {
			return false, false
		}
	}
	return true, false
}

// serveHandler runs the handler; false when it panicked (the connection is
// closed without finishing the response: the client must not take a
// truncated body for a whole one).
func (c *h1ServerConn) serveHandler(w *h1Response) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			ok = false
			if v != http.ErrAbortHandler { //nolint:errorlint // net/http's sentinel panics as is
				buf := make([]byte, 16<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.s.log.Error("panic serving an intercepted request", zap.Any("panic", v), zap.ByteString("stack", buf))
			}
		}
	}()
	innerHandler{c.s}.ServeHTTP(w, w.req)
	return true
}

// h1Check repeats the checks http.Server makes of a request after parsing
// it; status 0 means it passes. A missing Host field is refused with the
// framing faults (smuggle.go): http.ReadRequest has removed it from the
// header map by now.
func h1Check(r *http.Request) (int, string) {
	if r.ProtoMajor != 1 {
		return http.StatusHTTPVersionNotSupported, "unsupported protocol version"
	}
	if r.Host != "" && !httpguts.ValidHostHeader(r.Host) {
		return http.StatusBadRequest, "malformed Host header"
	}
	// Field names and values need no second pass: http.ReadRequest
	// (textproto) refuses invalid bytes in either, and refuseRead answers 400.
	return 0, ""
}

// refuseRead answers a request that could not be read, as http.Server does;
// a connection that closed or timed out gets no answer.
func (c *h1ServerConn) refuseRead(err error) {
	switch {
	case errors.Is(err, errHeaderTooLarge):
		c.writeStatus(http.StatusRequestHeaderFieldsTooLarge, "")
	case err == io.EOF, isNetReadError(err):
	case strings.Contains(err.Error(), "unsupported transfer encoding"), strings.Contains(err.Error(), "too many transfer encodings"):
		c.writeStatus(http.StatusNotImplemented, "Unsupported transfer encoding")
	default:
		c.writeStatus(http.StatusBadRequest, "")
	}
}

// isNetReadError reports whether err is the connection failing rather
// than the request being malformed.
func isNetReadError(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) || errors.Is(err, net.ErrClosed)
}

// writeStatus writes a plain-text error response and closes the
// connection, as http.Server answers a request it cannot serve.
func (c *h1ServerConn) writeStatus(status int, detail string) {
	text := strconv.Itoa(status) + " " + http.StatusText(status)
	if detail != "" {
		text += ": " + detail
	}
	_ = c.fc.SetWriteDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(c.bw, "HTTP/1.1 %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n%s", text, text)
	_ = c.bw.Flush()
}

// expectContinue sends "100 Continue" when the handler first reads a body
// the client is holding back.
type expectContinue struct {
	rc   io.ReadCloser
	w    *h1Response
	sent bool
	err  error
}

func (e *expectContinue) Read(p []byte) (int, error) {
	if !e.sent {
		e.sent = true
		if !e.w.headerSent {
			bw := e.w.c.bw
			_, _ = bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
			if e.err = bw.Flush(); e.err != nil {
				return 0, e.err
			}
		}
	}
	if e.err != nil {
		return 0, e.err
	}
	return e.rc.Read(p)
}

func (e *expectContinue) Close() error { return e.rc.Close() }

// h1Response is the http.ResponseWriter of an intercepted HTTP/1.1 request.
type h1Response struct {
	c   *h1ServerConn
	req *http.Request
	// header is made on first use (Header, sendHeader) unless adoptHeader
	// hands over a ready one; nil reads as empty.
	header http.Header
	expect *expectContinue

	status      int
	wroteHeader bool // WriteHeader ran (the header may still be held)
	headerSent  bool // the status line and header are in bw
	noBody      bool // HEAD, 1xx, 204 or 304: nothing is sent after the header
	chunked     bool
	// contentLength is the declared length, -1 when none.
	contentLength int64
	written       int64
	closeAfter    bool
	hijacked      bool
	failed        error // the first write error; later writes return it
}

func (w *h1Response) Header() http.Header {
	if w.header == nil {
		w.header = make(http.Header, 8)
	}
	return w.header
}

// adoptHeader makes h the response's header when nothing has been set on
// it yet, so a relayed response's header is not copied key by key; false
// (and nothing changed) otherwise. h belongs to the response from then on.
func (w *h1Response) adoptHeader(h http.Header) bool {
	if h == nil || len(w.header) > 0 || w.wroteHeader {
		return false
	}
	w.header = h
	return true
}

func (w *h1Response) WriteHeader(code int) {
	if w.wroteHeader || w.hijacked {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		return // informational answers are not relayed
	}
	w.wroteHeader = true
	w.status = code
	if cl := w.header.Get("Content-Length"); cl != "" {
		if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n >= 0 {
			w.contentLength = n
		} else {
			w.header.Del("Content-Length")
		}
	}
	w.noBody = w.req.Method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified
	if v := w.header["Connection"]; len(v) > 0 && hasToken(v, "close") {
		w.closeAfter = true
	}
}

func (w *h1Response) Write(p []byte) (int, error) {
	if w.hijacked {
		return 0, http.ErrHijacked
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.failed != nil {
		return 0, w.failed
	}
	if len(p) == 0 {
		return 0, nil
	}
	if w.noBody {
		return 0, http.ErrBodyNotAllowed
	}
	if w.contentLength >= 0 && w.written+int64(len(p)) > w.contentLength {
		return 0, http.ErrContentLength
	}
	if !w.headerSent {
		if w.contentLength < 0 && len(w.c.pending)+len(p) <= h1AutoLengthMax && !w.hasTrailers() {
			w.c.pending = append(w.c.pending, p...)
			w.written += int64(len(p))
			return len(p), nil
		}
		if err := w.sendHeader(false); err != nil {
			return 0, err
		}
	}
	w.written += int64(len(p))
	return len(p), w.writeBody(p)
}

// writeBody writes p in the response's framing; a large p goes out with
// one system call (batch.go).
func (w *h1Response) writeBody(p []byte) (err error) {
	bw := w.c.bw
	if len(p) >= batchMin {
		w.c.tc.startBatch()
		defer func() {
			if ferr := w.c.tc.flushBatch(); err == nil {
				err = w.fail(ferr)
			}
		}()
	}
	if w.chunked {
		bw.WriteString(strconv.FormatInt(int64(len(p)), 16))
		bw.WriteString("\r\n")
		bw.Write(p)
		_, err = bw.WriteString("\r\n")
		return w.fail(err)
	}
	_, err = bw.Write(p)
	return w.fail(err)
}

func (w *h1Response) fail(err error) error {
	if err != nil && w.failed == nil {
		w.failed = err
		w.closeAfter = true
	}
	return err
}

// hasTrailers reports whether the handler declared trailers, which need
// chunked encoding.
func (w *h1Response) hasTrailers() bool {
	if _, ok := w.header["Trailer"]; ok {
		return true
	}
	for k := range w.header {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return true
		}
	}
	return false
}

// sendHeader writes the status line and header to bw, choosing the
// framing: the declared Content-Length, the held-back length when final,
// chunked on HTTP/1.1, or the end of the connection on HTTP/1.0. It then
// writes any held-back body.
func (w *h1Response) sendHeader(final bool) error {
	w.headerSent = true
	c := w.c
	h := w.Header()
	switch {
	case w.noBody || w.status == http.StatusSwitchingProtocols:
	case w.contentLength >= 0:
	case final && !w.hasTrailers():
		w.contentLength = int64(len(c.pending))
		h["Content-Length"] = []string{strconv.Itoa(len(c.pending))}
	case w.req.ProtoMinor >= 1:
		w.chunked = true
		h["Transfer-Encoding"] = []string{"chunked"}
	default:
		w.closeAfter = true
	}
	delete(h, "Connection")
	if w.closeAfter {
		h["Connection"] = []string{"close"}
	}
	if _, ok := h["Date"]; !ok {
		h["Date"] = []string{time.Now().UTC().Format(http.TimeFormat)}
	}
	bw := c.bw
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(strconv.Itoa(w.status))
	bw.WriteByte(' ')
	bw.WriteString(http.StatusText(w.status))
	bw.WriteString("\r\n")
	if err := writeHeaderLines(bw, h, w.trailerKeys()); err != nil {
		return w.fail(err)
	}
	_, err := bw.WriteString("\r\n")
	if err != nil {
		return w.fail(err)
	}
	if len(c.pending) > 0 {
		p := c.pending
		c.pending = c.pending[:0]
		if err := w.writeBody(p); err != nil {
			return err
		}
	}
	return nil
}

// trailerKeys are the header keys that are trailers, not header fields.
func (w *h1Response) trailerKeys() map[string]bool {
	var keys map[string]bool
	for k := range w.header {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			if keys == nil {
				keys = make(map[string]bool)
			}
			keys[k] = true
		}
	}
	return keys
}

// writeHeaderLines writes h without the keys in skip; http.Header.Write
// would sort the keys, which costs an allocation per response.
func writeHeaderLines(bw *bufio.Writer, h http.Header, skip map[string]bool) error {
	for k, vv := range h {
		if skip[k] || !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range vv {
			bw.WriteString(k)
			bw.WriteString(": ")
			writeFieldValue(bw, v)
			if _, err := bw.WriteString("\r\n"); err != nil {
				return err
			}
		}
	}
	return nil
}

// headerNewlineToSpace is net/http's replacer of the same name.
var headerNewlineToSpace = strings.NewReplacer("\n", " ", "\r", " ")

// writeFieldValue writes v as http.Header.Write does: each CR and LF
// replaced by a space, then ASCII whitespace trimmed.
func writeFieldValue(bw *bufio.Writer, v string) {
	if strings.ContainsAny(v, "\r\n") {
		v = headerNewlineToSpace.Replace(v)
	}
	bw.WriteString(textproto.TrimString(v))
}

// Flush sends what is written so far.
func (w *h1Response) Flush() { _ = w.FlushError() }

// FlushError sends what is written so far (http.ResponseController).
func (w *h1Response) FlushError() error {
	if w.hijacked {
		return http.ErrHijacked
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headerSent {
		if err := w.sendHeader(false); err != nil {
			return err
		}
	}
	if w.failed != nil {
		return w.failed
	}
	return w.fail(w.c.bw.Flush())
}

// finish completes the response after the handler returned: the header if
// held, the last chunk and trailers, and a flush.
func (w *h1Response) finish() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headerSent {
		if err := w.sendHeader(true); err != nil {
			return err
		}
	}
	if w.failed != nil {
		return w.failed
	}
	bw := w.c.bw
	if w.chunked {
		bw.WriteString("0\r\n")
		w.writeTrailers(bw)
		bw.WriteString("\r\n")
	} else if w.contentLength >= 0 && w.written != w.contentLength && !w.noBody {
		// The handler wrote less than it declared: the connection cannot
		// carry another request.
		w.closeAfter = true
	}
	return w.fail(bw.Flush())
}

// writeTrailers writes the trailers the handler set: the keys it declared
// in Trailer and those with http.TrailerPrefix.
func (w *h1Response) writeTrailers(bw *bufio.Writer) {
	for _, v := range w.header["Trailer"] {
		for k := range strings.SplitSeq(v, ",") {
			k = http.CanonicalHeaderKey(strings.TrimSpace(k))
			if !httpguts.ValidTrailerHeader(k) {
				continue
			}
			for _, tv := range w.header[k] {
				bw.WriteString(k)
				bw.WriteString(": ")
				writeFieldValue(bw, tv)
				bw.WriteString("\r\n")
			}
		}
	}
	for k, vv := range w.header {
		name, ok := strings.CutPrefix(k, http.TrailerPrefix)
		if !ok || !httpguts.ValidTrailerHeader(name) {
			continue
		}
		for _, v := range vv {
			bw.WriteString(name)
			bw.WriteString(": ")
			writeFieldValue(bw, v)
			bw.WriteString("\r\n")
		}
	}
}

// watchClient returns a context that is canceled when the client closes the
// connection, for a wait that reads nothing from it (an approval, an
// upstream's answer), and the function that ends the watch; call it before
// reading or writing again. As under http.Server, only a request whose
// body is absent or read to its end (bodyRead) can watch: with a body
// pending, the next read would return the body, not the close.
func (w *h1Response) watchClient(parent context.Context, bodyRead bool) (context.Context, func()) {
	c := w.c
	if (w.req.ContentLength != 0 && !bodyRead) || c.br.Buffered() > 0 {
		return parent, func() {}
	}
	ctx, cancel := context.WithCancel(parent)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := c.br.Peek(1); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			cancel() // closed or reset: the client is gone
		}
	}()
	return ctx, func() {
		c.deadline.setExactly(time.Unix(1, 0)) // ends the Peek; TLS survives a timeout
		<-done
		c.deadline.setExactly(time.Time{})
		cancel()
	}
}

// clientWatch is watchClient for any ResponseWriter: a no-op where the
// server watches the client itself (HTTP/2 cancels a stream's context).
func clientWatch(w http.ResponseWriter, r *http.Request, bodyRead bool) (context.Context, func()) {
	if hw, ok := w.(*h1Response); ok {
		return hw.watchClient(r.Context(), bodyRead)
	}
	return r.Context(), func() {}
}

// Hijack hands the connection to the caller (a WebSocket relay); the
// header must not have been sent.
func (w *h1Response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.hijacked {
		return nil, nil, http.ErrHijacked
	}
	if w.headerSent {
		return nil, nil, errors.New("hijacking after the response header was sent")
	}
	c := w.c
	if err := c.bw.Flush(); err != nil { // an earlier write failed
		return nil, nil, err
	}
	w.hijacked = true
	c.t.h1.CompareAndSwap(c, nil) // Shutdown has nothing to close here: the hijacker owns the connection
	// The hijacker owns the reader and what it holds. The writer (empty:
	// nothing of the response was written) and pending go back to the pool
	// with the connection's other buffers; a WebSocket relay writes to the
	// connection itself, so it gets a small writer of its own.
	br := c.br
	c.dropBufs(true)
	return c.fc, bufio.NewReadWriter(br, bufio.NewWriterSize(c.fc, 64)), nil
}
