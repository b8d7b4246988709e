package proxy

import (
	"bytes"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/credentials"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// WebSocket mediation. An operation that declares "websocket": true lets its
// GET be a WebSocket handshake, over HTTP/1.1 Upgrade or HTTP/2 extended
// CONNECT (RFC 8441) from the client; the upstream leg is always HTTP/1.1
// Upgrade. The handshake is decided and injected like any request; after the
// upstream's 101 the relay passes frames both ways. Upstream-to-client text
// and binary payloads (and control payloads) go through the credential
// scrubber, across frame boundaries, so frames are parsed in that direction
// and may be re-fragmented (RFC 6455 section 5.4 allows an intermediary
// that). Sec-WebSocket-Extensions is dropped from the upstream handshake, so
// no leg negotiates permessage-deflate and every payload is plain.

const (
	// wsGrace is how long a relay waits, after one side's close frame, for
	// the other side to finish, and after a going-away close for both.
	wsGrace = 5 * time.Second
	// wsGoAwayGrace bounds a session end or shutdown per relay.
	wsGoAwayGrace = time.Second
	wsGUID        = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
)

// isWebSocketRequest reports whether r asks to open a WebSocket: an
// "Upgrade: websocket" request or an HTTP/2 CONNECT with :protocol websocket.
func isWebSocketRequest(r *http.Request) bool {
	if r.Method == http.MethodConnect && r.ProtoMajor >= 2 {
		return strings.EqualFold(r.Header.Get(":protocol"), "websocket")
	}
	return hasToken(r.Header["Upgrade"], "websocket")
}

// webSocketNotDeclared is the refusal of a handshake to an operation without
// "websocket": true.
func webSocketNotDeclared(x *exchange, m *policy.Match) errorDetail {
	return errorDetail{Code: codeWebSocketNotAllowed, Message: fmt.Sprintf(
		"%s %s on %s is a WebSocket handshake for %s %s of %s, which does not declare \"websocket\": true, so the proxy refuses it instead of sending it as a plain request; use HTTPS requests instead, or ask the operator for a connector whose operation declares \"websocket\": true",
		x.ev.Method, x.path, x.t.target, m.Tool, m.Operation.Name, m.ConnectorFQN)}
}

// wsAccept is the Sec-WebSocket-Accept of a Sec-WebSocket-Key.
func wsAccept(key string) string {
	h := sha1.Sum([]byte(key + wsGUID))
	return base64.StdEncoding.EncodeToString(h[:])
}

// relayWebSocket opens the upstream WebSocket for an allowed handshake and
// relays it until either side ends it.
func (s *Server) relayWebSocket(w http.ResponseWriter, x *exchange, inj *credentials.Injector, reason string) {
	r, t := x.r, x.t
	x.ev.AuditID = audit.NewID()
	x.ev.Event = audit.EventProxied
	x.ev.Decision = decisionAllowed
	x.ev.Reason = reason
	h2 := r.ProtoMajor >= 2

	out := r.WithContext(r.Context())
	out.Method, out.Proto, out.ProtoMajor, out.ProtoMinor = http.MethodGet, "HTTP/1.1", 1, 1
	out.RequestURI = ""
	out.Close = false
	out.URL = &url.URL{Scheme: "https", Host: t.target, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	out.Host = t.hostHeader
	out.Header = r.Header.Clone()
	stripHeader(out.Header, true)
	delete(out.Header, ":protocol")
	delete(out.Header, "Sec-Websocket-Extensions") // no permessage-deflate: the scrubber must see plain payloads
	key := out.Header.Get("Sec-Websocket-Key")
	if h2 || key == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		key = base64.StdEncoding.EncodeToString(b[:])
		out.Header.Set("Sec-Websocket-Key", key)
	}
	if out.Header.Get("Sec-Websocket-Version") == "" {
		out.Header.Set("Sec-Websocket-Version", "13")
	}
	out.Header.Set("Connection", "Upgrade")
	out.Header.Set("Upgrade", "websocket")
	out.Body, out.ContentLength = http.NoBody, 0

	scrub, ok := s.applyCredential(w, x, inj, out)
	if !ok {
		return
	}

	resp, err := s.transport.RoundTrip(out)
	if err != nil {
		status, code, msg := classifyUpstreamError(err, t.target)
		s.log.Debug("upstream websocket handshake failed", zap.String("host", t.target), zap.Error(err))
		s.upstreamFailed(w, x, status, code, msg)
		return
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		s.passResponse(w, x, resp, scrub, nil, reason)
		return
	}
	up, ok := resp.Body.(io.ReadWriteCloser)
	var problem string
	switch {
	case !ok:
		problem = "the HTTP client gave no connection for its 101"
	case !hasToken(resp.Header["Upgrade"], "websocket"):
		problem = "it switched to a protocol other than websocket"
	case resp.Header.Get("Sec-Websocket-Accept") != wsAccept(key):
		problem = "its Sec-WebSocket-Accept does not match the key"
	case resp.Header.Get("Sec-Websocket-Extensions") != "":
		problem = "it negotiated extensions the proxy did not offer"
	}
	if problem != "" {
		_ = resp.Body.Close()
		s.upstreamFailed(w, x, http.StatusBadGateway, codeWebSocketUpstream,
			fmt.Sprintf("%s answered the WebSocket handshake with 101 but %s; the proxy relays only plain RFC 6455 WebSockets", t.target, problem))
		return
	}
	scrub.Header(resp.Header)
	stripHeader(resp.Header, false)
	delete(resp.Header, "Te")

	relay := &wsRelay{s: s, sessionID: t.sess.ID, scrub: scrub, done: make(chan struct{})}
	relay.upstream = &wsPeer{r: up, w: up, close: func() { _ = up.Close() }, masked: true}
	resp.Header.Set(headerAuditID, x.ev.AuditID)
	registered, err := s.openClient(w, x, resp, relay)
	if err != nil {
		_ = up.Close()
		s.ws.remove(relay)
		x.ev.Reason = reasonStreamAborted
		s.record(x, zapcore.WarnLevel, "websocket handshake answered, client gone")
		s.metrics.decision(true, reasonStreamAborted)
		return
	}
	s.record(x, zapcore.InfoLevel, "websocket opened")
	s.metrics.decision(true, reason)

	opened := s.now()
	if !registered {
		go relay.goAway() // the proxy began shutting down meanwhile
	}
	relay.run()
	s.ws.remove(relay)

	ev := x.ev
	ev.Event = audit.EventWebSocketClosed
	ev.Time = time.Time{}
	ev.BytesIn, ev.BytesOut = relay.bytesIn.Load(), relay.bytesOut.Load()
	code, by := relay.closeInfo()
	ev.WebSocket = &audit.WebSocketStats{FramesIn: relay.framesIn.Load(), FramesOut: relay.framesOut.Load(), CloseCode: code, ClosedBy: by}
	ev.DurationMS = s.now().Sub(opened).Milliseconds()
	s.cfg.Audit.Record(ev)
	if ce := s.log.Check(zapcore.InfoLevel, "websocket closed"); ce != nil {
		ce.Write(zap.String("session_id", ev.SessionID), zap.String("audit_id", ev.AuditID), zap.String("host", ev.Host),
			zap.Int64("frames_in", ev.WebSocket.FramesIn), zap.Int64("frames_out", ev.WebSocket.FramesOut),
			zap.Int64("bytes_in", ev.BytesIn), zap.Int64("bytes_out", ev.BytesOut),
			zap.Int("close_code", code), zap.String("closed_by", by), zap.Int64("duration_ms", ev.DurationMS))
	}
}

// openClient answers the client's handshake (101 over HTTP/1.1, 200 over
// HTTP/2) with the upstream's scrubbed headers and sets relay.client. The
// relay is registered, for session end and shutdown, before the answer is
// written and under the client's write lock, so a going-away close cannot
// precede the answer nor miss the relay; registered is false when the proxy
// is shutting down.
func (s *Server) openClient(w http.ResponseWriter, x *exchange, resp *http.Response, relay *wsRelay) (registered bool, err error) {
	r := x.r
	if r.ProtoMajor >= 2 {
		delete(resp.Header, "Sec-Websocket-Accept")
		hdr := w.Header()
		for k, vv := range resp.Header {
			hdr[k] = vv
		}
		rc := http.NewResponseController(w)
		relay.client = &wsPeer{r: r.Body, w: w, flush: rc.Flush, close: func() { _ = r.Body.Close() }}
		relay.client.mu.Lock()
		defer relay.client.mu.Unlock()
		registered = s.ws.add(relay)
		w.WriteHeader(http.StatusOK)
		x.ev.Status = http.StatusOK
		return registered, rc.Flush()
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return false, fmt.Errorf("taking over the connection: %w", err)
	}
	_ = conn.SetDeadline(time.Time{})
	relay.client = &wsPeer{r: brw.Reader, w: conn, close: func() { _ = conn.Close() }}
	resp.Header.Set("Upgrade", "websocket")
	resp.Header.Set("Connection", "Upgrade")
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	_ = resp.Header.Write(&wsHeaderCase{&b})
	b.WriteString("\r\n")
	relay.client.mu.Lock()
	defer relay.client.mu.Unlock()
	registered = s.ws.add(relay)
	x.ev.Status = http.StatusSwitchingProtocols
	if _, err := conn.Write(b.Bytes()); err != nil {
		_ = conn.Close()
		return registered, err
	}
	return registered, nil
}

// wsHeaderCase writes header lines with the RFC 6455 spelling of the
// Sec-WebSocket-* names, which Go canonicalizes to Sec-Websocket-*: some
// clients compare them case-sensitively.
type wsHeaderCase struct{ b *bytes.Buffer }

func (w *wsHeaderCase) Write(p []byte) (int, error) {
	if bytes.HasPrefix(p, []byte("Sec-Websocket-")) {
		w.b.WriteString("Sec-WebSocket-")
		w.b.Write(p[len("Sec-Websocket-"):])
		return len(p), nil
	}
	return w.b.Write(p)
}

// wsPeer is one side of a relay: where its frames come from and go to.
type wsPeer struct {
	r      io.Reader
	mu     sync.Mutex // serializes writes: the relay and a going-away close
	w      io.Writer
	flush  func() error // HTTP/2: push each frame out; nil for a connection
	close  func()
	masked bool // frames the proxy originates toward it are masked (the upstream)
	dead   bool // under mu: closed, write nothing more (an HTTP/2 handler may have returned)
}

// shut closes the peer for good.
func (p *wsPeer) shut() {
	p.close()
	p.mu.Lock()
	p.dead = true
	p.mu.Unlock()
}

// write sends one frame, header and payload, as one unit.
func (p *wsPeer) write(hdr, payload []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return net.ErrClosed
	}
	if _, err := p.w.Write(hdr); err != nil {
		return err
	}
	if len(payload) > 0 {
		if _, err := p.w.Write(payload); err != nil {
			return err
		}
	}
	if p.flush != nil {
		return p.flush()
	}
	return nil
}

// sendClose sends a close frame the proxy originates.
func (p *wsPeer) sendClose(code int, reason string) {
	payload := closePayload(code, reason)
	var key *[4]byte
	if p.masked {
		key = new([4]byte)
		_, _ = rand.Read(key[:])
		maskWS(*key, 0, payload)
	}
	_ = p.write(appendWSHeader(nil, true, wsOpClose, len(payload), key), payload)
}

// wsRelay is one relayed WebSocket.
type wsRelay struct {
	s                   *Server
	sessionID           string
	client, upstream    *wsPeer
	scrub               *credentials.Scrubber
	closing             atomic.Bool // a going-away close was sent to both sides
	done                chan struct{}
	framesIn, bytesIn   atomic.Int64 // from the client
	framesOut, bytesOut atomic.Int64 // from the upstream (bytes: as passed on)

	mu        sync.Mutex
	closeCode int
	closedBy  string
}

// noteClose records the first close of the relay.
func (x *wsRelay) noteClose(code int, by string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closedBy == "" {
		x.closeCode, x.closedBy = code, by
	}
}

func (x *wsRelay) closeInfo() (int, string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closedBy == "" {
		return wsCloseAbnormal, "proxy"
	}
	return x.closeCode, x.closedBy
}

// errWSClosed ends a pump that passed on (or, when closing, took) a close
// frame.
var errWSClosed = errors.New("close frame passed")

// run relays until both sides are done, or one fails, then closes both.
func (x *wsRelay) run() {
	defer close(x.done)
	errc := make(chan error, 2)
	pump := func(f func() error, side string) {
		err := f()
		if err != nil && err != errWSClosed && !errors.Is(err, errWSProtocol) {
			x.noteClose(wsCloseAbnormal, side) // its connection ended first, without a close frame
		}
		errc <- err
	}
	go pump(x.pumpUp, "client")
	go pump(x.pumpDown, "upstream")
	first := <-errc
	if first == errWSClosed {
		// The other side answers the close, then ends; do not wait forever.
		t := time.NewTimer(wsGrace)
		select {
		case <-errc:
			t.Stop()
		case <-t.C:
			x.abort(first)
			<-errc
		}
	} else {
		x.abort(first)
		<-errc
	}
	x.client.shut()
	x.upstream.shut()
}

// abort ends the relay after err: a protocol error closes both sides with
// 1002; a side that dropped leaves the other without a close frame, so
// that it sees the abort too.
func (x *wsRelay) abort(err error) {
	if errors.Is(err, errWSProtocol) {
		x.noteClose(wsCloseProtocolError, "proxy")
		x.client.sendClose(wsCloseProtocolError, "protocol error")
		x.upstream.sendClose(wsCloseProtocolError, "protocol error")
	}
	x.client.close()
	x.upstream.close()
}

// goAway closes the relay with 1001 (session end, shutdown): a close frame
// to each side, then, after at most wsGoAwayGrace for their answers, the
// connections.
func (x *wsRelay) goAway() {
	if !x.closing.CompareAndSwap(false, true) {
		return
	}
	x.noteClose(wsCloseGoingAway, "proxy")
	go func() {
		// A pump may hold a peer's write lock while its source stalls
		// mid-frame; closing the connections below ends that wait.
		x.client.sendClose(wsCloseGoingAway, "aileron-proxy: session ended or proxy shutting down")
		x.upstream.sendClose(wsCloseGoingAway, "")
	}()
	t := time.NewTimer(wsGoAwayGrace)
	defer t.Stop()
	select {
	case <-x.done:
	case <-t.C:
		x.client.close()
		x.upstream.close()
	}
}

// pumpUp passes client frames to the upstream unchanged (they are masked
// by the client), counting them and noting a close code.
func (x *wsRelay) pumpUp() error {
	var hb [14]byte
	var h wsHeader
	for {
		raw, err := readWSHeader(x.client.r, hb[:], &h)
		if err != nil {
			return err
		}
		if !h.masked {
			return fmt.Errorf("%w: client frame not masked", errWSProtocol)
		}
		if h.rsv != 0 {
			return fmt.Errorf("%w: RSV bits set without a negotiated extension", errWSProtocol)
		}
		x.framesIn.Add(1)
		x.bytesIn.Add(h.length)
		if h.op == wsOpClose {
			var p [wsMaxControl]byte
			if _, err := io.ReadFull(x.client.r, p[:h.length]); err != nil {
				return noEOF(err)
			}
			plain := p
			maskWS(h.key, 0, plain[:h.length])
			x.noteClose(closeCode(plain[:h.length]), "client")
			if x.closing.Load() {
				return errWSClosed // the proxy sent its own close upstream
			}
			if err := x.upstream.write(raw, p[:h.length]); err != nil {
				return err
			}
			return errWSClosed
		}
		if x.closing.Load() {
			if _, err := io.CopyN(io.Discard, x.client.r, h.length); err != nil {
				return noEOF(err)
			}
			continue
		}
		if err := x.copyPayload(x.upstream, raw, x.client.r, h.length); err != nil {
			return err
		}
	}
}

// copyPayload writes a frame header and then its payload of n bytes from r,
// unchanged, in pooled pieces.
func (x *wsRelay) copyPayload(to *wsPeer, hdr []byte, r io.Reader, n int64) error {
	if n <= wsMaxControl {
		var p [wsMaxControl]byte
		if _, err := io.ReadFull(r, p[:n]); err != nil {
			return noEOF(err)
		}
		return to.write(hdr, p[:n])
	}
	bufp := x.s.bufPool.Get().(*[]byte)
	defer x.s.bufPool.Put(bufp)
	buf := *bufp
	to.mu.Lock()
	defer to.mu.Unlock()
	if to.dead {
		return net.ErrClosed
	}
	if _, err := to.w.Write(hdr); err != nil {
		return err
	}
	for n > 0 {
		k, err := io.ReadFull(r, buf[:min(n, int64(len(buf)))])
		if err != nil {
			return noEOF(err)
		}
		if _, err := to.w.Write(buf[:k]); err != nil {
			return err
		}
		n -= int64(k)
	}
	if to.flush != nil {
		return to.flush()
	}
	return nil
}

// pumpDown passes upstream frames to the client with every payload
// scrubbed. Data payloads stream through a ChunkMasker per message, so a
// secret split across frames is still masked; the frames passed on carry
// what the masker releases (the same bytes, possibly re-fragmented).
func (x *wsRelay) pumpDown() error {
	var hb, ob [14]byte
	var h wsHeader
	cm := x.scrub.Chunks()
	var msgOp byte
	inMsg, started := false, false
	for {
		_, err := readWSHeader(x.upstream.r, hb[:], &h)
		if err != nil {
			return err
		}
		if h.rsv != 0 {
			return fmt.Errorf("%w: RSV bits set without a negotiated extension", errWSProtocol)
		}
		x.framesOut.Add(1)
		if h.isControl() {
			var p [wsMaxControl]byte
			if _, err := io.ReadFull(x.upstream.r, p[:h.length]); err != nil {
				return noEOF(err)
			}
			if h.masked {
				maskWS(h.key, 0, p[:h.length])
			}
			x.scrub.Mask(p[:h.length])
			if h.op == wsOpClose {
				x.noteClose(closeCode(p[:h.length]), "upstream")
				if x.closing.Load() {
					return errWSClosed
				}
			}
			if x.closing.Load() {
				continue
			}
			x.bytesOut.Add(h.length)
			if err := x.client.write(appendWSHeader(ob[:0], true, h.op, int(h.length), nil), p[:h.length]); err != nil {
				return err
			}
			if h.op == wsOpClose {
				return errWSClosed
			}
			continue
		}
		switch {
		case h.op != wsOpContinuation && inMsg, h.op == wsOpContinuation && !inMsg:
			return fmt.Errorf("%w: frame %#x out of message order", errWSProtocol, h.op)
		case h.op != wsOpContinuation:
			inMsg, started, msgOp = true, false, h.op
		}
		if err := x.scrubPayload(&h, cm, &started, msgOp, ob[:0]); err != nil {
			return err
		}
		if h.fin {
			inMsg = false
		}
	}
}

// scrubPayload reads one upstream data frame's payload in pooled pieces and
// passes on what the masker releases, each piece as a frame of the message.
func (x *wsRelay) scrubPayload(h *wsHeader, cm *credentials.ChunkMasker, started *bool, msgOp byte, ob []byte) error {
	bufp := x.s.bufPool.Get().(*[]byte)
	defer x.s.bufPool.Put(bufp)
	buf := *bufp
	var pos int64
	for {
		k := min(h.length-pos, int64(len(buf)))
		if _, err := io.ReadFull(x.upstream.r, buf[:k]); err != nil {
			return noEOF(err)
		}
		if h.masked {
			maskWS(h.key, pos, buf[:k])
		}
		pos += k
		final := h.fin && pos == h.length
		out := cm.Next(buf[:k], final)
		if !x.closing.Load() && (len(out) > 0 || final) {
			op := byte(wsOpContinuation)
			if !*started {
				op, *started = msgOp, true
			}
			x.bytesOut.Add(int64(len(out)))
			if err := x.client.write(appendWSHeader(ob, final, op, len(out), nil), out); err != nil {
				return err
			}
		}
		if pos == h.length {
			return nil
		}
	}
}

// wsRegistry holds the open relays, for session end and shutdown.
type wsRegistry struct {
	mu     sync.Mutex
	open   map[*wsRelay]struct{}
	closed bool // shutting down: no new relays
}

// add registers x; false when the proxy is shutting down, and x must go
// away at once.
func (g *wsRegistry) add(x *wsRelay) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open == nil {
		g.open = make(map[*wsRelay]struct{})
	}
	g.open[x] = struct{}{}
	return !g.closed
}

func (g *wsRegistry) remove(x *wsRelay) {
	g.mu.Lock()
	delete(g.open, x)
	g.mu.Unlock()
}

// goAway closes, with 1001, every open relay that match selects, in
// parallel, and returns how many; shutdown also refuses new relays.
func (g *wsRegistry) goAway(match func(*wsRelay) bool, shutdown bool) int {
	g.mu.Lock()
	if shutdown {
		g.closed = true
	}
	var list []*wsRelay
	for x := range g.open {
		if match(x) {
			list = append(list, x)
		}
	}
	g.mu.Unlock()
	var wg sync.WaitGroup
	for _, x := range list {
		wg.Add(1)
		go func() { defer wg.Done(); x.goAway() }()
	}
	wg.Wait()
	return len(list)
}
