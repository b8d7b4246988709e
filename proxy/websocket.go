package proxy

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/credentials"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
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
	return errorDetail{Code: contract.CodeWebSocketNotAllowed, Message: fmt.Sprintf(
		"%s %s on %s is a WebSocket handshake for %s %s of %s, which does not declare \"websocket\": true, so the proxy refuses it instead of sending it as a plain request; use HTTPS requests instead, or ask the operator for a connector whose operation declares \"websocket\": true",
		x.ev.Method, x.path, x.t.target, m.Tool, m.Compiled.Operation().Name, m.ConnectorFQN)}
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
	x.ev.Decision = contract.DecisionAllowed
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
		s.upstreamFailed(w, x, http.StatusBadGateway, contract.CodeWebSocketUpstream,
			fmt.Sprintf("%s answered the WebSocket handshake with 101 but %s; the proxy relays only plain RFC 6455 WebSockets", t.target, problem))
		return
	}
	scrub.Header(resp.Header)
	stripHeader(resp.Header, false)
	delete(resp.Header, "Te")

	relay := &wsRelay{s: s, sessionID: t.sess.ID, scrub: scrub, done: make(chan struct{})}
	relay.upstream = &wsPeer{r: up, w: up, close: func() { _ = up.Close() }, masked: true}
	resp.Header.Set(contract.HeaderAuditID, x.ev.AuditID)
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
	if h2 {
		s.runRelay(relay, &x.ev, opened) // the stream lives while the handler runs
		return
	}
	// The connection is hijacked: the relay goes on on a goroutine of its
	// own, and this one, whose stack grew through both TLS handshakes and
	// the handler, ends; so does what the request held, but for its audit
	// event (docs/proxy-limits.md).
	ev := x.ev
	go s.runRelay(relay, &ev, opened)
}

// runRelay relays until the WebSocket ends, then audits and logs its close.
// Its frame stays small (the event by pointer, the close's audit and log in
// a call of their own): the client's pump runs under it and parks in a TLS
// read for as long as the WebSocket is idle, and a few hundred bytes more
// there double that goroutine's stack (docs/proxy-limits.md).
func (s *Server) runRelay(relay *wsRelay, ev *audit.Event, opened time.Time) {
	relay.run()
	s.relayClosed(relay, ev, opened)
}

// relayClosed audits and logs the close of a relay that ended.
func (s *Server) relayClosed(relay *wsRelay, closed *audit.Event, opened time.Time) {
	ev := *closed
	s.ws.remove(relay)

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
	if fc, ok := conn.(*framedConn); ok {
		fc.stopScanning() // WebSocket frames are not HTTP/1.1 messages
	}
	_ = conn.SetDeadline(time.Time{})
	relay.client = &wsPeer{r: newDrainReader(brw.Reader, conn), w: conn, close: func() { _ = conn.Close() }}
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

// drainReader reads what the hijacked connection's reader holds, then the
// connection itself, and drops the reader once it is empty: TLS already
// keeps the rest of a record it decrypted, so an open WebSocket needs no
// 4 KiB reader of its own, idle or not (docs/proxy-limits.md).
type drainReader struct {
	br *bufio.Reader // nil once empty
	r  io.Reader
}

func newDrainReader(br *bufio.Reader, r io.Reader) *drainReader {
	d := &drainReader{r: r}
	if br.Buffered() > 0 {
		d.br = br
	}
	return d
}

func (d *drainReader) Read(p []byte) (int, error) {
	if d.br == nil {
		return d.r.Read(p)
	}
	if n := d.br.Buffered(); len(p) > n {
		p = p[:n]
	}
	n, err := d.br.Read(p)
	if d.br.Buffered() == 0 {
		d.br = nil
	}
	return n, err
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
