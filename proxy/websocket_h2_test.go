package proxy

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/aileron-dev/aileron-proxy/internal/contract"
)

// xconnectEnv is the GODEBUG setting with which Go's HTTP/2 server accepts
// extended CONNECT (RFC 8441); net/http reads it once, at start-up.
const xconnectEnv = "http2xconnect=1"

// TestWebSocketH2ExtendedConnect opens a WebSocket with an HTTP/2 extended
// CONNECT through the proxy (Go's HTTP/2 client) and relays frames over the
// stream. It runs itself again with GODEBUG=http2xconnect=1 when this
// process lacks it.
func TestWebSocketH2ExtendedConnect(t *testing.T) {
	if !strings.Contains(os.Getenv("GODEBUG"), xconnectEnv) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestWebSocketH2ExtendedConnect$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "GODEBUG="+strings.Trim(os.Getenv("GODEBUG")+","+xconnectEnv, ","))
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestWebSocketH2ExtendedConnect") {
			t.Fatalf("with GODEBUG=%s: %v\n%s", xconnectEnv, err, out)
		}
		return
	}
	e, u := newWSEnv(t)
	// net/http's Transport refuses the :protocol pseudo-header; x/net's
	// HTTP/2 client sends it, on a tunnel opened by hand.
	tc, _ := e.rawTunnel(t, wsHost+":443", "h2")
	cc, err := (&http2.Transport{}).NewClientConn(tc)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodConnect, "https://"+wsHost+"/ws", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(":protocol", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Authorization", clientAuth)
	resp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatalf("extended CONNECT: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Fatalf("extended CONNECT = %d over HTTP/%d, want 200 over HTTP/2", resp.StatusCode, resp.ProtoMajor)
	}
	if got := <-u.auth; got != "Bearer "+testToken {
		t.Fatalf("upstream Authorization = %q, want the injected credential", got)
	}
	br := bufio.NewReader(resp.Body)
	send := func(op byte, p []byte) {
		t.Helper()
		key := [4]byte{1, 2, 3, 4}
		frame := appendWSHeader(nil, true, op, len(p), &key)
		masked := append([]byte(nil), p...)
		maskWS(key, 0, masked)
		if _, err := pw.Write(append(frame, masked...)); err != nil {
			t.Fatal(err)
		}
	}
	recv := func() (byte, string) {
		t.Helper()
		var msg []byte
		var op byte
		for {
			var hb [14]byte
			var h wsHeader
			if _, err := readWSHeader(br, hb[:], &h); err != nil {
				t.Fatalf("reading a frame: %v", err)
			}
			p := make([]byte, h.length)
			if _, err := io.ReadFull(br, p); err != nil {
				t.Fatal(err)
			}
			if h.masked {
				t.Fatal("the proxy sent the client a masked frame")
			}
			if h.op != wsOpContinuation {
				op = h.op
			}
			msg = append(msg, p...)
			if h.fin {
				return op, string(msg)
			}
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		send(wsOpText, []byte("hello over h2"))
		if op, got := recv(); op != wsOpText || got != "hello over h2" {
			t.Errorf("echo = %#x %q", op, got)
			return
		}
		send(wsOpText, []byte("auth"))
		if _, got := recv(); got != strings.Repeat("*", len("Bearer "+testToken)) {
			t.Errorf("upstream's Authorization echoed as %q; want it masked", got)
			return
		}
		send(wsOpClose, closePayload(1000, ""))
		if op, got := recv(); op != wsOpClose || closeCode([]byte(got)) != 1000 {
			t.Errorf("after close got %#x %q, want close 1000", op, got)
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the h2 WebSocket exchange did not finish")
	}
	_ = pw.Close()
	id := resp.Header.Get(contract.HeaderAuditID)
	ws := wsClosedEvent(t, e, id).WebSocket
	if ws.FramesIn != 3 || ws.FramesOut < 3 || ws.CloseCode != 1000 || ws.ClosedBy != "client" {
		t.Fatalf("close event = %+v; want 3 frames in, close 1000 by client", ws)
	}
	open := e.audit.WaitFor(t, "handshake", byAuditID(id))
	if open.Method != http.MethodGet || open.Status != http.StatusOK || open.Operation != "ws" {
		t.Fatalf("handshake event = %+v; want GET ws with status 200", open)
	}
}
