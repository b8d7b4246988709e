package integration

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/net/http2"
)

// wsSpec declares one WebSocket operation and one plain GET.
const wsSpec = `{
  "schema_version": "aileron.connector.v1",
  "connector": {"fqn": "local://test/ws", "version": "1.0.0"},
  "tools": [{"name": "wsapi", "operations": [
    {"name": "socket", "method": "GET", "path": "/v1/socket", "hosts": ["ws.example.test"], "credential": "bearer", "websocket": true},
    {"name": "plain", "method": "GET", "path": "/v1/plain", "hosts": ["ws.example.test"], "credential": "bearer"}
  ]}]
}`

// wsEcho is the upstream: an echo WebSocket (gorilla/websocket) that, on
// "auth", sends back its handshake's Authorization in 2-byte fragments; ends
// reports how each connection's read loop ended.
func wsEcho(ends chan<- error) http.Handler {
	up := websocket.Upgrader{}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/plain", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "plain") })
	mux.HandleFunc("/v1/socket", func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			mt, msg, err := c.ReadMessage()
			if err != nil {
				ends <- err
				return
			}
			if string(msg) != "auth" {
				_ = c.WriteMessage(mt, msg)
				continue
			}
			auth := r.Header.Get("Authorization")
			var frames []byte
			for i := 0; i < len(auth); i += 2 {
				b0 := byte(0x0) // continuation
				if i == 0 {
					b0 = 0x1 // text
				}
				if i+2 >= len(auth) {
					b0 |= 0x80 // FIN
				}
				chunk := auth[i:min(i+2, len(auth))]
				frames = append(append(frames, b0, byte(len(chunk))), chunk...)
			}
			_, _ = c.NetConn().Write(frames)
		}
	})
	return mux
}

// TestWebSocketThroughServe runs the real binary: a gorilla/websocket client
// echoes through the session's proxy with the credential injected and masked
// in a fragmented echo, an undeclared handshake is refused and audited, an
// HTTP/2 extended CONNECT works (the binary turns it on), and SIGTERM closes
// open WebSockets with 1001 on both sides.
func TestWebSocketThroughServe(t *testing.T) {
	home := t.TempDir()
	ends := make(chan error, 16)
	up := newUpstream(t, []string{"ws.example.test"}, wsEcho(ends))
	spec := filepath.Join(t.TempDir(), "ws.aileron.connector.v1.json")
	if err := os.WriteFile(spec, []byte(wsSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, home, "", "connector", "install", spec)
	mustCLI(t, home, canary+"\n", "credential", "set", "local://test/ws", "--kind", "bearer", "--stdin")
	d := startServe(t, home, nil, "--resolve", "ws.example.test:443="+up.addr, "--upstream-ca", up.certFile)
	s := createSession(t, home)
	e := &env{home: home, up: up, d: d, s: s}
	t.Cleanup(func() { e.assertNoCanary(t) })

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(s.CAPEM))
	pu, err := url.Parse(s.ProxyURL)
	if err != nil {
		t.Fatal(err)
	}
	dialer := websocket.Dialer{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: pool}, HandshakeTimeout: 20 * time.Second}
	dial := func(path string) (*websocket.Conn, *http.Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return dialer.DialContext(ctx, "wss://ws.example.test"+path, nil)
	}
	c, resp, err := dial("/v1/socket")
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	defer c.Close()
	if got := up.last(t).Header.Get("Authorization"); got != "Bearer "+canary {
		t.Fatalf("upstream handshake Authorization = %q, want the injected credential", redactCanary(got))
	}
	roundTrip := func(msg string) string {
		t.Helper()
		if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, got, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("reading the echo of %q: %v", msg, err)
		}
		return string(got)
	}
	if got := roundTrip("hello"); got != "hello" {
		t.Fatalf("echo = %q", got)
	}
	if got := roundTrip("auth"); strings.Contains(got, canary) || got != strings.Repeat("*", len("Bearer "+canary)) {
		t.Fatalf("the upstream's fragmented echo of its Authorization reached the client as %q; want it masked", redactCanary(got))
	}

	// Undeclared: refused at once, audited, never sent upstream.
	before := len(up.requests())
	if _, resp, err := dial("/v1/plain"); !errors.Is(err, websocket.ErrBadHandshake) || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("handshake to /v1/plain = %v, %v; want 403", resp, err)
	}
	if n := len(up.requests()); n != before {
		t.Fatalf("the upstream received the refused handshake")
	}
	waitAudit(t, home, map[string]any{"event": "connector.proxy.denied", "reason": "websocket_not_allowed", "operation": "plain"})

	// HTTP/2 extended CONNECT, which the binary turns on.
	h2Stream := h2WebSocket(t, pu, pool)
	if got := h2Stream.echo(t, "over h2"); got != "over h2" {
		t.Fatalf("h2 echo = %q", got)
	}

	// SIGTERM: both legs of both sockets get 1001.
	drainErrs(ends)
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := c.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseGoingAway) {
		t.Fatalf("after SIGTERM the client read %v; want a 1001 close", err)
	}
	if op, code := h2Stream.next(t); op != 0x8 || code != websocket.CloseGoingAway {
		t.Fatalf("after SIGTERM the h2 client read opcode %#x code %d; want a 1001 close", op, code)
	}
	for range 2 {
		select {
		case err := <-ends:
			if !websocket.IsCloseError(err, websocket.CloseGoingAway) {
				t.Fatalf("after SIGTERM the upstream read %v; want a 1001 close", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the upstream saw no close after SIGTERM")
		}
	}
	waitAudit(t, home, map[string]any{"event": "connector.proxy.websocket_closed", "audit_id": resp.Header.Get("X-Aileron-Audit-Id")})
}

func drainErrs(ch chan error) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// h2Conn is a WebSocket opened with an HTTP/2 extended CONNECT, spoken by
// hand over x/net's HTTP/2 client (net/http's Transport refuses :protocol).
type h2Conn struct {
	w  io.Writer
	br *bufio.Reader
}

func h2WebSocket(t *testing.T, proxy *url.URL, pool *x509.CertPool) *h2Conn {
	t.Helper()
	raw, err := net.DialTimeout("tcp", proxy.Host, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	pass, _ := proxy.User.Password()
	auth := base64.StdEncoding.EncodeToString([]byte(proxy.User.Username() + ":" + pass))
	if _, err := io.WriteString(raw, "CONNECT ws.example.test:443 HTTP/1.1\r\nHost: ws.example.test:443\r\nProxy-Authorization: Basic "+auth+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(raw)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT = %v, %v", resp, err)
	}
	tc := tls.Client(raw, &tls.Config{RootCAs: pool, ServerName: "ws.example.test", NextProtos: []string{"h2"}})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	cc, err := (&http2.Transport{}).NewClientConn(tc)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	req, _ := http.NewRequest(http.MethodConnect, "https://ws.example.test/v1/socket", pr)
	req.Header.Set(":protocol", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	r2, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatalf("extended CONNECT through serve: %v", err)
	}
	if r2.StatusCode != http.StatusOK {
		t.Fatalf("extended CONNECT = %d, want 200", r2.StatusCode)
	}
	t.Cleanup(func() { r2.Body.Close() })
	return &h2Conn{w: pw, br: bufio.NewReader(r2.Body)}
}

// echo sends one masked text frame and returns the payload of the next
// message.
func (h *h2Conn) echo(t *testing.T, msg string) string {
	t.Helper()
	key := [4]byte{9, 8, 7, 6}
	frame := []byte{0x81, 0x80 | byte(len(msg))}
	frame = append(frame, key[:]...)
	for i := range len(msg) {
		frame = append(frame, msg[i]^key[i%4])
	}
	if _, err := h.w.Write(frame); err != nil {
		t.Fatal(err)
	}
	var out []byte
	for {
		b0, p := h.frame(t)
		out = append(out, p...)
		if b0&0x80 != 0 {
			return string(out)
		}
	}
}

// next reads one frame and returns its opcode and, for a close, its code.
func (h *h2Conn) next(t *testing.T) (byte, int) {
	t.Helper()
	b0, p := h.frame(t)
	code := 0
	if len(p) >= 2 {
		code = int(binary.BigEndian.Uint16(p))
	}
	return b0 & 0x0F, code
}

// frame reads one unmasked frame with a payload under 126 bytes.
func (h *h2Conn) frame(t *testing.T) (byte, []byte) {
	t.Helper()
	var hdr [2]byte
	if _, err := io.ReadFull(h.br, hdr[:]); err != nil {
		t.Fatalf("reading a frame: %v", err)
	}
	if hdr[1]&0x80 != 0 || hdr[1]&0x7F > 125 {
		t.Fatalf("unexpected frame header %x", hdr)
	}
	p := make([]byte, hdr[1]&0x7F)
	if _, err := io.ReadFull(h.br, p); err != nil {
		t.Fatal(err)
	}
	return hdr[0], p
}
