package proxy

import (
	"bufio"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
)

func TestConnectWithoutValidCredentialGets407(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name string
		auth string
	}{
		{"no header", ""},
		{"wrong secret", "Basic " + base64.StdEncoding.EncodeToString([]byte(e.sess.ID+":wrong"))},
		{"unknown session", "Basic " + base64.StdEncoding.EncodeToString([]byte("ses_000000000000000000000000:"+e.secret))},
		{"not base64", "Basic !!!"},
		{"bearer scheme", "Bearer " + e.secret},
		{"empty secret", "Basic " + base64.StdEncoding.EncodeToString([]byte(e.sess.ID+":"))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := dialProxy(e)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			req := "CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n"
			if tc.auth != "" {
				req += "Proxy-Authorization: " + tc.auth + "\r\n"
			}
			_, _ = io.WriteString(c, req+"\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusProxyAuthRequired {
				t.Fatalf("CONNECT with %q = %d, want 407", tc.auth, resp.StatusCode)
			}
			if got := resp.Header.Get("Proxy-Authenticate"); got != `Basic realm="aileron-proxy"` {
				t.Errorf("Proxy-Authenticate = %q", got)
			}
			if got := errorOf(t, body).Code; got != contract.CodeProxyAuthRequired {
				t.Errorf("code = %q, want %q", got, string(contract.CodeProxyAuthRequired))
			}
			id := resp.Header.Get(contract.HeaderAuditID)
			ev := e.audit.WaitFor(t, "for the 407", byAuditID(id))
			if ev.Event != audit.EventDenied || ev.Status != 407 || ev.Reason != string(contract.CodeProxyAuthRequired) || ev.SessionID != "" {
				t.Errorf("audit event = %+v", ev)
			}
		})
	}
	e.expectNothingSeen(t)
}

func TestConnectToHostOutsideScopeIsRefused(t *testing.T) {
	e := newEnv(t)
	for _, target := range []string{"evil.example.test:443", "api.example.test:8443", "api.example.test.evil:443"} {
		t.Run(target, func(t *testing.T) {
			_, resp := e.connect(t, target, true)
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("CONNECT %s = %d, want 403", target, resp.StatusCode)
			}
			if resp.Header.Get(contract.HeaderDecision) != contract.DecisionDenied {
				t.Errorf("%s = %q, want denied", contract.HeaderDecision, resp.Header.Get(contract.HeaderDecision))
			}
			d := errorOf(t, body)
			if d.Code != contract.CodeHostNotAllowed || !slices.Contains(d.AllowedHosts, "api.example.test:443") {
				t.Errorf("error = %+v, want host_not_allowed listing api.example.test:443", d)
			}
			if !strings.Contains(d.Message, target) {
				t.Errorf("message %q does not name %s", d.Message, target)
			}
			id := resp.Header.Get(contract.HeaderAuditID)
			ev := e.audit.WaitFor(t, "for the refused CONNECT", byAuditID(id))
			if ev.Event != audit.EventDenied || ev.SessionID != e.sess.ID || ev.Host != target || ev.Method != http.MethodConnect {
				t.Errorf("audit event = %+v", ev)
			}
			n := 0
			for _, l := range e.logs.FilterMessage("connect refused").All() {
				if f := l.ContextMap(); f["audit_id"] == id {
					n++
					if l.Level != zapcore.WarnLevel || f["decision"] != contract.DecisionDenied || f["reason"] != string(contract.CodeHostNotAllowed) ||
						f["host"] != target || f["session_id"] != e.sess.ID || fmt.Sprint(f["status"]) != "403" {
						t.Errorf("log line = %v %v", l.Level, f)
					}
				}
			}
			if n != 1 {
				t.Errorf("want one \"connect refused\" line for audit id %s, got %d", id, n)
			}
		})
	}
}

func TestTunnelLimitPerSessionGets429(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Limits.MaxTunnelsPerSession = 2; c.Limits.RetryAfter = 3 * time.Second })
	e.rawTunnel(t, "api.example.test:443")
	e.rawTunnel(t, "h2.example.test:443")
	_, resp := e.connect(t, "api.example.test:443", true)
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third CONNECT = %d, want 429", resp.StatusCode)
	}
	if got := resp.Header.Get("Retry-After"); got != "3" {
		t.Errorf("Retry-After = %q, want 3", got)
	}
	if got := errorOf(t, body).Code; got != contract.CodeTooManyTunnels {
		t.Errorf("code = %q", got)
	}
	if got := e.srv.OpenTunnels(e.sess.ID); got != 2 {
		t.Errorf("OpenTunnels = %d, want 2", got)
	}
}

func TestSNINamingAnotherHostFailsHandshake(t *testing.T) {
	e := newEnv(t)
	c, resp := e.connect(t, "api.example.test:443", true)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT = %d", resp.StatusCode)
	}
	tc := tls.Client(c, &tls.Config{RootCAs: e.caPool, ServerName: "h2.example.test"})
	if err := tc.Handshake(); err == nil {
		t.Fatal("handshake with SNI h2.example.test in a tunnel to api.example.test succeeded")
	}
}

func TestCertificateIsTheSessionLeafForTheConnectHost(t *testing.T) {
	e := newEnv(t)
	tc, _ := e.rawTunnel(t, "h2.example.test:443", "h2", "http/1.1")
	st := tc.ConnectionState()
	if st.NegotiatedProtocol != "h2" {
		t.Errorf("ALPN = %q, want h2", st.NegotiatedProtocol)
	}
	leaf := st.PeerCertificates[0]
	if err := leaf.VerifyHostname("h2.example.test"); err != nil {
		t.Errorf("leaf does not name the CONNECT host: %v", err)
	}
	if leaf.Issuer.String() != e.sess.CA.Certificate().Subject.String() {
		t.Errorf("leaf issuer = %s, want the session CA", leaf.Issuer)
	}
}

func TestPlainHTTP(t *testing.T) {
	e := newEnv(t)
	c := e.client(false)
	t.Run("passthrough host is forwarded without credentials", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, "http://plain.pass.example.test/anything?x=1", nil)
		req.Header.Set("X-Aileron-Source", "run_endpoint")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status = %d", resp.StatusCode)
		}
		s := e.expectSeen(t)
		if s.Header.Get("Authorization") != "" || s.RequestURI != "/anything?x=1" {
			t.Errorf("upstream saw %+v", s)
		}
		ev := e.audit.WaitFor(t, "for the plain passthrough", byAuditID(resp.Header.Get(contract.HeaderAuditID)))
		if ev.Event != audit.EventPassthrough || ev.Path != "/anything" || ev.Status != 200 {
			t.Errorf("audit event = %+v", ev)
		}
	})
	t.Run("trailing dot and case are normalized before forwarding", func(t *testing.T) {
		// Before internal/hostport the plain path kept the trailing dot in
		// the target, so the audit host and the dialled name differed from
		// the passthrough entry it matched.
		resp, err := c.Get("http://Plain.Pass.Example.Test./dot")
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status = %d", resp.StatusCode)
		}
		e.expectSeen(t)
		ev := e.audit.WaitFor(t, "for the plain passthrough", byAuditID(resp.Header.Get(contract.HeaderAuditID)))
		if ev.Host != "plain.pass.example.test:80" {
			t.Errorf("audit host = %q, want %q", ev.Host, "plain.pass.example.test:80")
		}
	})
	t.Run("intercepted host over http is refused", func(t *testing.T) {
		resp, err := c.Get("http://api.example.test/user")
		wantRefusal(t, resp, err, http.StatusForbidden, string(contract.CodePlainHTTPNotAllowed))
	})
	t.Run("other host is refused", func(t *testing.T) {
		resp, err := c.Get("http://evil.example.test/")
		wantRefusal(t, resp, err, http.StatusForbidden, string(contract.CodeHostNotAllowed))
	})
	t.Run("without credential 407", func(t *testing.T) {
		tr := &http.Transport{Proxy: http.ProxyURL(e.proxyURL(false))}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Get("http://plain.pass.example.test/")
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		if resp.StatusCode != http.StatusProxyAuthRequired || resp.Header.Get("Proxy-Authenticate") == "" {
			t.Fatalf("status = %d", resp.StatusCode)
		}
	})
	t.Run("origin-form is not a proxy request", func(t *testing.T) {
		tr := &http.Transport{} // no environment proxy
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Get("http://" + e.addr + "/")
		wantRefusal(t, resp, err, http.StatusBadRequest, string(contract.CodeNotAProxyRequest))
	})
	e.expectNothingSeen(t)
}

func TestPassthroughTunnelIsBlind(t *testing.T) {
	e := newEnv(t)
	tr := &http.Transport{
		Proxy:           http.ProxyURL(e.proxyURL(true)),
		TLSClientConfig: &tls.Config{RootCAs: e.pki.pool()}, // the upstream's own root, not the session CA
	}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, "https://www.pass.example.test/not-in-any-spec", nil)
	req.Header.Set("Authorization", "Bearer passthrough-own")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status = %d", resp.StatusCode)
	}
	if resp.TLS.PeerCertificates[0].Issuer.CommonName != "test upstream root" {
		t.Errorf("passthrough presented %s, want the upstream's own certificate", resp.TLS.PeerCertificates[0].Issuer)
	}
	s := e.expectSeen(t)
	if got := s.Header.Get("Authorization"); got != "Bearer passthrough-own" {
		t.Errorf("upstream Authorization = %q; passthrough must neither strip nor inject", got)
	}
	if resp.Header.Get(contract.HeaderAuditID) != "" {
		t.Errorf("a blind tunnel cannot add headers, yet %s is set", contract.HeaderAuditID)
	}
	tr.CloseIdleConnections()
	ev := e.audit.WaitFor(t, "passthrough", func(ev audit.Event) bool { return ev.Event == audit.EventPassthrough })
	if ev.Host != "www.pass.example.test:443" || ev.SessionID != e.sess.ID || ev.BytesIn == 0 || ev.BytesOut == 0 {
		t.Errorf("audit event = %+v", ev)
	}
	// The line follows the audit event.
	lines := e.logs.FilterMessage("passthrough tunnel closed").All()
	for deadline := time.Now().Add(5 * time.Second); len(lines) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		lines = e.logs.FilterMessage("passthrough tunnel closed").All()
	}
	if len(lines) != 1 || lines[0].Level != zapcore.InfoLevel {
		t.Fatalf("want one Info line \"passthrough tunnel closed\", got %d", len(lines))
	}
	if f := lines[0].ContextMap(); f["audit_id"] != ev.AuditID || f["decision"] != contract.DecisionAllowed || fmt.Sprint(f["bytes_in"]) != fmt.Sprint(ev.BytesIn) {
		t.Errorf("log fields = %v, want those of audit event %+v", f, ev)
	}
}
