package proxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
)

func TestEchoedCredentialIsScrubbed(t *testing.T) {
	forms := []string{testToken, base64.StdEncoding.EncodeToString([]byte(testToken)),
		base64.URLEncoding.EncodeToString([]byte(testToken)), url.QueryEscape(testToken)}
	filler := strings.Repeat("0123456789abcdef", 40<<10/16) // 40 KiB: past the small-body path
	for _, tc := range []struct {
		name string
		h2   bool
		url  string
	}{
		{"http1 small body", false, "https://api.example.test/echo"},
		{"http2 small body", true, "https://h2.example.test/echo"},
		{"http1 streamed unknown length", false, "https://api.example.test/echo?stream=1"},
		{"http2 streamed unknown length", true, "https://h2.example.test/echo?stream=1"},
		{"http1 large known length", false, "https://api.example.test/echo?large=1"},
		{"gzip despite identity", false, "https://api.example.test/echo-gzip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.handlers.Store("/echo", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				auth := r.Header.Get("Authorization")
				w.Header().Set("X-Echo", auth)
				body := fmt.Sprintf("raw=%s\nb64=%s\nb64url=%s\nurl=%s\nauth=%s\n", testToken,
					base64.StdEncoding.EncodeToString([]byte(testToken)), base64.URLEncoding.EncodeToString([]byte(testToken)),
					url.QueryEscape(testToken), auth)
				switch {
				case r.URL.Query().Has("stream"):
					// Unknown length, flushed mid-secret so matches straddle reads.
					_, _ = io.WriteString(w, filler+body[:9])
					w.(http.Flusher).Flush()
					_, _ = io.WriteString(w, body[9:])
				case r.URL.Query().Has("large"):
					w.Header().Set("Content-Length", strconv.Itoa(len(filler)+len(body)))
					_, _ = io.WriteString(w, filler+body)
				default:
					_, _ = io.WriteString(w, body)
				}
			}))
			e.handlers.Store("/echo-gzip", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Encoding", "gzip")
				w.Header().Set("X-Echo", r.Header.Get("Authorization"))
				zw := gzip.NewWriter(w)
				fmt.Fprintf(zw, "raw=%s\nb64=%s\n", testToken, base64.StdEncoding.EncodeToString([]byte(testToken)))
				_ = zw.Close()
			}))
			resp, err := e.client(tc.h2).Get(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			body := string(readAll(t, resp))
			if resp.StatusCode != 200 {
				t.Fatalf("status = %d", resp.StatusCode)
			}
			for _, f := range forms {
				if strings.Contains(body, f) {
					t.Errorf("body contains the secret form %q:\n%s", f, body)
				}
			}
			if !strings.Contains(body, "raw="+strings.Repeat("*", len(testToken))) {
				t.Errorf("body does not show a same-length mask:\n%s", body)
			}
			echo := resp.Header.Get("X-Echo")
			if strings.Contains(echo, testToken) || len(echo) != len("Bearer "+testToken) {
				t.Errorf("X-Echo = %q: not scrubbed to the same length", echo)
			}
			if resp.Header.Get("Content-Encoding") != "" {
				t.Errorf("Content-Encoding %q survived decoding", resp.Header.Get("Content-Encoding"))
			}
		})
	}
}

func TestHeadKeepsContentLengthWithoutBody(t *testing.T) {
	for _, tc := range protoCases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.handlers.Store("/user", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "1000")
			}))
			resp, err := e.client(tc.h2).Head("https://" + tc.host + "/user")
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			if resp.StatusCode != 200 || resp.ContentLength != 1000 {
				t.Errorf("HEAD via %s = %d with Content-Length %d, want 200 and 1000", tc.host, resp.StatusCode, resp.ContentLength)
			}
			if s := e.expectSeen(t); s.Method != http.MethodHead {
				t.Errorf("upstream saw %s", s.Method)
			}
		})
	}
}

func TestUnknownEncodingOnCredentialedOperationIsRefused(t *testing.T) {
	e := newEnv(t)
	c := e.client(false)
	// The refusal quotes Content-Encoding, so one that echoes the injected
	// credential must reach the client scrubbed.
	for _, echo := range []bool{false, true} {
		e.handlers.Store("/echo", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ce := "br"
			if echo {
				ce = "x-" + r.Header.Get("Authorization")
			}
			w.Header().Set("Content-Encoding", ce)
			_, _ = w.Write([]byte("opaque"))
		}))
		resp, err := c.Get("https://api.example.test/echo")
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusBadGateway || errorOf(t, body).Code != contract.CodeUpstreamEncoding {
			t.Fatalf("echo %v: status %d body %s", echo, resp.StatusCode, body)
		}
		if strings.Contains(string(body), testToken) {
			t.Errorf("the refusal carries the injected credential: %s", body)
		}
		e.expectSeen(t)
	}
}

func TestSSEIsFlushedEventByEvent(t *testing.T) {
	for _, tc := range protoCases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			next := make(chan struct{})
			e.handlers.Store("/events", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				for i := range 3 {
					fmt.Fprintf(w, "data: event %d\n\n", i)
					w.(http.Flusher).Flush()
					select {
					case <-next:
					case <-r.Context().Done():
						return
					}
				}
			}))
			resp, err := e.client(tc.h2).Get("https://" + tc.host + "/events")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			for i := range 3 {
				got := make(chan string, 1)
				go func() {
					line, _ := br.ReadString('\n')
					_, _ = br.ReadString('\n')
					got <- line
				}()
				select {
				case line := <-got:
					if want := fmt.Sprintf("data: event %d\n", i); line != want {
						t.Fatalf("event %d = %q, want %q", i, line, want)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("event %d did not arrive before the upstream sent the next one: the proxy buffers", i)
				}
				next <- struct{}{}
			}
		})
	}
}

func TestTrailersAreKept(t *testing.T) {
	for _, tc := range protoCases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.handlers.Store("/trailers", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Trailer", "X-Checksum")
				w.WriteHeader(200)
				_, _ = io.WriteString(w, "body")
				w.Header().Set("X-Checksum", "abc123")
			}))
			resp, err := e.client(tc.h2).Get("https://" + tc.host + "/trailers")
			if err != nil {
				t.Fatal(err)
			}
			if b := readAll(t, resp); string(b) != "body" {
				t.Errorf("body = %q", b)
			}
			if got := resp.Trailer.Get("X-Checksum"); got != "abc123" {
				t.Errorf("trailer X-Checksum = %q, want abc123", got)
			}
		})
	}
}

// patternReader generates n bytes without storing them.
type patternReader struct{ left int64 }

func (p *patternReader) Read(b []byte) (int, error) {
	if p.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > p.left {
		b = b[:p.left]
	}
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	p.left -= int64(len(b))
	return len(b), nil
}

func TestLargeDownloadStreamsWithBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 256 MiB")
	}
	const size = int64(256 << 20)
	e := newEnv(t)
	e.handlers.Store("/big", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		_, _ = io.CopyBuffer(w, &patternReader{left: size}, make([]byte, 64<<10))
	}))
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > peak.Load() {
					peak.Store(ms.HeapInuse)
				}
			}
		}
	}()
	resp, err := e.client(false).Get("https://api.example.test/big")
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.CopyBuffer(io.Discard, resp.Body, make([]byte, 64<<10))
	resp.Body.Close()
	close(stop)
	<-sampled
	if err != nil || n != size {
		t.Fatalf("downloaded %d bytes (%v), want %d", n, err, size)
	}
	growth := int64(peak.Load()) - int64(before.HeapInuse)
	t.Logf("downloaded %d MiB; peak heap in use grew by %.1f MiB", size>>20, float64(growth)/(1<<20))
	if growth > 32<<20 {
		t.Errorf("heap in use grew by %d MiB while streaming, want < 32 MiB", growth>>20)
	}
	ev := e.audit.WaitFor(t, "proxied /big", byAuditID(resp.Header.Get(contract.HeaderAuditID)))
	if ev.BytesOut != size {
		t.Errorf("audit bytes_out = %d, want %d", ev.BytesOut, size)
	}
}

func TestLargeUploadStreams(t *testing.T) {
	e := newEnv(t)
	const size = int64(64 << 20)
	req, _ := http.NewRequest(http.MethodPut, "https://api.example.test/upload", &patternReader{left: size})
	req.ContentLength = -1 // chunked: the proxy must stream it, not size it
	resp, err := e.client(false).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if s := e.expectSeen(t); s.Body != size {
		t.Errorf("upstream received %d bytes, want %d", s.Body, size)
	}
	ev := e.audit.WaitFor(t, "proxied /upload", byAuditID(resp.Header.Get(contract.HeaderAuditID)))
	if ev.BytesIn != size {
		t.Errorf("audit bytes_in = %d, want %d", ev.BytesIn, size)
	}
}

func TestUpstreamFailures(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Limits.ResponseHeaderTimeout = 300 * time.Millisecond })
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	e.handlers.Store("/user", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host == slowHost {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		_, _ = io.WriteString(w, "ok")
	}))
	c := e.client(false)
	tests := []struct {
		host   string
		status int
		code   string
	}{
		{"localhost", http.StatusBadGateway, string(contract.CodeUpstreamAddressRefused)},
		{deadHost, http.StatusBadGateway, string(contract.CodeUpstreamUnreachable)},
		{slowHost, http.StatusGatewayTimeout, string(contract.CodeUpstreamTimeout)},
	}
	for _, tc := range tests {
		t.Run(tc.host, func(t *testing.T) {
			resp, err := c.Get("https://" + tc.host + "/user")
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp)
			d := errorOf(t, body)
			if resp.StatusCode != tc.status || string(d.Code) != tc.code {
				t.Fatalf("status %d code %q, want %d %q (%s)", resp.StatusCode, d.Code, tc.status, tc.code, d.Message)
			}
			if resp.Header.Get(contract.HeaderDecision) != contract.DecisionError {
				t.Errorf("%s = %q, want error", contract.HeaderDecision, resp.Header.Get(contract.HeaderDecision))
			}
			ev := e.audit.WaitFor(t, "upstream failure", byAuditID(resp.Header.Get(contract.HeaderAuditID)))
			if ev.Status != tc.status || ev.Reason != tc.code {
				t.Errorf("audit event = %+v", ev)
			}
		})
	}
}

func TestApprovalHoldsTheRequest(t *testing.T) {
	e := newEnv(t)
	c := e.client(false)
	for _, tc := range []struct {
		outcome ApprovalOutcome
		status  int
		code    string
	}{
		{ApprovalApproved, 200, ""},
		{ApprovalDenied, 403, string(contract.CodeApprovalDenied)},
		{ApprovalTimedOut, 403, string(contract.CodeApprovalTimeout)},
	} {
		t.Run(tc.outcome.String(), func(t *testing.T) {
			type result struct {
				resp *http.Response
				body []byte
				err  error
			}
			done := make(chan result, 1)
			go func() {
				resp, err := c.Post("https://api.example.test/deploy", "application/json", strings.NewReader(`{"env":"prod"}`))
				if err != nil {
					done <- result{err: err}
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				done <- result{resp, b, err}
			}()
			var held ApprovalRequest
			select {
			case held = <-e.approver.requests:
			case <-time.After(10 * time.Second):
				t.Fatal("the request was not held for approval")
			}
			if held.SessionID != e.sess.ID || held.Operation != "deploy" || held.Method != "POST" ||
				held.Host != "api.example.test:443" || held.Path != "/deploy" || held.ConnectorFQN != testFQN {
				t.Errorf("approval request = %+v", held)
			}
			e.expectNothingSeen(t) // held, not forwarded
			select {
			case r := <-done:
				t.Fatalf("the client got an answer before the decision: %+v", r)
			default:
			}
			e.approver.outcomes <- tc.outcome
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.resp.StatusCode != tc.status {
				t.Fatalf("status = %d, want %d: %s", r.resp.StatusCode, tc.status, r.body)
			}
			if tc.code != "" {
				if d := errorOf(t, r.body); string(d.Code) != tc.code {
					t.Errorf("code = %q, want %q", d.Code, tc.code)
				}
				e.expectNothingSeen(t)
				return
			}
			s := e.expectSeen(t)
			if s.Body != int64(len(`{"env":"prod"}`)) || s.Header.Get("Authorization") != "Bearer "+testToken {
				t.Errorf("approved request reached the upstream with body %d and wrong credential", s.Body)
			}
			ev := e.audit.WaitFor(t, "approved", byAuditID(r.resp.Header.Get(contract.HeaderAuditID)))
			if ev.Reason != "approved" {
				t.Errorf("audit reason = %q, want approved", ev.Reason)
			}
		})
	}
}

func TestApprovalWithoutApproverFailsClosed(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Approver = nil })
	resp, err := e.client(false).Post("https://api.example.test/deploy", "application/json", strings.NewReader(`{}`))
	wantRefusal(t, resp, err, http.StatusForbidden, string(contract.CodeApprovalDenied))
	e.expectNothingSeen(t)
}

func TestShutdownDrainsInFlightRequests(t *testing.T) {
	e := newEnv(t)
	entered := make(chan struct{})
	release := make(chan struct{})
	e.handlers.Store("/public", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		_, _ = io.WriteString(w, "finished")
	}))
	got := make(chan string, 1)
	go func() {
		resp, err := e.client(true).Get("https://h2.example.test/public")
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- fmt.Sprintf("%d %s", resp.StatusCode, b)
	}()
	<-entered
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- e.srv.Shutdown(ctx)
	}()
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) while a request was in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if r := <-got; r != "200 finished" {
		t.Errorf("in-flight request got %q, want 200 finished", r)
	}
	select {
	case err := <-shut:
		if err != nil {
			t.Errorf("Shutdown = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return after the last request finished")
	}
	if _, err := dialProxy(e); err == nil {
		t.Error("the proxy still accepts connections after Shutdown")
	}
}

func TestShutdownIsBoundedByContext(t *testing.T) {
	e := newEnv(t)
	e.rawTunnel(t, "api.example.test:443") // an idle tunnel: closed by Shutdown
	e.handlers.Store("/public", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	go func() { _, _ = e.client(false).Get("https://api.example.test/public") }()
	e.expectSeen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := e.srv.Shutdown(ctx)
	if err == nil {
		t.Fatal("Shutdown with a stuck request returned nil")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Shutdown took %s despite a 300ms context", d)
	}
}

func TestMetricsAreExported(t *testing.T) {
	e := newEnv(t)
	c := e.client(false)
	for _, p := range []string{"/user", "/admin"} {
		resp, err := c.Get("https://api.example.test" + p)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
	}
	if v := e.metric(t, "aileron_proxy_decisions_total", map[string]string{"result": "allow", "reason": "allowed"}); v != 1 {
		t.Errorf("allow decisions = %v, want 1", v)
	}
	if v := e.metric(t, "aileron_proxy_decisions_total", map[string]string{"result": "deny", "reason": string(contract.CodeOperationNotAllowed)}); v != 1 {
		t.Errorf("deny decisions = %v, want 1", v)
	}
	if v := e.metric(t, "aileron_proxy_upstream_latency_seconds", nil); v != 1 {
		t.Errorf("upstream latency samples = %v, want 1", v)
	}
	if v := e.metric(t, "aileron_proxy_leaf_lookups_total", map[string]string{"result": "ok"}); v != 1 {
		t.Errorf("leaf lookups = %v, want 1", v)
	}
	if v := e.metric(t, "aileron_proxy_open_tunnels", map[string]string{"mode": "intercept"}); v != 1 {
		t.Errorf("open tunnels = %v, want 1", v)
	}
}

func TestTruncatedUpstreamBodyAbortsTheResponse(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			e := newEnv(t)
			e.handlers.Store("/big", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "1000000")
				_, _ = w.Write(bytes.Repeat([]byte("a"), 100000))
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler) // the upstream dies mid-body
			}))
			resp, err := e.client(h2).Get("https://api.example.test/big")
			if err != nil {
				t.Fatal(err)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil {
				t.Fatalf("read %d bytes and a clean end; a truncated upstream body must abort the client's response", n)
			}
			ev := e.audit.WaitFor(t, "stream aborted", func(ev audit.Event) bool { return ev.Reason == reasonStreamAborted })
			if ev.Decision != contract.DecisionAllowed || ev.Path != "/big" || ev.BytesOut >= 1000000 {
				t.Errorf("audit event = %+v, want allowed /big with fewer bytes out than declared", ev)
			}
			if v := e.metric(t, "aileron_proxy_decisions_total", map[string]string{"result": "allow", "reason": reasonStreamAborted}); v != 1 {
				t.Errorf("stream_aborted decisions = %v, want 1", v)
			}
		})
	}
}
