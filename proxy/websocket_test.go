package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/policy"
)

const wsHost = "ws.example.test"

// wsSpec is the test connector (same FQN, so the same session scope and
// credential) with one WebSocket operation and one plain GET.
const wsSpec = `{
  "schema_version": "aileron.connector.v1",
  "connector": {"fqn": "github://acme/aileron-connector-test", "version": "1.0.0"},
  "tools": [{"name": "api", "operations": [
    {"name": "ws", "method": "GET", "path": "/ws", "hosts": ["ws.example.test"], "credential": "bearer", "websocket": true},
    {"name": "plain", "method": "GET", "path": "/plain", "hosts": ["ws.example.test"], "credential": "bearer"}
  ]}]
}`

// wsUpstream is a WebSocket echo server (gorilla/websocket) on loopback TLS.
// Text commands: "split:<text>" echoes <text> as 3-byte fragments written by
// hand; "auth" sends the Authorization header it got, in 2-byte fragments;
// "close" closes with 4000; "drop" drops the connection. Anything else is
// echoed.
type wsUpstream struct {
	t      testing.TB
	srv    *httptest.Server
	auth   chan string      // Authorization of each handshake
	ended  chan error       // each connection's end, as its read loop saw it
	header chan http.Header // handshake headers
	plain  chan http.Header // requests to /plain
}

func newWSUpstream(t testing.TB, pki *testPKI) *wsUpstream {
	u := &wsUpstream{t: t, auth: make(chan string, 2048), ended: make(chan error, 2048),
		header: make(chan http.Header, 2048), plain: make(chan http.Header, 16)}
	up := websocket.Upgrader{}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/plain" {
			u.plain <- r.Header.Clone()
			_, _ = w.Write([]byte("plain"))
			return
		}
		u.auth <- r.Header.Get("Authorization")
		u.header <- r.Header.Clone()
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			mt, msg, err := c.ReadMessage()
			if err != nil {
				u.ended <- err
				return
			}
			switch s := string(msg); {
			case strings.HasPrefix(s, "split:"):
				writeFragments(c.NetConn(), []byte(s[len("split:"):]), 3)
			case s == "auth":
				writeFragments(c.NetConn(), []byte(r.Header.Get("Authorization")), 2)
			case s == "close":
				_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(4000, "bye"), time.Now().Add(time.Second))
			case s == "drop":
				_ = c.NetConn().Close()
				u.ended <- errors.New("dropped")
				return
			default:
				_ = c.WriteMessage(mt, msg)
			}
		}
	}))
	u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{pki.leaf}}
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	return u
}

// writeFragments writes p as one text message in unmasked frames of size n.
func writeFragments(c net.Conn, p []byte, n int) {
	var b []byte
	for i := 0; i < len(p) || i == 0; i += n {
		chunk := p[i:min(i+n, len(p))]
		op := byte(wsOpContinuation)
		if i == 0 {
			op = wsOpText
		}
		b = appendWSHeader(b, i+n >= len(p), op, len(chunk), nil)
		b = append(b, chunk...)
	}
	_, _ = c.Write(b)
}

// newWSEnv is the proxy env with wsSpec as its policy and ws.example.test
// resolved to a wsUpstream.
func newWSEnv(t testing.TB, opts ...envOption) (*env, *wsUpstream) {
	t.Helper()
	pki := newTestPKI(t)
	u := newWSUpstream(t, pki)
	spec, _, err := policy.ParseSpec([]byte(wsSpec))
	if err != nil {
		t.Fatalf("ParseSpec: %v", err)
	}
	snap, err := policy.Compile([]policy.Connector{{Spec: spec, Hash: "sha256:ws"}})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	opts = append([]envOption{func(c *Config) {
		c.Policy = func() *policy.Snapshot { return snap }
		c.Resolve[wsHost+":443"] = addrOf(u.srv)
		c.UpstreamRoots = append(c.UpstreamRoots, pki.root)
	}}, opts...)
	e := newEnv(t, opts...)
	e.useSession(t, snap) // a session of this snapshot, whose CA issues ws.example.test
	return e, u
}

// dialWS opens a WebSocket through the proxy with gorilla/websocket,
// sending the client's own Authorization (which the proxy must drop).
func (e *env) dialWS(t testing.TB, path string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	d := websocket.Dialer{
		Proxy:            http.ProxyURL(e.proxyURL(true)),
		TLSClientConfig:  &tls.Config{RootCAs: e.caPool},
		HandshakeTimeout: 20 * time.Second,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, resp, err := d.DialContext(ctx, "wss://"+wsHost+path, http.Header{"Authorization": {clientAuth}})
	if c != nil {
		t.Cleanup(func() { _ = c.Close() })
	}
	return c, resp, err
}

func readMsg(t testing.TB, c *websocket.Conn) (int, string, error) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	mt, p, err := c.ReadMessage()
	return mt, string(p), err
}

func wsClosedEvent(t testing.TB, e *env, id string) audit.Event {
	t.Helper()
	return e.audit.WaitFor(t, "websocket_closed "+id, func(ev audit.Event) bool {
		return ev.Event == audit.EventWebSocketClosed && ev.AuditID == id
	})
}

// TestWebSocketEcho relays text and binary messages both ways, injects the
// credential into the handshake only at the upstream, and audits the
// handshake and the close.
func TestWebSocketEcho(t *testing.T) {
	e, u := newWSEnv(t)
	c, resp, err := e.dialWS(t, "/ws")
	if err != nil {
		t.Fatalf("dial: %v (response %v)", err, resp)
	}
	if got := <-u.auth; got != "Bearer "+testToken {
		t.Fatalf("upstream handshake Authorization = %q, want the injected credential", got)
	}
	h := <-u.header
	if h.Get("Sec-Websocket-Extensions") != "" {
		t.Errorf("upstream handshake offered extensions %q; the proxy must drop them", h.Get("Sec-Websocket-Extensions"))
	}
	if got := h.Get("Accept-Encoding"); got != "identity" {
		// A refusal of the handshake (non-101) is passed on scrubbed, so it
		// must not come back compressed.
		t.Errorf("upstream handshake Accept-Encoding = %q, want identity", got)
	}
	if _, dup := h["X-Aileron-Internal"]; dup || h.Get("Proxy-Authorization") != "" {
		t.Errorf("upstream handshake carries proxy headers: %v", h)
	}
	id := resp.Header.Get(contract.HeaderAuditID)
	if id == "" {
		t.Fatalf("101 lacks %s: %v", contract.HeaderAuditID, resp.Header)
	}

	big := strings.Repeat("0123456789", 10_000) // 100 kB: several pooled pieces
	for _, m := range []struct {
		mt   int
		text string
	}{{websocket.TextMessage, "hello"}, {websocket.BinaryMessage, "\x00\x01\xff"}, {websocket.TextMessage, big}} {
		if err := c.WriteMessage(m.mt, []byte(m.text)); err != nil {
			t.Fatal(err)
		}
		mt, got, err := readMsg(t, c)
		if err != nil || mt != m.mt || got != m.text {
			t.Fatalf("echo of %d bytes = type %d, %d bytes, %v; want type %d, the same bytes", len(m.text), mt, len(got), err, m.mt)
		}
	}
	if err := c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "done")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readMsg(t, c); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Fatalf("after close, read = %v; want the upstream's 1000 close", err)
	}

	open := e.audit.WaitFor(t, "handshake", byAuditID(id))
	if open.Event != audit.EventProxied || open.Status != http.StatusSwitchingProtocols || open.Operation != "ws" || open.CredentialKind != "bearer" {
		t.Fatalf("handshake event = %+v; want proxied, 101, operation ws, bearer", open)
	}
	ev := wsClosedEvent(t, e, id)
	ws := ev.WebSocket
	// gorilla fragments the large message it sends (4 KiB write buffer).
	if ws == nil || ws.FramesIn < 5 || ws.FramesOut < 4 || ws.CloseCode != 1000 || ws.ClosedBy != "client" {
		t.Fatalf("close event websocket = %+v; want at least 5 frames in and 4 out, close 1000 by client", ws)
	}
	// Payloads: the three messages, then the close ("\x03\xe8done" in, the
	// bare code gorilla answers with out).
	if in, out := int64(5+3+len(big)+6), int64(5+3+len(big)+2); ev.BytesIn != in || ev.BytesOut != out {
		t.Fatalf("close event bytes in/out = %d/%d, want %d/%d", ev.BytesIn, ev.BytesOut, in, out)
	}
}

// TestWebSocketScrubsFragments has the upstream echo the injected credential
// (and encoded forms of it) in frames of 2 and 3 bytes: the client receives
// the message whole, the secret masked.
func TestWebSocketScrubsFragments(t *testing.T) {
	e, _ := newWSEnv(t)
	c, resp, err := e.dialWS(t, "/ws")
	if err != nil {
		t.Fatalf("dial: %v (response %v)", err, resp)
	}
	if err := c.WriteMessage(websocket.TextMessage, []byte("auth")); err != nil {
		t.Fatal(err)
	}
	// The scrubber masks the whole injected value, "Bearer " included.
	if _, got, err := readMsg(t, c); err != nil || got != strings.Repeat("*", len("Bearer "+testToken)) {
		t.Fatalf("upstream's echo of its Authorization reached the client as %q, %v; want it masked", got, err)
	}
	for _, form := range []string{testToken, "tok%2BCANARY%2F8f3a9c%3D1d2e"} {
		msg := "before " + form + " after"
		if err := c.WriteMessage(websocket.TextMessage, []byte("split:"+msg)); err != nil {
			t.Fatal(err)
		}
		_, got, err := readMsg(t, c)
		if want := "before " + strings.Repeat("*", len(form)) + " after"; err != nil || got != want {
			t.Fatalf("fragmented echo of %q = %q, %v; want %q", msg, got, err, want)
		}
	}
	// Without a secret, fragments pass byte for byte.
	if err := c.WriteMessage(websocket.TextMessage, []byte("split:no secret here")); err != nil {
		t.Fatal(err)
	}
	if _, got, err := readMsg(t, c); err != nil || got != "no secret here" {
		t.Fatalf("fragmented echo = %q, %v", got, err)
	}
}

// TestWebSocketUndeclaredRefused sends a handshake to an operation without
// "websocket": true: a clear 403 (never a plain GET upstream), audited.
func TestWebSocketUndeclaredRefused(t *testing.T) {
	e, u := newWSEnv(t)
	_, resp, err := e.dialWS(t, "/plain")
	if !errors.Is(err, websocket.ErrBadHandshake) || resp == nil {
		t.Fatalf("dial /plain = %v, %v; want a refused handshake", resp, err)
	}
	body := readAll(t, resp)
	d := errorOf(t, body)
	if resp.StatusCode != http.StatusForbidden || d.Code != contract.CodeWebSocketNotAllowed || !strings.Contains(d.Message, `"websocket": true`) {
		t.Fatalf("refusal = %d %s", resp.StatusCode, body)
	}
	select {
	case h := <-u.plain:
		t.Fatalf("the upstream received the handshake as a plain request: %v", h)
	default:
	}
	ev := e.audit.WaitFor(t, "denied handshake", byAuditID(resp.Header.Get(contract.HeaderAuditID)))
	if ev.Event != audit.EventDenied || ev.Reason != string(contract.CodeWebSocketNotAllowed) || ev.Operation != "plain" || ev.Status != http.StatusForbidden {
		t.Fatalf("audit event = %+v; want denied websocket_not_allowed for operation plain", ev)
	}
	// A handshake to a path no operation has is refused by policy as usual.
	if _, resp, err := e.dialWS(t, "/nope"); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("dial /nope = %v, %v; want 403", resp, err)
	}
	// The plain GET of the same operation still works.
	r, err := e.client(false).Get("https://" + wsHost + "/plain")
	if err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("plain GET = %v, %v", r, err)
	}
	_ = r.Body.Close()
}

// TestWebSocketCurlHandshake checks the handshake with curl --include.
func TestWebSocketCurlHandshake(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("curl is required when CI=true")
		}
		t.Skip("curl not installed")
	}
	e, u := newWSEnv(t)
	const key = "dGhlIHNhbXBsZSBub25jZQ=="
	run := func(path string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// After a 101 curl waits for a body that never comes: --max-time ends it.
		cmd := exec.CommandContext(ctx, curl, "-sS", "--include", "--http1.1", "--max-time", "3", "--cacert", e.caFile, "--noproxy", "",
			"-x", "http://"+e.addr, "--proxy-user", e.sess.ID+":"+e.secret,
			"-H", "Connection: Upgrade", "-H", "Upgrade: websocket", "-H", "Sec-WebSocket-Version: 13", "-H", "Sec-WebSocket-Key: "+key,
			"https://"+wsHost+path)
		cmd.Env = curlEnv()
		out, _ := cmd.Output()
		return string(out)
	}
	out := run("/ws")
	if !strings.Contains(out, "HTTP/1.1 101 Switching Protocols") || !strings.Contains(out, "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=") {
		t.Fatalf("curl handshake output:\n%s\nwant 101 with the RFC 6455 accept value", out)
	}
	if got := <-u.auth; got != "Bearer "+testToken {
		t.Fatalf("upstream Authorization = %q", got)
	}
	out = run("/plain")
	if !strings.Contains(out, "HTTP/1.1 403") || !strings.Contains(out, string(contract.CodeWebSocketNotAllowed)) {
		t.Fatalf("curl handshake to /plain output:\n%s\nwant 403 %s", out, string(contract.CodeWebSocketNotAllowed))
	}
}

// TestWebSocketAbort drops each side in turn: the other side sees the
// connection end, and the close is audited as 1006.
func TestWebSocketAbort(t *testing.T) {
	e, u := newWSEnv(t)
	t.Run("upstream drops", func(t *testing.T) {
		c, resp, err := e.dialWS(t, "/ws")
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		if err := c.WriteMessage(websocket.TextMessage, []byte("drop")); err != nil {
			t.Fatal(err)
		}
		_, _, err = readMsg(t, c)
		var ce *websocket.CloseError
		if err == nil || (errors.As(err, &ce) && ce.Code != websocket.CloseAbnormalClosure) || isTimeout(err) {
			t.Fatalf("client read after upstream drop = %v; want the connection to end", err)
		}
		ws := wsClosedEvent(t, e, resp.Header.Get(contract.HeaderAuditID)).WebSocket
		if ws.CloseCode != wsCloseAbnormal || ws.ClosedBy != "upstream" {
			t.Fatalf("close event = %+v; want 1006 by upstream", ws)
		}
	})
	t.Run("client drops", func(t *testing.T) {
		c, resp, err := e.dialWS(t, "/ws")
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		drain(u.ended)
		_ = c.NetConn().Close()
		select {
		case err := <-u.ended:
			var ce *websocket.CloseError
			if errors.As(err, &ce) && ce.Code != websocket.CloseAbnormalClosure {
				t.Fatalf("upstream saw %v; want the connection to end without a close frame", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the upstream did not see the client's drop")
		}
		ws := wsClosedEvent(t, e, resp.Header.Get(contract.HeaderAuditID)).WebSocket
		if ws.CloseCode != wsCloseAbnormal || ws.ClosedBy != "client" {
			t.Fatalf("close event = %+v; want 1006 by client", ws)
		}
	})
	t.Run("upstream closes", func(t *testing.T) {
		c, resp, err := e.dialWS(t, "/ws")
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		if err := c.WriteMessage(websocket.TextMessage, []byte("close")); err != nil {
			t.Fatal(err)
		}
		if _, _, err := readMsg(t, c); !websocket.IsCloseError(err, 4000) {
			t.Fatalf("client read = %v; want the upstream's 4000 close", err)
		}
		ws := wsClosedEvent(t, e, resp.Header.Get(contract.HeaderAuditID)).WebSocket
		if ws.CloseCode != 4000 || ws.ClosedBy != "upstream" {
			t.Fatalf("close event = %+v; want 4000 by upstream", ws)
		}
	})
}

func drain(ch chan error) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// TestWebSocketGoingAway ends the session, then shuts the proxy down: open
// WebSockets get a 1001 close on both sides.
func TestWebSocketGoingAway(t *testing.T) {
	e, u := newWSEnv(t)
	for _, stop := range []string{"session end", "shutdown"} {
		c, resp, err := e.dialWS(t, "/ws")
		if err != nil {
			t.Fatalf("%s: dial: %v", stop, err)
		}
		drain(u.ended)
		if stop == "session end" {
			e.srv.CloseSession(e.sess.ID)
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = e.srv.Shutdown(ctx)
			cancel()
		}
		if _, _, err := readMsg(t, c); !websocket.IsCloseError(err, websocket.CloseGoingAway) {
			t.Fatalf("%s: client read = %v; want a 1001 close", stop, err)
		}
		select {
		case err := <-u.ended:
			if !websocket.IsCloseError(err, websocket.CloseGoingAway) {
				t.Fatalf("%s: upstream saw %v; want a 1001 close", stop, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the upstream saw no close", stop)
		}
		ws := wsClosedEvent(t, e, resp.Header.Get(contract.HeaderAuditID)).WebSocket
		if ws.CloseCode != wsCloseGoingAway || ws.ClosedBy != "proxy" {
			t.Fatalf("%s: close event = %+v; want 1001 by proxy", stop, ws)
		}
	}
}

// TestWebSocketProtocolErrors feeds the relay frames no peer may send.
func TestWebSocketProtocolErrors(t *testing.T) {
	e, _ := newWSEnv(t)
	tc, br := e.rawTunnel(t, wsHost+":443")
	req := "GET /ws HTTP/1.1\r\nHost: " + wsHost + "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	if _, err := tc.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake = %v, %v", resp, err)
	}
	// An unmasked client frame is a protocol error: 1002 back, then the end.
	if _, err := tc.Write(appendWSHeader(nil, true, wsOpText, 2, nil)); err != nil {
		t.Fatal(err)
	}
	_, _ = tc.Write([]byte("hi"))
	_ = tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var hb [14]byte
	var h wsHeader
	if _, err := readWSHeader(br, hb[:], &h); err != nil || h.op != wsOpClose || h.length < 2 {
		t.Fatalf("after an unmasked frame read header %+v, %v; want a close", h, err)
	}
	p := make([]byte, h.length)
	if _, err := io.ReadFull(br, p); err != nil || closeCode(p) != wsCloseProtocolError {
		t.Fatalf("close payload %q, %v; want 1002", p, err)
	}
	ws := wsClosedEvent(t, e, resp.Header.Get(contract.HeaderAuditID)).WebSocket
	if ws.CloseCode != wsCloseProtocolError || ws.ClosedBy != "proxy" {
		t.Fatalf("close event = %+v; want 1002 by proxy", ws)
	}
}
