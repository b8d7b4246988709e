package proxy

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync"

	"github.com/aileron-dev/aileron-proxy/internal/contract"
)

// Request smuggling inside intercepted HTTP/1.1 tunnels.
//
// net/http reads a request carrying both Content-Length and
// Transfer-Encoding by its chunked body and deletes the Content-Length, so a
// handler cannot tell that the sender framed the message differently (RFC
// 9112 §6.1 says to treat that as an error or close the connection). The
// raw header block is visible only on the connection, so an intercepted
// HTTP/1.1 connection is served through a framedConn: it follows the
// message boundaries of everything the server reads (header block, then a
// Content-Length or chunked body, exactly as net/http frames them) and
// queues one frameRecord per header block. The handler takes the record of
// each request, in order, before any policy or upstream work, and refuses
// the request with 400 and closes the connection when the record says the
// framing is ambiguous, or when the record does not belong to the request
// (the two parsers disagree: fail closed).
//
// Framing is tracked rather than guessed from "\r\n\r\n" because a body may
// contain anything, including a whole fake request. The scan costs one pass
// over header lines and chunk-size lines; body bytes are skipped by count.
// HTTP/2 connections are not wrapped: the HTTP/2 server refuses
// Transfer-Encoding and other connection-specific fields itself (a stream
// error, RFC 9113 §8.2.2).

// maxFrameLine is how much of a line framedConn keeps; longer lines are
// followed but only their start is kept.
const maxFrameLine = 256

// maxFrameQueue caps the records waiting for the handler (pipelined
// requests the server has not served yet); more means the parsers
// disagree, and the connection is refused from then on.
const maxFrameQueue = 512

// frameRecord is what framedConn saw in one request's header block.
type frameRecord struct {
	// line is the FNV-1a hash of the request line, so the handler can check
	// that the record belongs to its request.
	line uint64
	te   bool // a Transfer-Encoding field was present
	cl   bool // a Content-Length field was present
	host bool // a Host field was present
	// bad names a framing fault; empty when none.
	bad string
}

// Framing states of framedConn.
const (
	frameRequestLine = iota
	frameHeader
	frameBody // Content-Length body
	frameChunkSize
	frameChunkData
	frameChunkCRLF
	frameTrailer
	frameLost // the parsers may disagree: stop scanning
)

// framedConn is the plaintext side of an intercepted HTTP/1.1 connection.
// Read is called by one goroutine at a time (the server's); next may be
// called concurrently.
type framedConn struct {
	*tls.Conn
	t *tunnel

	// Scanner state, touched only by Read.
	state     int
	line      []byte // the start of the current line
	long      bool   // the current line is longer than maxFrameLine
	cr        bool   // the last byte seen was '\r'
	hash      uint64
	remaining uint64 // body or chunk bytes left to skip
	skipCRLF  int    // CR/LF bytes net/http skips after a POST
	cur       frameRecord
	post      bool // cur is a POST
	cl        uint64
	crlfSeen  int // bytes of the CRLF after chunk data seen

	mu    sync.Mutex
	queue []frameRecord
}

func newFramedConn(c *tls.Conn, t *tunnel) *framedConn {
	return &framedConn{Conn: c, t: t, line: make([]byte, 0, maxFrameLine), hash: fnvOffset}
}

// CloseWrite half-closes the TLS connection, as net/http expects of a conn
// that can.
func (c *framedConn) CloseWrite() error { return c.Conn.CloseWrite() }

// stopScanning ends the framing scan for a connection that no longer
// carries HTTP/1.1 messages (a hijacked WebSocket). Call it only after
// Hijack, when the server no longer reads the connection.
func (c *framedConn) stopScanning() { c.state, c.line = frameLost, nil }

func (c *framedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.state != frameLost {
		c.scan(p[:n])
	}
	return n, err
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// hashRequestLine is the hash framedConn computes over a request line.
func hashRequestLine(r *http.Request) uint64 {
	h := uint64(fnvOffset)
	for _, s := range [...]string{r.Method, " ", r.RequestURI, " ", r.Proto} {
		for i := 0; i < len(s); i++ {
			h = (h ^ uint64(s[i])) * fnvPrime
		}
	}
	return h
}

// next returns the record of the next request the server parsed; false
// when there is none that can be trusted.
func (c *framedConn) next() (frameRecord, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		return frameRecord{}, false
	}
	r := c.queue[0]
	if len(c.queue) == 1 {
		c.queue = c.queue[:0] // reuse the array: no allocation per request
	} else {
		c.queue = c.queue[1:]
	}
	return r, true
}

func (c *framedConn) push(r frameRecord) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) >= maxFrameQueue {
		c.state = frameLost
		return
	}
	c.queue = append(c.queue, r)
}

// scan advances the framing state over p.
func (c *framedConn) scan(p []byte) {
	for len(p) > 0 && c.state != frameLost {
		switch c.state {
		case frameBody, frameChunkData:
			k := uint64(len(p))
			if k > c.remaining {
				k = c.remaining
			}
			p = p[k:]
			c.remaining -= k
			if c.remaining == 0 {
				if c.state == frameBody {
					c.endMessage()
				} else {
					c.state, c.crlfSeen = frameChunkCRLF, 0
				}
			}
		case frameChunkCRLF:
			// net/http requires exactly CRLF after chunk data.
			if p[0] != "\r\n"[c.crlfSeen] {
				c.state = frameLost
				return
			}
			p = p[1:]
			if c.crlfSeen++; c.crlfSeen == 2 {
				c.state = frameChunkSize
			}
		default:
			if c.state == frameRequestLine && c.skipCRLF > 0 && len(c.line) == 0 && !c.cr {
				if p[0] == '\r' || p[0] == '\n' {
					c.skipCRLF--
					p = p[1:]
					continue
				}
				c.skipCRLF = 0
			}
			i := bytes.IndexByte(p, '\n')
			seg := p
			if i >= 0 {
				seg = p[:i]
			}
			c.appendLine(seg)
			if i < 0 {
				return
			}
			p = p[i+1:]
			c.endLine()
		}
	}
}

// appendLine adds seg, a piece of the current line without '\n', keeping
// a trailing '\r' pending: it is part of the line only if more follows.
func (c *framedConn) appendLine(seg []byte) {
	if len(seg) == 0 {
		return
	}
	if c.cr {
		c.addLineByte('\r')
	}
	c.cr = seg[len(seg)-1] == '\r'
	if c.cr {
		seg = seg[:len(seg)-1]
	}
	if c.state == frameRequestLine {
		h := c.hash
		for _, b := range seg {
			h = (h ^ uint64(b)) * fnvPrime
		}
		c.hash = h
	}
	if room := maxFrameLine - len(c.line); len(seg) > room {
		c.line = append(c.line, seg[:room]...)
		c.long = true
	} else {
		c.line = append(c.line, seg...)
	}
}

func (c *framedConn) addLineByte(b byte) {
	if c.state == frameRequestLine {
		c.hash = (c.hash ^ uint64(b)) * fnvPrime
	}
	if len(c.line) < maxFrameLine {
		c.line = append(c.line, b)
	} else {
		c.long = true
	}
}

// endLine handles a complete line (without its line ending).
func (c *framedConn) endLine() {
	line, long, crlf := c.line, c.long, c.cr
	c.line, c.long, c.cr = c.line[:0], false, false
	switch c.state {
	case frameRequestLine:
		c.cur = frameRecord{line: c.hash}
		c.hash = fnvOffset
		if len(line) == 0 && !long {
			// net/http refuses an empty request line and closes.
			c.state = frameLost
			return
		}
		if !crlf {
			c.cur.bad = "the request line ends in a bare LF"
		}
		c.post = bytes.HasPrefix(line, []byte("POST "))
		c.cl = 0
		c.state = frameHeader
	case frameHeader:
		if !crlf && c.cur.bad == "" {
			c.cur.bad = "a header line ends in a bare LF"
		}
		if len(line) == 0 && !long {
			c.endHeader()
			return
		}
		c.headerLine(line, long)
	case frameChunkSize:
		if !crlf || long {
			c.state = frameLost // net/http refuses it (or we cannot follow it)
			return
		}
		size, ok := parseChunkSize(line)
		switch {
		case !ok:
			c.state = frameLost
		case size == 0:
			c.state = frameTrailer
		default:
			c.remaining, c.state = size, frameChunkData
		}
	case frameTrailer:
		if len(line) == 0 && !long {
			c.endMessage()
		}
	}
}

// headerLine records the fields that decide framing.
func (c *framedConn) headerLine(line []byte, long bool) {
	if line[0] == ' ' || line[0] == '\t' {
		c.fault("the header block has an obs-fold line (a line starting with whitespace)")
		return
	}
	name, value, ok := bytes.Cut(line, []byte(":"))
	if !ok {
		if !long {
			c.fault("a header line has no colon")
		}
		return
	}
	te := asciiEqualFold(name, "transfer-encoding")
	cl := asciiEqualFold(name, "content-length")
	if asciiEqualFold(name, "host") {
		c.cur.host = true
	}
	if !te && !cl {
		if bytes.IndexByte(name, ' ') >= 0 || bytes.IndexByte(name, '\t') >= 0 {
			c.fault("a header name contains whitespace")
		}
		return
	}
	if long {
		c.fault("a framing header field is too long")
		return
	}
	if te {
		c.cur.te = true
		return
	}
	n, ok := parseContentLength(bytes.Trim(value, " \t"))
	switch {
	case !ok:
		c.fault("the Content-Length is not a decimal number")
	case c.cur.cl && n != c.cl:
		c.fault("the request has several different Content-Length values")
	default:
		c.cur.cl, c.cl = true, n
	}
}

func (c *framedConn) fault(msg string) {
	if c.cur.bad == "" {
		c.cur.bad = msg
	}
}

// endHeader queues the record and frames the body as net/http does: chunked
// when Transfer-Encoding is present, else Content-Length, else none.
func (c *framedConn) endHeader() {
	c.push(c.cur)
	if c.state == frameLost {
		return
	}
	switch {
	case c.cur.te:
		c.state = frameChunkSize
	case c.cur.cl && c.cl > 0:
		c.remaining, c.state = c.cl, frameBody
	default:
		c.endMessage()
	}
}

func (c *framedConn) endMessage() {
	c.state = frameRequestLine
	c.skipCRLF = 0
	if c.post {
		c.skipCRLF = 4 // net/http tolerates up to 4 stray CR/LF after a POST
	}
}

// parseChunkSize parses a chunk-size line as net/http does.
func parseChunkSize(line []byte) (uint64, bool) {
	line = bytes.TrimRight(line, " \t")
	line, _, _ = bytes.Cut(line, []byte(";"))
	if len(line) == 0 || len(line) > 16 {
		return 0, false
	}
	var n uint64
	for _, b := range line {
		switch {
		case '0' <= b && b <= '9':
			b -= '0'
		case 'a' <= b && b <= 'f':
			b -= 'a' - 10
		case 'A' <= b && b <= 'F':
			b -= 'A' - 10
		default:
			return 0, false
		}
		n = n<<4 | uint64(b)
	}
	return n, true
}

// parseContentLength accepts what net/http does: 1 to 18 decimal digits,
// no sign.
func parseContentLength(v []byte) (uint64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n uint64
	for _, b := range v {
		if b < '0' || b > '9' {
			return 0, false
		}
		n = n*10 + uint64(b-'0')
	}
	return n, true
}

// asciiEqualFold reports whether b equals the lower-case ASCII s, ignoring
// ASCII case only.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		x := b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if x != s[i] {
			return false
		}
	}
	return true
}

type framedConnKey struct{}

// framingFault says why r, served over an HTTP/1.1 framedConn, must be
// refused; empty when it may proceed. It consumes r's frameRecord, so call
// it once per request.
func framingFault(r *http.Request) string {
	fc, _ := r.Context().Value(framedConnKey{}).(*framedConn)
	if fc == nil || r.ProtoMajor != 1 {
		return ""
	}
	rec, ok := fc.next()
	switch {
	case !ok || rec.line != hashRequestLine(r):
		return "the proxy could not follow this connection's message boundaries"
	case rec.bad != "":
		return rec.bad
	case rec.te && rec.cl:
		return "the request has both Content-Length and Transfer-Encoding (RFC 9112 §6.1)"
	case rec.te && r.ProtoMinor == 0:
		return "an HTTP/1.0 request cannot use Transfer-Encoding (RFC 9112 §6.1)"
	case !rec.host && r.ProtoMinor >= 1:
		// http.ReadRequest drops the Host field, so only the raw header
		// block shows that it was missing (an absolute-form target sets
		// r.Host without one).
		return "an HTTP/1.1 request must have a Host header field (RFC 9112 §3.2)"
	}
	return ""
}

// refuseFraming answers a request framingFault refused: 400, and the
// connection is closed after it, so no byte after the request is read as
// another one.
func (s *Server) refuseFraming(w http.ResponseWriter, x *exchange, fault string) {
	w.Header().Set("Connection", "close")
	s.deny(w, x, http.StatusBadRequest, errorDetail{Code: contract.CodeBadFraming,
		Message: fmt.Sprintf("%s; the connection is closed: send each request with either Content-Length or Transfer-Encoding: chunked, header lines ending in CRLF", fault)})
}

var _ net.Conn = (*framedConn)(nil)
