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
				u.serve(tls.Server(c, cfg))
			}()
		}
	}()
	return u
}

// serve answers one request by its path, then closes the connection 50 ms
// later without having said so: the proxy holds it as idle meanwhile.
func (u *rawUpstream) serve(c *tls.Conn) {
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

func TestRawConn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
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
	c := newRawConn(d)
	if _, ok := c.(*rawConn); !ok {
		t.Fatalf("newRawConn(%T) = %T", d, c)
	}
	peer := <-accepted
	defer peer.Close()

	big := make([]byte, 8<<20) // more than the socket buffers: Write must wait and finish
	for i := range big {
		big[i] = byte(i)
	}
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(peer); got <- b }()
	if n, err := c.Write(big); n != len(big) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	_ = c.(*rawConn).CloseWrite()
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
	d, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	c = newRawConn(d)
	defer c.Close()
	if n, err := c.Read(buf); n != 0 || err != io.EOF {
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
