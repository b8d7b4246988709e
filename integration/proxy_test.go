package integration

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// testSpec is the connector every data-plane test installs.
const testSpec = `{
  "schema_version": "aileron.connector.v1",
  "connector": {"fqn": "local://test/echo", "version": "1.0.0"},
  "tools": [{
    "name": "testapi",
    "description": "Loopback test API",
    "operations": [
      {"name": "items.list", "method": "GET", "path": "/v1/items", "hosts": ["api.example.test"], "credential": "bearer",
       "idempotency": "idempotent", "inputs": [{"name": "q"}, {"name": "limit", "type": "integer"}, {"name": "tag", "type": "array"}],
       "audit": [{"name": "query", "source": "query.q", "redact": true}]},
      {"name": "items.get", "method": "GET", "path": "/v1/items/{id}", "hosts": ["api.example.test"], "credential": "bearer",
       "inputs": [{"name": "id", "required": true}], "audit": [{"name": "item", "source": "path.id"}]},
      {"name": "items.create", "method": "POST", "path": "/v1/items", "hosts": ["api.example.test"], "credential": "bearer",
       "idempotency": "not_idempotent", "inputs": [{"name": "name", "required": true}, {"name": "count", "type": "integer"}]},
      {"name": "items.send", "method": "POST", "path": "/v1/send", "hosts": ["api.example.test"], "credential": "bearer",
       "approval": "required", "inputs": [{"name": "to", "required": true}], "audit": [{"name": "to", "source": "args.to"}]},
      {"name": "token.echo", "method": "GET", "path": "/v1/echo-token", "hosts": ["api.example.test"], "credential": "bearer"},
      {"name": "download", "method": "GET", "path": "/v1/download/{size}", "hosts": ["api.example.test"], "credential": "bearer",
       "inputs": [{"name": "size", "type": "integer", "required": true}]},
      {"name": "events", "method": "GET", "path": "/v1/events", "hosts": ["api.example.test"], "credential": "bearer"}
    ]
  }]
}`

// env is one running data plane: upstream, serve, an installed connector
// with the canary credential, and a session.
type env struct {
	home string
	up   *upstream
	d    *daemon
	s    sessionInfo
}

func upstreamHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/items", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusCreated)
		}
		fmt.Fprintf(w, `{"items":[{"id":"1"}],"proto":%q}`, r.Proto)
	})
	mux.HandleFunc("/v1/items/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.PathValue("id") == "404" {
			w.WriteHeader(http.StatusNotFound)
		}
		fmt.Fprintf(w, `{"id":%q}`, r.PathValue("id"))
	})
	mux.HandleFunc("/v1/send", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"sent":true}`)
	})
	mux.HandleFunc("/v1/echo-token", func(w http.ResponseWriter, r *http.Request) {
		// A hostile or careless upstream that reflects the credential.
		auth := r.Header.Get("Authorization")
		tok := strings.TrimPrefix(auth, "Bearer ")
		w.Header().Set("X-Echo", auth)
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "raw=%s\nb64=%s\nurl=%s\n", tok, b64(tok), url.QueryEscape(tok))
	})
	mux.HandleFunc("/v1/download/{size}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.ParseInt(r.PathValue("size"), 10, 64)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		buf := make([]byte, 64<<10)
		for i := range buf {
			buf[i] = byte('a' + i%26)
		}
		for n > 0 {
			k := int64(len(buf))
			if n < k {
				k = n
			}
			if _, err := w.Write(buf[:k]); err != nil {
				return
			}
			n -= k
		}
	})
	mux.HandleFunc("/v1/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := 0; i < 3; i++ {
			fmt.Fprintf(w, "data: event %d\n\n", i)
			_ = rc.Flush()
			time.Sleep(500 * time.Millisecond)
		}
	})
	return mux
}

func newEnv(t *testing.T, serveFlags ...string) *env {
	t.Helper()
	home := t.TempDir()
	up := newUpstream(t, []string{"api.example.test", "pass.example.test"}, upstreamHandler())
	spec := filepath.Join(t.TempDir(), "echo.aileron.connector.v1.json")
	if err := os.WriteFile(spec, []byte(testSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, home, "", "connector", "install", spec)
	mustCLI(t, home, canary+"\n", "credential", "set", "local://test/echo", "--kind", "bearer", "--stdin")
	flags := append([]string{"--resolve", "api.example.test:443=" + up.addr, "--upstream-ca", up.certFile}, serveFlags...)
	d := startServe(t, home, nil, flags...)
	s := createSession(t, home)
	e := &env{home: home, up: up, d: d, s: s}
	t.Cleanup(func() { e.assertNoCanary(t) })
	return e
}

// assertNoCanary scans everything a sandbox or an operator could read.
func (e *env) assertNoCanary(t *testing.T) {
	t.Helper()
	forms := testkit.SecretForms(canary)
	for _, f := range forms {
		if strings.Contains(e.d.stderr.String(), f) {
			t.Errorf("serve's log contains the credential (as %q)", f)
		}
	}
	_ = filepath.Walk(e.home, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || filepath.Base(p) == "credentials.json" {
			return nil
		}
		raw, _ := os.ReadFile(p)
		for _, f := range forms {
			if strings.Contains(string(raw), f) {
				t.Errorf("%s contains the credential (as %q)", p, f)
			}
		}
		return nil
	})
}

// curl runs curl through the session's proxy trusting only the session CA.
func (e *env) curl(t *testing.T, args ...string) (body string, code int) {
	t.Helper()
	testkit.RequireTool(t, "curl")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	full := append([]string{"-sS", "--proxy", e.s.ProxyURL, "--cacert", e.s.CAFile, "-w", "\n%{http_code}"}, args...)
	cmd := exec.CommandContext(ctx, "curl", full...)
	cmd.Env = testkit.CleanEnv()
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("curl: %v", err)
	}
	s := string(out)
	if ee != nil {
		s += string(ee.Stderr)
	}
	if strings.Contains(s, canary) {
		t.Errorf("curl received the credential: %s", redactCanary(s))
	}
	if ee != nil {
		return s, -ee.ExitCode()
	}
	i := strings.LastIndex(s, "\n")
	code, _ = strconv.Atoi(s[i+1:])
	return s[:i], code
}

// goClient is a Go client using the session proxy and only the session CA.
func (e *env) goClient(t *testing.T, h2 bool) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(e.s.CAPEM)) {
		t.Fatal("ca_pem holds no certificate")
	}
	pu, err := url.Parse(e.s.ProxyURL)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: h2}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}
}

func decodeError(t *testing.T, body string) map[string]any {
	t.Helper()
	var v struct {
		Error map[string]any `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.Error == nil {
		t.Fatalf("body %q is not an error envelope: %v", body, err)
	}
	return v.Error
}

func TestProxyAllowsAndInjects(t *testing.T) {
	e := newEnv(t)
	for _, proto := range []string{"--http1.1", "--http2"} {
		t.Run(proto, func(t *testing.T) {
			body, code := e.curl(t, proto, "-H", "Authorization: Bearer client-supplied", "-H", "Connection: keep-alive, X-Hop",
				"-H", "X-Hop: 1", "https://api.example.test/v1/items?q=secret-query&limit=5")
			if code != 200 {
				t.Fatalf("GET /v1/items = %d %s", code, body)
			}
			got := e.up.last(t)
			if a := got.Header.Get("Authorization"); a != "Bearer "+canary {
				t.Errorf("upstream Authorization = %q, want the injected credential", redactCanary(a))
			}
			// Over HTTP/2 curl drops the Connection header itself, so X-Hop
			// is an ordinary header there.
			if (proto == "--http1.1" && got.Header.Get("X-Hop") != "") || got.Header.Get("Proxy-Authorization") != "" || got.Header.Get("Connection") != "" {
				t.Errorf("hop-by-hop or proxy headers reached the upstream: %v", got.Header)
			}
			if got.RawQuery != "q=secret-query&limit=5" {
				t.Errorf("upstream query = %q", got.RawQuery)
			}
		})
	}
	ev := waitAudit(t, e.home, map[string]any{"event": "connector.proxy.proxied", "operation": "items.list"})
	if ev["session_id"] != e.s.ID || ev["credential_kind"] != "bearer" || ev["path"] != "/v1/items" {
		t.Errorf("proxied audit event = %v", ev)
	}
	if f, _ := ev["fields"].(map[string]any); f == nil || !strings.HasPrefix(fmt.Sprint(f["query"]), "sha256:") {
		t.Errorf("audit fields = %v, want the redacted query", ev["fields"])
	}
	raw, _ := os.ReadFile(filepath.Join(e.home, "audit", "audit.jsonl"))
	if strings.Contains(string(raw), "secret-query") || strings.Contains(string(raw), "client-supplied") {
		t.Errorf("the audit log holds a query value or a header value")
	}

	resp, err := http.Get(e.d.APIURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"aileron_proxy_decisions_total", "aileron_proxy_open_tunnels",
		"aileron_ca_leaves_issued_total", "aileron_ca_leaf_cache_hits_total", "aileron_proxy_upstream_latency_seconds"} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, secret := range []string{canary, e.proxySecret(t), e.s.APIToken, e.d.Admin} {
		if strings.Contains(string(metrics), secret) {
			t.Errorf("/metrics exposes a secret")
		}
	}
}

// redactCanary hides the credential, in each of its encodings, from text a
// test logs or reports.
func redactCanary(s string) string {
	for _, f := range testkit.SecretForms(canary) {
		s = strings.ReplaceAll(s, f, "<canary>")
	}
	return s
}

func TestProxyGoClientHTTP1AndHTTP2(t *testing.T) {
	e := newEnv(t)
	for _, h2 := range []bool{false, true} {
		c := e.goClient(t, h2)
		for i := 0; i < 3; i++ { // keep-alive: several requests, one tunnel
			resp, err := c.Get("https://api.example.test/v1/items/" + strconv.Itoa(i))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(body), fmt.Sprintf(`"id":"%d"`, i)) {
				t.Fatalf("h2=%v GET item %d = %d %s", h2, i, resp.StatusCode, body)
			}
			if wantProto := map[bool]int{false: 1, true: 2}[h2]; resp.ProtoMajor != wantProto {
				t.Errorf("client spoke HTTP/%d, want HTTP/%d", resp.ProtoMajor, wantProto)
			}
		}
	}
	ev := waitAudit(t, e.home, map[string]any{"event": "connector.proxy.proxied", "operation": "items.get"})
	if f, _ := ev["fields"].(map[string]any); f == nil || f["item"] == nil {
		t.Errorf("audit fields = %v, want path.id recorded as item", ev["fields"])
	}
}

func TestProxyRefusals(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name     string
		args     []string
		code     int
		errCode  string
		audit    map[string]any
		upstream bool
	}{
		{"disallowed path", []string{"https://api.example.test/v1/admin"}, 403, "operation_not_allowed",
			map[string]any{"event": "connector.proxy.denied", "path": "/v1/admin"}, false},
		{"disallowed method", []string{"-X", "DELETE", "https://api.example.test/v1/items/1"}, 403, "operation_not_allowed",
			map[string]any{"event": "connector.proxy.denied", "method": "DELETE"}, false},
		{"traversal", []string{"--path-as-is", "https://api.example.test/v1/items/../admin"}, 403, "",
			map[string]any{"event": "connector.proxy.denied", "reason": "path_not_canonical"}, false},
		{"encoded slash", []string{"https://api.example.test/v1/items/a%2Fb"}, 403, "",
			map[string]any{"event": "connector.proxy.denied", "reason": "path_not_canonical"}, false},
		{"host pinning", []string{"-H", "Host: evil.example.test", "https://api.example.test/v1/items"}, 421, "misdirected_request",
			nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.up.requests())
			body, code := e.curl(t, append([]string{"--http1.1"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("status = %d, want %d; body %s", code, tc.code, body)
			}
			ee := decodeError(t, body)
			if tc.errCode != "" && ee["code"] != tc.errCode {
				t.Errorf("error code = %v, want %s (%v)", ee["code"], tc.errCode, ee)
			}
			if msg, _ := ee["message"].(string); msg == "" {
				t.Errorf("refusal has no message for the agent: %v", ee)
			}
			if n := len(e.up.requests()); n != before {
				t.Errorf("a refused request reached the upstream (%d new)", n-before)
			}
			if tc.audit != nil {
				waitAudit(t, e.home, tc.audit)
			}
		})
	}
}

func TestProxyDeniedListsAllowedOperations(t *testing.T) {
	e := newEnv(t)
	body, code := e.curl(t, "https://api.example.test/v1/nope")
	if code != 403 {
		t.Fatalf("status %d", code)
	}
	ee := decodeError(t, body)
	ops := fmt.Sprint(ee["allowed_operations"])
	if !strings.Contains(ops, "GET /v1/items") || ee["method"] != "GET" || ee["host"] == nil || ee["path"] != "/v1/nope" {
		t.Errorf("denial = %v", ee)
	}
}

func TestProxyConnectToDisallowedHost(t *testing.T) {
	e := newEnv(t)
	c := e.rawProxyConn(t)
	defer c.Close()
	fmt.Fprintf(c, "CONNECT other.example.test:443 HTTP/1.1\r\nHost: other.example.test:443\r\nProxy-Authorization: Basic %s\r\n\r\n",
		b64(e.s.ID+":"+e.proxySecret(t)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 403 || resp.Header.Get("X-Aileron-Decision") != "denied" {
		t.Fatalf("CONNECT other host = %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if msg, _ := decodeError(t, string(body))["message"].(string); msg == "" {
		t.Errorf("denied CONNECT has no message for the agent: %s", body)
	}
	waitAudit(t, e.home, map[string]any{"event": "connector.proxy.denied", "host": "other.example.test:443"})
}

func TestProxyRequiresProxyCredential(t *testing.T) {
	e := newEnv(t)
	for name, auth := range map[string]string{
		"none":         "",
		"wrong secret": "Proxy-Authorization: Basic " + b64(e.s.ID+":wrong") + "\r\n",
		"admin token":  "Proxy-Authorization: Basic " + b64(e.s.ID+":"+e.d.Admin) + "\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			c := e.rawProxyConn(t)
			defer c.Close()
			fmt.Fprintf(c, "CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n%s\r\n", auth)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 407 || !strings.Contains(resp.Header.Get("Proxy-Authenticate"), `Basic realm="aileron-proxy"`) {
				t.Fatalf("CONNECT without a valid credential = %d %v", resp.StatusCode, resp.Header)
			}
		})
	}
}

func (e *env) rawProxyConn(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", e.d.ProxyAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return c
}

func (e *env) proxySecret(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(e.s.ProxyURL)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := u.User.Password()
	return p
}

func TestProxyScrubsEchoedCredential(t *testing.T) {
	e := newEnv(t)
	body, code := e.curl(t, "-i", "https://api.example.test/v1/echo-token")
	if code != 200 {
		t.Fatalf("status %d %s", code, body)
	}
	// curl() already fails the test if the canary arrived in any form it
	// checks; check the encoded forms explicitly too.
	for _, form := range []string{canary, b64(canary), url.QueryEscape(canary)} {
		if strings.Contains(body, form) {
			t.Errorf("response carries the credential (form %q)", form)
		}
	}
	if !strings.Contains(body, "raw=*") {
		t.Errorf("scrubbed body = %q, want masked values", body)
	}
}

func TestProxyStreamsServerSentEvents(t *testing.T) {
	e := newEnv(t)
	c := e.goClient(t, false)
	// Warm the tunnel (CONNECT, TLS, leaf) so the timed request is only the
	// request itself.
	warm, err := c.Get("https://api.example.test/v1/items")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, warm.Body)
	warm.Body.Close()
	// Timed from before the request: a proxy that held the whole response,
	// headers included, fails as surely as one that held only the body.
	start := time.Now()
	resp, err := c.Get("https://api.example.test/v1/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "data: event 0\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	// The upstream takes 1.5s to finish; the first event must arrive well
	// before, or the proxy buffered the stream.
	if d := time.Since(start); d > time.Second {
		t.Errorf("first event took %v: the response was buffered", d)
	}
}

func TestProxyPassthrough(t *testing.T) {
	home := t.TempDir()
	up := newUpstream(t, []string{"pass.example.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "auth=%q", r.Header.Get("Authorization"))
	}))
	spec := filepath.Join(t.TempDir(), "echo.json")
	if err := os.WriteFile(spec, []byte(testSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, home, "", "connector", "install", spec)
	startServe(t, home, nil, "--passthrough", "*.example.test", "--resolve", "pass.example.test:443="+up.addr)
	s := createSession(t, home)
	testkit.RequireTool(t, "curl")
	// The client talks TLS with the upstream itself: it must trust the
	// upstream's certificate, not the session CA.
	cmd := exec.Command("curl", "-sS", "--proxy", s.ProxyURL, "--cacert", up.certFile, "https://pass.example.test/x")
	cmd.Env = testkit.CleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != `auth=""` {
		t.Fatalf("passthrough curl = %q, %v", out, err)
	}
	waitAudit(t, home, map[string]any{"event": "connector.proxy.passthrough", "host": "pass.example.test:443"})
}

func TestProxyPython(t *testing.T) {
	e := newEnv(t)
	py := testkit.RequireTool(t, "python3")
	script := `
import json, ssl, sys, urllib.request
ctx = ssl.create_default_context(cafile=sys.argv[2])
ctx.verify_flags |= ssl.VERIFY_X509_STRICT
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"https": sys.argv[1]}), urllib.request.HTTPSHandler(context=ctx))
print(json.load(opener.open("https://api.example.test/v1/items/7", timeout=30))["id"])
`
	cmd := exec.Command(py, "-c", script, e.s.ProxyURL, e.s.CAFile)
	cmd.Env = testkit.CleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "7" {
		t.Fatalf("python3 through the proxy: %v\n%s", err, out)
	}
}

func TestProxyLargeDownloadFlatMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("1 GiB download skipped with -short")
	}
	e := newEnv(t)
	before := rssKiB(t, e.d.PID, "VmRSS")
	const size = 1 << 30
	testkit.RequireTool(t, "curl")
	cmd := exec.Command("curl", "-sS", "--proxy", e.s.ProxyURL, "--cacert", e.s.CAFile, "-o", "/dev/null",
		"-w", "%{http_code} %{size_download}", "https://api.example.test/v1/download/"+strconv.Itoa(size))
	cmd.Env = testkit.CleanEnv()
	out, err := cmd.Output()
	if err != nil || string(out) != "200 "+strconv.Itoa(size) {
		t.Fatalf("1 GiB download = %q, %v", out, err)
	}
	peak := rssKiB(t, e.d.PID, "VmHWM")
	if grow := peak - before; grow > 64<<10 {
		t.Errorf("serve's peak RSS grew by %d MiB over a 1 GiB download; the body was buffered", grow>>10)
	}
	t.Logf("serve RSS before %d KiB, peak %d KiB", before, peak)
}

// rssKiB reads a memory field (VmRSS, VmHWM) of pid from /proc.
func rssKiB(t *testing.T, pid int, field string) int {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, field+":") {
			n, _ := strconv.Atoi(strings.Fields(line)[1])
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
