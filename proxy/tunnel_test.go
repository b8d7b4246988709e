package proxy

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
)

func TestAllowedRequestGetsCredentialAndLosesClientHeaders(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		host := apiHost
		if h2 {
			host = h2Host
		}
		t.Run(host, func(t *testing.T) {
			e := newEnv(t)
			req, _ := http.NewRequest(http.MethodGet, "https://"+host+"/repos/acme/widgets/issues?state=open&q=secret+search", nil)
			req.Header.Set("Authorization", clientAuth)
			if !h2 { // HTTP/2 has no Connection header
				req.Header.Set("Connection", "X-Hop")
				req.Header.Set("X-Hop", "must go")
			}
			req.Header.Set("Proxy-Foo", "must go")
			req.Header.Set("X-Aileron-Source", "run_endpoint") // no internal key: ignored and stripped
			req.Header.Set("Accept-Encoding", "gzip")
			req.Header.Set("X-Keep", "kept")
			resp, err := e.client(h2).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d", resp.StatusCode)
			}
			if wantProto := map[bool]int{false: 1, true: 2}[h2]; resp.ProtoMajor != wantProto {
				t.Errorf("client spoke HTTP/%d, want %d", resp.ProtoMajor, wantProto)
			}
			s := e.expectSeen(t)
			if got := s.Header.Get("Authorization"); got != "Bearer "+testToken {
				t.Errorf("upstream Authorization is not the injected credential (len %d)", len(got))
			}
			if got := s.Header.Get("Accept-Encoding"); got != "identity" {
				t.Errorf("upstream Accept-Encoding = %q, want identity for a credentialed operation", got)
			}
			if s.Header.Get("X-Keep") != "kept" || s.Host != host {
				t.Errorf("upstream saw Host %q and X-Keep %q", s.Host, s.Header.Get("X-Keep"))
			}
			if s.RequestURI != "/repos/acme/widgets/issues?state=open&q=secret+search" {
				t.Errorf("upstream RequestURI = %q", s.RequestURI)
			}
			if wantProto := map[bool]int{false: 1, true: 2}[h2]; s.Proto != wantProto {
				t.Errorf("upstream got HTTP/%d, want %d (pooled transport negotiates)", s.Proto, wantProto)
			}
			id := resp.Header.Get(contract.HeaderAuditID)
			if id == "" {
				t.Fatal("no audit id on the proxied response")
			}
			ev := e.audit.WaitFor(t, "proxied", byAuditID(id))
			want := audit.Event{Event: audit.EventProxied, SessionID: e.sess.ID, ConnectorFQN: testFQN, Tool: "api",
				Operation: "issues.list", Method: "GET", Host: host + ":443", Path: "/repos/acme/widgets/issues",
				Status: 200, Decision: "allowed", Reason: "allowed", CredentialKind: "bearer", Source: "proxy"}
			if ev.Event != want.Event || ev.SessionID != want.SessionID || ev.ConnectorFQN != want.ConnectorFQN ||
				ev.Tool != want.Tool || ev.Operation != want.Operation || ev.Host != want.Host || ev.Path != want.Path ||
				ev.Status != want.Status || ev.Decision != want.Decision || ev.CredentialKind != want.CredentialKind ||
				ev.Source != want.Source || ev.BytesOut == 0 {
				t.Errorf("audit event = %+v, want %+v", ev, want)
			}
			wantFields := map[string]string{"repository": "widgets", "state": "open", "q": audit.RedactValue("secret search")}
			if fmt.Sprint(ev.Fields) != fmt.Sprint(wantFields) {
				t.Errorf("audit fields = %v, want %v", ev.Fields, wantFields)
			}
			lines := e.logs.FilterMessage("request proxied").All()
			if len(lines) != 1 || lines[0].Level != zapcore.InfoLevel {
				t.Fatalf("want one Info line \"request proxied\", got %d", len(lines))
			}
			if f := lines[0].ContextMap(); f["decision"] != "allowed" || f["path"] != "/repos/acme/widgets/issues" || f["audit_id"] != id {
				t.Errorf("log fields = %v", f)
			}
		})
	}
}

func TestDeniedOperationExplainsWhatIsAllowed(t *testing.T) {
	e := newEnv(t)
	c := e.client(false)
	tests := []struct {
		name, method, path string
		code               string
	}{
		{"unknown path", "GET", "/admin", string(contract.CodeOperationNotAllowed)},
		{"wrong method", "DELETE", "/user", string(contract.CodeOperationNotAllowed)},
		{"template needs a segment", "GET", "/repos/acme//issues", "path_not_canonical"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, "https://api.example.test"+tc.path, nil)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusForbidden || resp.Header.Get(contract.HeaderDecision) != contract.DecisionDenied {
				t.Fatalf("%s %s = %d (%s), want 403 denied", tc.method, tc.path, resp.StatusCode, resp.Header.Get(contract.HeaderDecision))
			}
			d := errorOf(t, body)
			if string(d.Code) != tc.code || d.Method != tc.method || d.Host != "api.example.test:443" || d.Path != tc.path {
				t.Errorf("error = %+v", d)
			}
			if len(d.AllowedOperations) == 0 || d.Message == "" {
				t.Errorf("denial does not say what is allowed: %+v", d)
			}
			ev := e.audit.WaitFor(t, "denied", byAuditID(resp.Header.Get(contract.HeaderAuditID)))
			if ev.Event != audit.EventDenied || ev.Reason != tc.code || ev.Status != 403 {
				t.Errorf("audit event = %+v", ev)
			}
		})
	}
	e.expectNothingSeen(t)
	n := 0
	for _, l := range e.logs.FilterMessage("request denied").All() {
		if f := l.ContextMap(); l.Level == zapcore.WarnLevel && f["decision"] == "denied" && f["reason"] != "" {
			n++
		}
	}
	if n != len(tests) {
		t.Errorf("want %d Warn denial lines, got %d", len(tests), n)
	}
}

func TestPinningRefusesOtherHosts(t *testing.T) {
	e := newEnv(t)
	tc, br := e.rawTunnel(t, "api.example.test:443")
	tests := []struct {
		name   string
		raw    string
		status int
	}{
		{"Host names another host", "GET /user HTTP/1.1\r\nHost: h2.example.test\r\n\r\n", 421},
		{"Host names another port", "GET /user HTTP/1.1\r\nHost: api.example.test:8443\r\n\r\n", 421},
		{"absolute URL names another host", "GET https://evil.example.test/user HTTP/1.1\r\nHost: api.example.test\r\n\r\n", 421},
		{"absolute URL with another host in Host only", "GET https://api.example.test/user HTTP/1.1\r\nHost: evil.example.test\r\n\r\n", 200},
		{"Host in other case", "GET /user HTTP/1.1\r\nHost: API.Example.TEST\r\n\r\n", 200},
		{"Host with default port", "GET /user HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := rawRequest(t, tc, br, tt.raw)
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d, want %d (%s)", resp.StatusCode, tt.status, body)
			}
			if tt.status == 421 {
				if d := errorOf(t, body); d.Code != contract.CodeMisdirected {
					t.Errorf("code = %q", d.Code)
				}
				e.expectNothingSeen(t)
				return
			}
			if s := e.expectSeen(t); s.Host != "api.example.test" {
				t.Errorf("upstream Host = %q, want the CONNECT host", s.Host)
			}
		})
	}
	if n := e.accepts.Load(); n != 1 {
		t.Errorf("proxy accepted %d connections, want 1 (all on one tunnel)", n)
	}
}

func TestPinningOverHTTP2(t *testing.T) {
	e := newEnv(t)
	c := e.client(true)
	req, _ := http.NewRequest(http.MethodGet, "https://h2.example.test/user", nil)
	req.Host = "api.example.test" // :authority of another host on this connection
	resp, err := c.Do(req)
	wantRefusal(t, resp, err, http.StatusMisdirectedRequest, string(contract.CodeMisdirected))
	e.expectNothingSeen(t)
}

func TestKeepAliveServesSeveralRequestsOnOneTunnel(t *testing.T) {
	e := newEnv(t)
	tc, br := e.rawTunnel(t, "api.example.test:443")
	steps := []struct {
		raw    string
		status int
	}{
		{"GET /user HTTP/1.1\r\nHost: api.example.test\r\n\r\n", 200},
		{"GET /user HTTP/1.1\r\nHost: api.example.test\r\n\r\n", 200},
		{"GET /admin HTTP/1.1\r\nHost: api.example.test\r\n\r\n", 403},
		{"POST /repos/a/b/issues HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: 5\r\n\r\nhello", 200},
		{"POST /admin HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: 5\r\n\r\nhello", 403},
		{"OPTIONS * HTTP/1.1\r\nHost: api.example.test\r\n\r\n", 403}, // decided, not answered by net/http
		{"GET /public HTTP/1.1\r\nHost: api.example.test\r\n\r\n", 200},
	}
	for i, s := range steps {
		resp, body := rawRequest(t, tc, br, s.raw)
		if resp.StatusCode != s.status {
			t.Fatalf("request %d = %d, want %d: %s", i, resp.StatusCode, s.status, body)
		}
	}
	if n := e.accepts.Load(); n != 1 {
		t.Errorf("proxy accepted %d connections, want 1", n)
	}
	if n := e.up1Conns.Load(); n != 1 {
		t.Errorf("the upstream accepted %d connections, want 1 (pooled)", n)
	}
	if got := e.srv.OpenTunnels(e.sess.ID); got != 1 {
		t.Errorf("OpenTunnels = %d, want 1", got)
	}
	if got := e.metric(t, "aileron_proxy_open_tunnels", map[string]string{"mode": "intercept"}); got != 1 {
		t.Errorf("open tunnels gauge = %v, want 1", got)
	}
}

func TestHTTP2StreamsAreDecidedOneByOne(t *testing.T) {
	e := newEnv(t)
	c := e.client(true)
	warm, err := c.Get("https://h2.example.test/public") // one connection, then streams on it
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, warm)
	e.expectSeen(t)
	const n = 24
	var wg sync.WaitGroup
	var mu sync.Mutex
	reused := 0
	statuses := make([]int, n)
	protos := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := "/public"
			if i%2 == 1 {
				path = "/forbidden"
			}
			trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
				if info.Reused {
					mu.Lock()
					reused++
					mu.Unlock()
				}
			}}
			req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, "https://h2.example.test"+path, nil)
			resp, err := c.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			readAll(t, resp)
			statuses[i], protos[i] = resp.StatusCode, resp.ProtoMajor
		}()
	}
	wg.Wait()
	for i := range n {
		want := 200
		if i%2 == 1 {
			want = 403
		}
		if statuses[i] != want || protos[i] != 2 {
			t.Errorf("stream %d: HTTP/%d %d, want HTTP/2 %d", i, protos[i], statuses[i], want)
		}
	}
	if got := e.accepts.Load(); got != 1 {
		t.Errorf("proxy accepted %d connections, want 1 HTTP/2 connection", got)
	}
	if reused != n {
		t.Errorf("%d of %d streams reused the warm connection, want all", reused, n)
	}
	if got := e.metric(t, "aileron_proxy_decisions_total", map[string]string{"result": "deny", "reason": string(contract.CodeOperationNotAllowed)}); got != n/2 {
		t.Errorf("deny decisions = %v, want %d", got, n/2)
	}
	for range n / 2 {
		e.expectSeen(t)
	}
	e.expectNothingSeen(t)
}

func TestTraversalFormsAreRefused(t *testing.T) {
	e := newEnv(t)
	tc, br := e.rawTunnel(t, "api.example.test:443")
	for _, path := range []string{
		"/repos/acme/widgets/../../user",
		"/repos/acme/%2e%2e/issues",
		"/repos/acme/%2E%2E/x/issues",
		"/repos/acme%2Fwidgets/x/issues",
		"/repos/acme%2fx/y/issues",
		"/repos/acme%5Cx/y/issues",
		`/repos/acme\x/y/issues`,
		"/repos/./acme/issues",
		"/repos/acme/widgets/issues/..",
		"/repos/acme/%252e%252e/issues",
	} {
		t.Run(path, func(t *testing.T) {
			resp, body := rawRequest(t, tc, br, "GET "+path+" HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("GET %s = %d, want 403: %s", path, resp.StatusCode, body)
			}
			if d := errorOf(t, body); d.Code != "path_not_canonical" && d.Code != contract.CodeOperationNotAllowed {
				t.Errorf("code = %q", d.Code)
			}
			e.expectNothingSeen(t)
		})
	}
}

func TestCredentialNotConfigured(t *testing.T) {
	e := newEnv(t)
	resp, err := e.client(false).Get("https://api.example.test/keyed")
	d := wantRefusal(t, resp, err, http.StatusForbidden, string(contract.CodeCredentialNotConfigured))
	want := "aileron-proxy credential set " + testFQN + " --kind api_key"
	if !strings.Contains(d.Message, want) || !strings.HasPrefix(d.Command, want) {
		t.Errorf("message %q / command %q do not give %q", d.Message, d.Command, want)
	}
	e.expectNothingSeen(t)
}

func TestRunEndpointHeadersNeedTheInternalKey(t *testing.T) {
	e := newEnv(t)
	args := base64.RawURLEncoding.EncodeToString([]byte(`{"title":"a secret title","labels":["x","y"],"owner":"acme"}`))
	tests := []struct {
		name       string
		key        string
		wantSource string
		wantFields map[string]string
	}{
		{"right key", "internal-key-for-tests", "run_endpoint", map[string]string{
			"repository": "widgets", "title": audit.RedactValue("a secret title"), "labels": `["x","y"]`}},
		{"wrong key", "internal-key-for-tests-not", "proxy", map[string]string{"repository": "widgets"}},
		{"no key", "", "proxy", map[string]string{"repository": "widgets"}},
	}
	c := e.client(false)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, "https://api.example.test/repos/acme/widgets/issues", nil)
			if tc.key != "" {
				req.Header.Set("X-Aileron-Internal", tc.key)
			}
			req.Header.Set("X-Aileron-Source", "run_endpoint")
			req.Header.Set("X-Aileron-Audit-Args", args)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			e.expectSeen(t) // the upstream handler fails the test on any X-Aileron-* header
			ev := e.audit.WaitFor(t, "proxied", byAuditID(resp.Header.Get(contract.HeaderAuditID)))
			if ev.Source != tc.wantSource {
				t.Errorf("source = %q, want %q", ev.Source, tc.wantSource)
			}
			got, _ := json.Marshal(ev.Fields)
			want, _ := json.Marshal(tc.wantFields)
			if string(got) != string(want) {
				t.Errorf("fields = %s, want %s", got, want)
			}
		})
	}
}

func TestSessionExpiryAndEnd(t *testing.T) {
	e := newEnv(t)
	tc, br := e.rawTunnel(t, "api.example.test:443")
	if resp, _ := rawRequest(t, tc, br, "GET /public HTTP/1.1\r\nHost: api.example.test\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatalf("before expiry: %d", resp.StatusCode)
	}
	e.expectSeen(t)
	e.clock.Add(int64(2 * time.Hour))
	resp, body := rawRequest(t, tc, br, "GET /public HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
	if resp.StatusCode != http.StatusForbidden || errorOf(t, body).Code != contract.CodeSessionExpired {
		t.Fatalf("after expiry on an open tunnel: %d %s", resp.StatusCode, body)
	}
	_, cr := e.connect(t, "api.example.test:443", true)
	if cr.StatusCode != http.StatusProxyAuthRequired {
		t.Errorf("CONNECT after expiry = %d, want 407", cr.StatusCode)
	}
	e.expectNothingSeen(t)
}

func TestCloseSessionClosesItsTunnels(t *testing.T) {
	e := newEnv(t)
	tc, br := e.rawTunnel(t, "api.example.test:443")
	if n := e.srv.CloseSession(e.sess.ID); n != 1 {
		t.Fatalf("CloseSession closed %d tunnels, want 1", n)
	}
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the tunnel is still open after CloseSession")
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.srv.OpenTunnels(e.sess.ID) != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := e.srv.OpenTunnels(e.sess.ID); got != 0 {
		t.Errorf("OpenTunnels = %d after CloseSession", got)
	}
}

func TestSessionExpiryClosesTunnels(t *testing.T) {
	e := newEnv(t)
	// Move the proxy's clock to 300ms before the session expires.
	e.clock.Store(int64(e.sess.ExpiresAt.Sub(time.Now()) - 300*time.Millisecond))
	pass, resp := e.connect(t, passHost+":443", true)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("passthrough CONNECT = %d", resp.StatusCode)
	}
	defer pass.Close()
	inter, br := e.rawTunnel(t, "api.example.test:443")
	closedAtExpiry := func(name string, setDeadline func(time.Time) error, read func([]byte) (int, error)) {
		_ = setDeadline(time.Now().Add(10 * time.Second))
		start := time.Now()
		if _, err := read(make([]byte, 1)); err == nil {
			t.Errorf("%s tunnel: read data after expiry, want the tunnel closed", name)
		} else if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s tunnel: closed after %v, want at expiry (300ms): %v", name, d, err)
		}
	}
	closedAtExpiry("passthrough", pass.SetDeadline, pass.Read)
	closedAtExpiry("intercepted", inter.SetDeadline, br.Read)
	deadline := time.Now().Add(5 * time.Second)
	for e.srv.OpenTunnels(e.sess.ID) != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := e.srv.OpenTunnels(e.sess.ID); got != 0 {
		t.Errorf("OpenTunnels = %d after expiry, want 0", got)
	}
}
