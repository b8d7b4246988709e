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
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
)

// rawUpstream is an HTTP/1.1 TLS upstream written by hand, for what
// httptest.Server will not do: close a keep-alive connection while it is
// idle, answer with 1xx first, send an oversized header.
type rawUpstream struct {
	ln    net.Listener
	cert  atomic.Pointer[tls.Certificate]
	conns atomic.Int64
	wg    sync.WaitGroup
	// abandoned receives the path of a ?hold request whose connection the
	// proxy closed before the answer.
	abandoned chan string
	// afterExtra counts requests that arrived after an ?extra answer.
	afterExtra atomic.Int64
}

func newRawUpstream(t *testing.T) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln, abandoned: make(chan string, 8)}
	t.Cleanup(func() { _ = ln.Close(); u.wg.Wait() })
	cfg := &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return u.cert.Load(), nil }}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.conns.Add(1)
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				cc := &corkConn{Conn: c}
				u.serve(tls.Server(cc, cfg), cc)
			}()
		}
	}()
	return u
}

// corkConn holds what is written while corked and sends it in one write
// when uncorked: two TLS records in one TCP segment.
type corkConn struct {
	net.Conn
	corked bool
	buf    []byte
}

func (c *corkConn) Write(p []byte) (int, error) {
	if c.corked {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *corkConn) uncork() error {
	c.corked = false
	_, err := c.Conn.Write(c.buf)
	c.buf = nil
	return err
}

// serve answers one request by its path, then closes the connection 50 ms
// later without having said so: the proxy holds it as idle meanwhile.
// With ?extra it also sends an unasked-for answer, a TLS record of its
// own in the same segment, and counts any request that follows.
func (u *rawUpstream) serve(c *tls.Conn, cc *corkConn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, req.Body)
	switch q := req.URL.Query(); {
	case q.Has("hold"): // answer in 5 s, unless the proxy gives up first
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			u.abandoned <- req.URL.Path
			return
		}
	case q.Has("late"): // answer in 1.5 s
		time.Sleep(1500 * time.Millisecond)
	}
	switch req.URL.Path {
	case "/public": // an oversized header
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nX-Big: %s\r\nContent-Length: 2\r\n\r\nok", strings.Repeat("a", 8<<10))
	case "/trailers": // Early Hints before the answer
		io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"+
			"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhints")
	default:
		if req.URL.Query().Has("extra") {
			cc.corked = true
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale")
			_ = cc.uncork()
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			if _, err := http.ReadRequest(br); err == nil {
				u.afterExtra.Add(1)
			}
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	}
	time.Sleep(50 * time.Millisecond)
}

func newRawUpstreamEnv(t *testing.T) (*env, *rawUpstream) {
	u := newRawUpstream(t)
	e := newEnv(t, func(c *Config) {
		c.Resolve[apiHost+":443"] = u.ln.Addr().String()
		c.Limits.MaxHeaderBytes = 4 << 10
	})
	u.cert.Store(&e.pki.leaf)
	return e, u
}

func TestUpstreamIdleConnectionClosedIsRetriedOnlyWhenSafe(t *testing.T) {
	e, u := newRawUpstreamEnv(t)
	tc, br := e.rawTunnel(t, apiHost+":443")
	get := "GET /user HTTP/1.1\r\nHost: " + apiHost + "\r\n\r\n"
	if resp, body := rawRequest(t, tc, br, get); resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("first GET = %d %q", resp.StatusCode, body)
	}
	time.Sleep(200 * time.Millisecond) // the upstream closes the pooled connection
	if resp, body := rawRequest(t, tc, br, get); resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("GET on a connection the upstream closed while idle = %d %q, want a retry on a new one", resp.StatusCode, body)
	}
	if n := u.conns.Load(); n != 2 {
		t.Fatalf("upstream connections = %d, want 2 (the retry dialled one)", n)
	}
	time.Sleep(200 * time.Millisecond)
	post := "POST /repos/a/b/issues HTTP/1.1\r\nHost: " + apiHost + "\r\nContent-Length: 5\r\n\r\nhello"
	resp, body := rawRequest(t, tc, br, post)
	if resp.StatusCode != http.StatusBadGateway || errorOf(t, body).Code != contract.CodeUpstreamUnreachable {
		t.Fatalf("POST on a closed idle connection = %d %s, want 502 upstream_unreachable (never sent twice)", resp.StatusCode, body)
	}
	if n := u.conns.Load(); n != 2 {
		t.Errorf("upstream connections = %d after the POST, want 2: a POST is not retried", n)
	}
}

func TestUpstreamOversizedHeaderAndEarlyHints(t *testing.T) {
	e, _ := newRawUpstreamEnv(t)
	tc, br := e.rawTunnel(t, apiHost+":443")
	resp, body := rawRequest(t, tc, br, "GET /public HTTP/1.1\r\nHost: "+apiHost+"\r\n\r\n")
	if resp.StatusCode != http.StatusBadGateway || errorOf(t, body).Code != contract.CodeUpstreamUnreachable {
		t.Fatalf("8 KiB upstream header with a 4 KiB limit = %d %s, want 502", resp.StatusCode, body)
	}
	tc, br = e.rawTunnel(t, apiHost+":443")
	resp, body = rawRequest(t, tc, br, "GET /trailers HTTP/1.1\r\nHost: "+apiHost+"\r\n\r\n")
	if resp.StatusCode != http.StatusOK || string(body) != "hints" {
		t.Fatalf("103 then 200 = %d %q, want the 200 and its body", resp.StatusCode, body)
	}
}

func TestExpectContinue(t *testing.T) {
	e := newEnv(t)
	tc, br := e.rawTunnel(t, apiHost+":443")
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(tc, "POST /repos/a/b/issues HTTP/1.1\r\nHost: "+apiHost+"\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusContinue {
		t.Fatalf("before the body: %v %v, want 100 Continue", resp, err)
	}
	io.WriteString(tc, "hello")
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("after the body: %v %v, want 200", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if s := e.expectSeen(t); s.Body != 5 {
		t.Errorf("upstream got %d body bytes, want 5", s.Body)
	}

	// A denied request never reads the body: no 100 Continue, and the
	// connection closes after the refusal (the client may still send it).
	resp, _ = rawRequest(t, tc, br, "POST /admin HTTP/1.1\r\nHost: "+apiHost+"\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("denied POST with Expect = %d, want 403 without 100 Continue", resp.StatusCode)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("connection after a refusal that left the body unsent: read %v, want EOF", err)
	}

	tc, br = e.rawTunnel(t, apiHost+":443")
	resp, _ = rawRequest(t, tc, br, "GET /user HTTP/1.1\r\nHost: "+apiHost+"\r\nExpect: teapot\r\n\r\n")
	if resp.StatusCode != http.StatusExpectationFailed {
		t.Errorf("Expect: teapot = %d, want 417", resp.StatusCode)
	}
}

func TestHTTP1RequestFraming(t *testing.T) {
	e := newEnv(t)
	// HTTP/1.1 without Host: refused before policy, connection closed.
	tc, br := e.rawTunnel(t, apiHost+":443")
	resp, body := rawRequest(t, tc, br, "GET /user HTTP/1.1\r\n\r\n")
	if resp.StatusCode != http.StatusBadRequest || errorOf(t, body).Code != contract.CodeBadFraming {
		t.Fatalf("HTTP/1.1 without Host = %d %s, want 400 bad_framing", resp.StatusCode, body)
	}
	e.expectNothingSeen(t)

	// A control byte in a field value or a space in a name: 400 from the
	// parser, before policy.
	for _, raw := range []string{"GET /user HTTP/1.1\r\nHost: " + apiHost + "\r\nX-A: a\x01b\r\n\r\n",
		"GET /user HTTP/1.1\r\nHost: " + apiHost + "\r\nX A: b\r\n\r\n"} {
		tc, br = e.rawTunnel(t, apiHost+":443")
		if resp, body := rawRequest(t, tc, br, raw); resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("%q = %d %s, want 400", raw, resp.StatusCode, body)
		}
	}
	e.expectNothingSeen(t)

	// HTTP/1.0: answered and closed.
	tc, br = e.rawTunnel(t, apiHost+":443")
	resp, body = rawRequest(t, tc, br, "GET /public HTTP/1.0\r\nHost: "+apiHost+"\r\n\r\n")
	if resp.StatusCode != http.StatusOK || !resp.Close || len(body) == 0 {
		t.Fatalf("HTTP/1.0 = %d close=%v body %q, want 200 and the connection closed", resp.StatusCode, resp.Close, body)
	}
	e.expectSeen(t)

	// A keep-alive connection sent nothing: closed at the idle timeout.
	e2 := newEnv(t, func(c *Config) {
		c.Limits.IdleTimeout = 200 * time.Millisecond
		c.Limits.ConnectTimeout = 200 * time.Millisecond
	})
	tc, br = e2.rawTunnel(t, apiHost+":443")
	start := time.Now()
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err == nil || time.Since(start) > 3*time.Second {
		t.Errorf("idle tunnel: read %v after %v, want it closed near the 200 ms timeout", err, time.Since(start))
	}
}

// rawConnPair returns a rawConn on loopback, its peer and the listener.
func rawConnPair(t *testing.T) (*rawConn, net.Conn, net.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, ok := newRawConn(d).(*rawConn)
	if !ok {
		t.Fatalf("newRawConn(%T) is not a rawConn", d)
	}
	peer := <-accepted
	t.Cleanup(func() { _ = c.Close(); _ = peer.Close() })
	return c, peer, ln
}

// readWithin reads what c receives within d; nothing is "".
func readWithin(t *testing.T, c net.Conn, d time.Duration) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, 64<<10)
	n, err := c.Read(buf)
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && err != io.EOF {
		t.Fatalf("peer read: %v", err)
	}
	return string(buf[:n])
}

func TestRawConnHeldWrite(t *testing.T) {
	c, peer, _ := rawConnPair(t)
	answer := func(after time.Duration) chan string {
		got := make(chan string, 1)
		go func() {
			b := make([]byte, 64<<10)
			n, _ := peer.Read(b)
			got <- string(b[:n])
			time.Sleep(after)
			_, _ = io.WriteString(peer, "answer")
		}()
		return got
	}
	buf := make([]byte, 64)

	// Held: nothing leaves before the Read, which sends it and then
	// waits for the answer without an empty read.
	c.holdWrites(true)
	if n, err := c.Write([]byte("request")); n != 7 || err != nil {
		t.Fatalf("held Write = %d, %v", n, err)
	}
	c.holdWrites(false)
	if got := readWithin(t, peer, 50*time.Millisecond); got != "" {
		t.Fatalf("the peer received %q before the Read", got)
	}
	got := answer(20 * time.Millisecond)
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "answer" {
		t.Fatalf("Read = %q, %v", buf[:n], err)
	}
	if g := <-got; g != "request" {
		t.Fatalf("the peer received %q, want the held request", g)
	}
	if c.emptyReads != 0 {
		t.Fatalf("%d reads found nothing; the held write's Read must wait first", c.emptyReads)
	}

	// Not held: the same exchange reads once for nothing.
	got = answer(20 * time.Millisecond)
	if _, err := c.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "answer" || <-got != "request" {
		t.Fatalf("Read = %q, %v", buf[:n], err)
	}
	if c.emptyReads != 1 {
		t.Fatalf("emptyReads = %d without holding, want 1", c.emptyReads)
	}

	// Too much to hold: what is held goes first, in order, then the rest,
	// and nothing stays held.
	c.holdWrites(true)
	_, _ = c.Write([]byte("one,"))
	big := strings.Repeat("x", heldMax)
	if n, err := c.Write([]byte(big)); n != len(big) || err != nil {
		t.Fatalf("Write past heldMax = %d, %v", n, err)
	}
	c.holdWrites(false)
	if c.heldPending() {
		t.Fatal("a write past heldMax left bytes held")
	}
	_ = peer.SetReadDeadline(time.Now().Add(time.Second))
	all := make([]byte, 4+heldMax)
	if _, err := io.ReadFull(peer, all); err != nil || string(all) != "one,"+big {
		t.Fatalf("the peer received %.20q..., %v; want one, and then the large write", all, err)
	}

	// Held bytes leave only through a Read: a Write before it drops them,
	// and so does Close.
	c.holdWrites(true)
	_, _ = c.Write([]byte("dropped"))
	c.holdWrites(false)
	_, _ = c.Write([]byte("alert"))
	if got := readWithin(t, peer, time.Second); got != "alert" {
		t.Fatalf("the peer received %q, want only the later write", got)
	}
	c.holdWrites(true)
	_, _ = c.Write([]byte("never"))
	c.holdWrites(false)
	_ = c.Close()
	if got := readWithin(t, peer, time.Second); got != "" {
		t.Fatalf("the peer received %q after Close", got)
	}
}

// A Read that cannot start (its deadline passed) sends nothing; the next
// one sends the held write.
func TestRawConnHeldWriteWaitsForARead(t *testing.T) {
	c, peer, _ := rawConnPair(t)
	c.holdWrites(true)
	_, _ = c.Write([]byte("request"))
	c.holdWrites(false)
	_ = c.SetReadDeadline(time.Now().Add(-time.Second))
	buf := make([]byte, 16)
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past the deadline = %v", err)
	}
	if got := readWithin(t, peer, 50*time.Millisecond); got != "" {
		t.Fatalf("the peer received %q from a Read that did not start", got)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make(chan string, 1)
	go func() {
		// The answer follows the request, as holdWrites requires: an
		// answer sent before it would not wake the Read.
		b := make([]byte, 64)
		n, _ := peer.Read(b)
		got <- string(b[:n])
		_, _ = io.WriteString(peer, "answer")
	}()
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "answer" {
		t.Fatalf("Read = %q, %v", buf[:n], err)
	}
	if g := <-got; g != "request" {
		t.Fatalf("the peer received %q, want the held request", g)
	}
}

// A held send that fails is the Read's error, a write error.
func TestRawConnHeldWriteError(t *testing.T) {
	c, peer, _ := rawConnPair(t)
	_ = peer.(*net.TCPConn).SetLinger(0)
	_ = peer.Close() // an RST: the held send fails
	time.Sleep(20 * time.Millisecond)
	c.holdWrites(true)
	_, _ = c.Write([]byte("request"))
	c.holdWrites(false)
	var err error
	for range 3 { // the first send may still be accepted by the kernel
		if _, err = c.Read(make([]byte, 16)); err != nil {
			break
		}
	}
	var op *net.OpError
	if !errors.As(err, &op) || (op.Op != "write" && op.Op != "read") {
		t.Fatalf("Read after the peer reset = %v, want the connection's error", err)
	}
}

// Through the proxy: the request goes upstream from inside the read of
// its answer, so waiting for a slow upstream costs no empty read.
func TestUpstreamRequestSentByTheReadOfItsAnswer(t *testing.T) {
	e := newEnv(t)
	e.handlers.Store("/user", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		_, _ = io.WriteString(w, "slow")
	}))
	tc, br := e.rawTunnel(t, apiHost+":443")
	get := "GET /user HTTP/1.1\r\nHost: " + apiHost + "\r\n\r\n"
	emptyReads := func() int {
		e.srv.h1Pool.mu.Lock()
		defer e.srv.h1Pool.mu.Unlock()
		idle := e.srv.h1Pool.idle[apiHost+":443"]
		if len(idle) != 1 || idle[0].rc == nil {
			t.Fatalf("pooled connections = %d, want 1 on a rawConn", len(idle))
		}
		return idle[0].rc.emptyReads
	}
	var afterDial int // the handshake's reads are not a request's
	for i := range 4 {
		if resp, body := rawRequest(t, tc, br, get); resp.StatusCode != http.StatusOK || string(body) != "slow" {
			t.Fatalf("GET %d = %d %q", i, resp.StatusCode, body)
		}
		e.expectSeen(t)
		if i == 0 {
			afterDial = emptyReads()
		}
	}
	if n := emptyReads() - afterDial; n != 0 {
		t.Fatalf("the pooled upstream connection read %d times for nothing over 3 slow answers, want 0", n)
	}
}

func TestRawConn(t *testing.T) {
	c, peer, ln := rawConnPair(t)

	big := make([]byte, 8<<20) // more than the socket buffers: Write must wait and finish
	for i := range big {
		big[i] = byte(i)
	}
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(peer); got <- b }()
	if n, err := c.Write(big); n != len(big) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	_ = c.CloseWrite()
	if b := <-got; string(b) != string(big) {
		t.Fatalf("peer read %d bytes, not what was written", len(b))
	}

	_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	buf := make([]byte, 16)
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past the deadline = %v, want a timeout", err)
	}
	_ = c.SetReadDeadline(time.Time{})
	io.WriteString(peer, "hi")
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "hi" {
		t.Fatalf("Read = %q, %v", buf[:n], err)
	}
	done := make(chan error, 1)
	go func() { _, err := c.Read(buf); done <- err }()
	time.Sleep(20 * time.Millisecond)
	_ = c.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read when closed = %v, want net.ErrClosed", err)
	}
	peer.Close()

	// The peer's end of the stream is io.EOF, as from net.
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	c2 := newRawConn(d)
	defer c2.Close()
	if n, err := c2.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("Read after the peer closed = %d, %v, want io.EOF", n, err)
	}
}

func TestApprovalWithdrawnWhenTheClientLeaves(t *testing.T) {
	e := newEnv(t)
	tc, _ := e.rawTunnel(t, apiHost+":443")
	io.WriteString(tc, "POST /deploy HTTP/1.1\r\nHost: "+apiHost+"\r\nContent-Length: 0\r\n\r\n")
	select {
	case <-e.approver.requests:
	case <-time.After(10 * time.Second):
		t.Fatal("the request was not held for approval")
	}
	_ = tc.Close()
	// No outcome is ever sent: only the client's leaving ends the wait.
	e.audit.WaitFor(t, "denied", func(ev audit.Event) bool {
		return ev.Path == "/deploy" && ev.Reason == string(contract.CodeApprovalDenied)
	})
	e.expectNothingSeen(t)
}

// TestUpstreamWaitEndsWhenTheClientLeaves: a client that closes its
// connection while the upstream has not answered ends the upstream request
// (http.Server's background read did the same), for a bodiless request and
// for ones whose body was read whole (small, large, chunked), and the
// exchange is audited as client_closed (499).
func TestUpstreamWaitEndsWhenTheClientLeaves(t *testing.T) {
	e, u := newRawUpstreamEnv(t)
	big := strings.Repeat("x", 200<<10) // written upstream by a goroutine (inlineBodyMax)
	for _, raw := range []string{
		"GET /user?hold HTTP/1.1\r\nHost: " + apiHost + "\r\n\r\n",
		"POST /repos/a/b/issues?hold HTTP/1.1\r\nHost: " + apiHost + "\r\nContent-Length: 5\r\n\r\nhello",
		"POST /repos/a/b/issues?hold HTTP/1.1\r\nHost: " + apiHost + "\r\nContent-Length: " + strconv.Itoa(len(big)) + "\r\n\r\n" + big,
		"POST /repos/a/b/issues?hold HTTP/1.1\r\nHost: " + apiHost + "\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	} {
		tc, _ := e.rawTunnel(t, apiHost+":443")
		io.WriteString(tc, raw)
		time.Sleep(300 * time.Millisecond)
		_ = tc.Close()
		select {
		case path := <-u.abandoned:
			e.audit.WaitFor(t, "client_closed", func(ev audit.Event) bool {
				return ev.Path == path && ev.Reason == string(contract.CodeClientClosed) && ev.Status == 499
			})
		case <-time.After(4 * time.Second):
			t.Fatalf("%.60q: the upstream still held the request 4 s after the client left", raw)
		}
	}
	// The clients left, not the upstream: no upstream error is counted.
	for _, c := range append(slices.Clone(contract.ProxyCodes), contract.CodeClientClosed) {
		if n := e.metric(t, "aileron_proxy_upstream_errors_total", map[string]string{"code": c.String()}); n != 0 {
			t.Errorf("aileron_proxy_upstream_errors_total{code=%q} = %v after clients left; client_closed is not an upstream error", c, n)
		}
	}
}

// TestSlowUpstreamAnswerWhileWatchingTheClient: an answer later than
// clientWatchAfter reaches a client that stayed, and the connection then
// serves another request (the watch ended cleanly).
func TestSlowUpstreamAnswerWhileWatchingTheClient(t *testing.T) {
	e, _ := newRawUpstreamEnv(t)
	tc, br := e.rawTunnel(t, apiHost+":443")
	for _, path := range []string{"/user?late", "/user"} {
		resp, body := rawRequest(t, tc, br, "GET "+path+" HTTP/1.1\r\nHost: "+apiHost+"\r\n\r\n")
		if resp.StatusCode != http.StatusOK || string(body) != "ok" {
			t.Fatalf("GET %s = %d %q, want 200 ok", path, resp.StatusCode, body)
		}
	}
}

// TestHTTP2StreamResetIsAuditedAsClientClosed: an HTTP/2 client that
// cancels a stream while the upstream works ends the upstream request (its
// context) and the exchange is audited as client_closed (499), not as an
// upstream failure.
func TestHTTP2StreamResetIsAuditedAsClientClosed(t *testing.T) {
	e := newEnv(t)
	gone := make(chan struct{})
	e.handlers.Store("/events", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			close(gone)
		case <-time.After(10 * time.Second):
		}
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://h2.example.test/events", nil)
	if resp, err := e.client(true).Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the request ended with %d, want the client's cancellation", resp.StatusCode)
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream request outlived the client's stream by 5 s")
	}
	e.audit.WaitFor(t, "client_closed", func(ev audit.Event) bool {
		return ev.Path == "/events" && ev.Reason == string(contract.CodeClientClosed) && ev.Status == 499
	})
}

// TestHalfClosedClientGetsClientClosed: a client that shuts down only its
// sending side while the upstream works is taken for gone (as by
// http.Server), and it reads a 499 client_closed rather than an empty 200.
func TestHalfClosedClientGetsClientClosed(t *testing.T) {
	e, u := newRawUpstreamEnv(t)
	tc, br := e.rawTunnel(t, apiHost+":443")
	io.WriteString(tc, "GET /user?hold HTTP/1.1\r\nHost: "+apiHost+"\r\n\r\n")
	time.Sleep(300 * time.Millisecond)
	if err := tc.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the answer after a half close: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 499 || errorOf(t, body).Code != contract.CodeClientClosed {
		t.Fatalf("answer = %d %s, want 499 client_closed", resp.StatusCode, body)
	}
	select {
	case <-u.abandoned:
	case <-time.After(4 * time.Second):
		t.Fatal("the upstream still held the request after the client's half close")
	}
}

// A header timeout under deadlineSlack: the deadline an earlier request
// set on a pooled connection has passed when the next one is sent, and
// must not be kept for it.
func TestShortResponseHeaderTimeoutOnAReusedConnection(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Limits.ResponseHeaderTimeout = 300 * time.Millisecond })
	tc, br := e.rawTunnel(t, apiHost+":443")
	get := "GET /user HTTP/1.1\r\nHost: " + apiHost + "\r\n\r\n"
	if resp, body := rawRequest(t, tc, br, get); resp.StatusCode != http.StatusOK {
		t.Fatalf("first GET = %d %s", resp.StatusCode, body)
	}
	e.expectSeen(t)
	time.Sleep(400 * time.Millisecond) // past the first request's header deadline
	post := "POST /repos/a/b/issues HTTP/1.1\r\nHost: " + apiHost + "\r\nContent-Length: 5\r\n\r\nhello"
	if resp, body := rawRequest(t, tc, br, post); resp.StatusCode != http.StatusOK {
		t.Fatalf("POST 400 ms later on the pooled connection = %d %s, want the upstream's 200", resp.StatusCode, body)
	}
	if n := e.up1Conns.Load(); n != 1 {
		t.Errorf("upstream connections = %d, want 1 (the pooled one reused)", n)
	}
}

// deadlineRecorder records the read deadlines set on it.
type deadlineRecorder struct{ set []time.Time }

func (r *deadlineRecorder) SetReadDeadline(t time.Time) error {
	r.set = append(r.set, t)
	return nil
}

func TestReadDeadlineKeepsOnlyADeadlineAhead(t *testing.T) {
	rec := &deadlineRecorder{}
	d := readDeadline{conn: rec}
	now := time.Unix(1000, 0)
	d.set(now.Add(2*time.Second), now)
	d.set(now.Add(2500*time.Millisecond), now.Add(500*time.Millisecond))  // within the slack, still ahead: kept
	d.set(now.Add(2200*time.Millisecond), now.Add(1950*time.Millisecond)) // about to pass: set
	d.set(now.Add(3300*time.Millisecond), now.Add(3*time.Second))         // passed: set
	d.setExactly(time.Time{})
	d.setExactly(time.Time{}) // already none: no call
	want := []time.Time{now.Add(2 * time.Second), now.Add(2200 * time.Millisecond), now.Add(3300 * time.Millisecond), {}}
	if !slices.Equal(rec.set, want) {
		t.Fatalf("deadlines set = %v, want %v", rec.set, want)
	}
}

// An upstream that sends more than it was asked for: the next answer on
// that connection is already read (a TLS record of its own, in crypto/tls's
// buffer) when the next request is written. That request, held for the
// read of its answer, is never sent: no read happens. It is not sent
// later either, and the connection is not reused.
func TestUpstreamUnaskedAnswerIsNotFollowedByAHeldRequest(t *testing.T) {
	e, u := newRawUpstreamEnv(t)
	tc, br := e.rawTunnel(t, apiHost+":443")
	if resp, body := rawRequest(t, tc, br, "GET /user?extra HTTP/1.1\r\nHost: "+apiHost+"\r\n\r\n"); resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("first GET = %d %q", resp.StatusCode, body)
	}
	// Answered from the unasked-for bytes: that is the upstream's doing.
	_, _ = rawRequest(t, tc, br, "GET /user HTTP/1.1\r\nHost: "+apiHost+"\r\n\r\n")
	if resp, body := rawRequest(t, tc, br, "GET /user HTTP/1.1\r\nHost: "+apiHost+"\r\n\r\n"); resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("third GET = %d %q, want ok from a new connection", resp.StatusCode, body)
	}
	if n := u.conns.Load(); n != 2 {
		t.Errorf("upstream connections = %d, want 2: the one that sent more is not reused", n)
	}
	time.Sleep(1200 * time.Millisecond) // the first connection's wait for more
	if n := u.afterExtra.Load(); n != 0 {
		t.Errorf("the upstream received %d requests on the connection whose next answer was already read; a held request must not be sent", n)
	}
}
