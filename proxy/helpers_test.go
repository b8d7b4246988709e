package proxy

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/credentials"
	"github.com/aileron-dev/aileron-proxy/internal/testkit"
	"github.com/aileron-dev/aileron-proxy/policy"
	"github.com/aileron-dev/aileron-proxy/session"
)

// testToken is the injected credential; it contains characters that change
// under URL-encoding so the scrubber's encoded forms are exercised.
const (
	testToken     = "tok+CANARY/8f3a9c=1d2e"
	testFQN       = "github://acme/aileron-connector-test"
	apiHost       = "api.example.test"
	h2Host        = "h2.example.test"
	passHost      = "www.pass.example.test"
	plainPassHost = "plain.pass.example.test"
	deadHost      = "dead.example.test"
	slowHost      = "slow.example.test"
	clientAuth    = "Bearer client-own-token"
)

const testSpec = `{
  "schema_version": "aileron.connector.v1",
  "connector": {"fqn": "github://acme/aileron-connector-test", "version": "1.0.0"},
  "tools": [
    {"name": "api", "operations": [
      {"name": "user.get", "method": "GET", "path": "/user", "hosts": ["api.example.test", "h2.example.test", "localhost", "dead.example.test", "slow.example.test"], "credential": "bearer"},
      {"name": "user.head", "method": "HEAD", "path": "/user", "hosts": ["api.example.test", "h2.example.test"], "credential": "bearer"},
      {"name": "issues.list", "method": "GET", "path": "/repos/{owner}/{repo}/issues", "hosts": ["api.example.test", "h2.example.test"], "credential": "bearer",
       "inputs": [{"name": "owner", "required": true}, {"name": "repo", "required": true}, {"name": "state"}, {"name": "q"},
                  {"name": "title"}, {"name": "labels", "type": "array"}],
       "audit": [{"name": "repository", "source": "path.repo"}, {"name": "state", "source": "query.state"},
                 {"name": "q", "source": "query.q", "redact": true}, {"name": "title", "source": "args.title", "redact": true},
                 {"name": "labels", "source": "args.labels"}]},
      {"name": "issues.create", "method": "POST", "path": "/repos/{owner}/{repo}/issues", "hosts": ["api.example.test", "h2.example.test"], "credential": "bearer",
       "inputs": [{"name": "owner", "required": true}, {"name": "repo", "required": true}]},
      {"name": "echo", "method": "GET", "path": "/echo", "hosts": ["api.example.test", "h2.example.test"], "credential": "bearer"},
      {"name": "echo.gzip", "method": "GET", "path": "/echo-gzip", "hosts": ["api.example.test"], "credential": "bearer"},
      {"name": "events", "method": "GET", "path": "/events", "hosts": ["api.example.test", "h2.example.test"], "credential": "bearer"},
      {"name": "trailers", "method": "GET", "path": "/trailers", "hosts": ["api.example.test", "h2.example.test"]},
      {"name": "big", "method": "GET", "path": "/big", "hosts": ["api.example.test"], "credential": "bearer"},
      {"name": "upload", "method": "PUT", "path": "/upload", "hosts": ["api.example.test"]},
      {"name": "public", "method": "GET", "path": "/public", "hosts": ["api.example.test", "h2.example.test"]},
      {"name": "deploy", "method": "POST", "path": "/deploy", "hosts": ["api.example.test"], "credential": "bearer", "approval": "required"},
      {"name": "keyed", "method": "GET", "path": "/keyed", "hosts": ["api.example.test"], "credential": "api_key"}
    ]}
  ]
}`

func byAuditID(id string) func(audit.Event) bool {
	return func(e audit.Event) bool { return e.AuditID == id }
}

// fakeApprover hands every held request to the test and waits for its
// outcome.
type fakeApprover struct {
	requests chan ApprovalRequest
	outcomes chan ApprovalOutcome
}

func (a *fakeApprover) Await(ctx context.Context, r ApprovalRequest) ApprovalOutcome {
	select {
	case a.requests <- r:
	case <-ctx.Done():
		return ApprovalDenied
	}
	select {
	case o := <-a.outcomes:
		return o
	case <-ctx.Done():
		return ApprovalDenied
	}
}

// sessionAuth adapts the real registry, as the daemon does.
type sessionAuth struct{ r *session.Registry }

func (a sessionAuth) AuthenticateProxy(id, secret string) (Session, error) {
	s, err := a.r.AuthenticateProxy(id, secret)
	if err != nil {
		return Session{}, err
	}
	return Session{ID: s.ID, Scope: s.Scope, CA: s.CA, ExpiresAt: s.ExpiresAt, Learn: s.LearnGlobs}, nil
}

// testPKI is an upstream CA and a leaf for every test host.
type testPKI struct {
	root *x509.Certificate
	leaf tls.Certificate
}

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	rootKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rootTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test upstream root"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	rootDER, err := x509.CreateCertificate(rand.Reader, rootTmpl, rootTmpl, &rootKey.PublicKey, rootKey)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := x509.ParseCertificate(rootDER)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "test upstream"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		DNSNames:    []string{"*.example.test", "*.pass.example.test", "localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, root, &leafKey.PublicKey, rootKey)
	if err != nil {
		t.Fatal(err)
	}
	return &testPKI{root: root, leaf: tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}}
}

func (p *testPKI) pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.root)
	return pool
}

// upstreamSeen is what an upstream received, captured inside its handler.
type upstreamSeen struct {
	Proto      int
	Method     string
	Host       string
	RequestURI string
	Header     http.Header
	Body       int64
	// SHA256 is the hex digest of the body received.
	SHA256 string
}

// env is a proxy with a session, a credential and TLS upstreams on loopback.
type env struct {
	t        testing.TB
	srv      *Server
	addr     string
	accepts  *atomic.Int64
	sessions *session.Registry
	sess     *session.Session
	secret   string
	caPool   *x509.CertPool
	caFile   string
	audit    *testkit.Recorder
	logs     *observer.ObservedLogs
	reg      *prometheus.Registry
	approver *fakeApprover
	pki      *testPKI
	up1      *httptest.Server // HTTP/1.1 only: api.example.test, localhost
	up1Conns atomic.Int64     // connections the HTTP/1.1 upstream accepted
	up2      *httptest.Server // HTTP/2: h2.example.test
	seen     chan upstreamSeen
	handlers sync.Map // path -> http.HandlerFunc overriding the default
	clock    *atomic.Int64
	// direct disables the upstream's proxy invariants, for the Direct
	// benchmarks whose client talks to the upstream itself.
	direct atomic.Bool
}

type envOption func(*Config)

func newEnv(t testing.TB, opts ...envOption) *env {
	t.Helper()
	e := &env{t: t, audit: testkit.NewRecorder(), reg: prometheus.NewRegistry(), pki: newTestPKI(t),
		seen: make(chan upstreamSeen, 1024), accepts: new(atomic.Int64), clock: new(atomic.Int64),
		approver: &fakeApprover{requests: make(chan ApprovalRequest, 4), outcomes: make(chan ApprovalOutcome, 4)}}

	e.up1 = httptest.NewUnstartedServer(http.HandlerFunc(e.upstream))
	e.up1.TLS = &tls.Config{Certificates: []tls.Certificate{e.pki.leaf}}
	e.up1.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			e.up1Conns.Add(1)
		}
	}
	e.up1.StartTLS()
	t.Cleanup(e.up1.Close)
	e.up2 = httptest.NewUnstartedServer(http.HandlerFunc(e.upstream))
	e.up2.EnableHTTP2 = true
	e.up2.TLS = &tls.Config{Certificates: []tls.Certificate{e.pki.leaf}}
	e.up2.StartTLS()
	t.Cleanup(e.up2.Close)
	plain := httptest.NewServer(http.HandlerFunc(e.upstream))
	t.Cleanup(plain.Close)

	spec, _, err := policy.ParseSpec([]byte(testSpec))
	if err != nil {
		t.Fatalf("ParseSpec: %v", err)
	}
	snap, err := policy.Compile([]policy.Connector{{Spec: spec, Hash: "sha256:test"}})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	e.sessions = session.NewRegistry(session.RegistryConfig{Now: e.now})
	e.useSession(t, snap)

	file := &credentials.File{}
	file.Set(credentials.Binding{FQN: testFQN, Kind: credentials.Kind("bearer"),
		Source: credentials.Source{Type: credentials.SourceStored, Value: credentials.NewValue(testToken)}})
	resolver, err := credentials.NewResolver(credentials.ResolverConfig{File: file})
	if err != nil {
		t.Fatalf("NewResolver: %v", err)
	}

	core, logs := observer.New(zapcore.DebugLevel)
	e.logs = logs
	dead := testkit.DeadAddr(t)
	cfg := Config{
		Logger:      zap.New(core),
		Sessions:    sessionAuth{e.sessions},
		Policy:      func() *policy.Snapshot { return snap },
		Credentials: func() CredentialSource { return resolver },
		Audit:       e.audit,
		Approver:    e.approver,
		Registerer:  e.reg,
		InternalKey: "internal-key-for-tests",
		Passthrough: []string{"*.pass.example.test"},
		Resolve: map[string]string{
			apiHost + ":443":       addrOf(e.up1),
			h2Host + ":443":        addrOf(e.up2),
			passHost + ":443":      addrOf(e.up1),
			plainPassHost + ":80":  addrOf(plain),
			deadHost + ":443":      dead,
			slowHost + ":443":      addrOf(e.up1),
			"unused.example.test":  "127.0.0.1:9",
			"LOUD.Example.Test:80": "127.0.0.1:9",
		},
		SystemRoots:   x509.NewCertPool(),
		UpstreamRoots: []*x509.Certificate{e.pki.root},
		Now:           e.now,
	}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.srv = srv
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = ln.Addr().String()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(&countingListener{Listener: ln, n: e.accepts}) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Errorf("Serve did not return after Shutdown")
		}
		e.assertNoSecretLeaked()
	})
	return e
}

// useSession creates a session of snap and makes it the env's: its proxy
// credentials, CA pool and CA file.
func (e *env) useSession(t testing.TB, snap *policy.Snapshot) {
	t.Helper()
	sess, secrets, err := e.sessions.Create(session.CreateOptions{Snapshot: snap, TTL: time.Hour})
	if err != nil {
		t.Fatalf("creating session: %v", err)
	}
	e.sess, e.secret = sess, secrets.ProxySecret
	e.caPool = x509.NewCertPool()
	e.caPool.AppendCertsFromPEM(sess.CAPEM)
	e.caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(e.caFile, sess.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
}

// now is the wall clock plus the offset a test advanced it by.
func (e *env) now() time.Time { return time.Now().Add(time.Duration(e.clock.Load())) }

func addrOf(s *httptest.Server) string { return s.Listener.Addr().String() }

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// upstream is the handler of every test upstream. It checks the invariants
// of what the proxy sends, then serves the path.
func (e *env) upstream(w http.ResponseWriter, r *http.Request) {
	for k := range r.Header {
		if e.direct.Load() {
			break
		}
		if strings.HasPrefix(k, "X-Aileron-") || strings.HasPrefix(k, "Proxy-") || hopHeaders[k] && k != "Te" ||
			k == "X-Hop" {
			e.t.Errorf("upstream received %s on %s %s", k, r.Method, r.URL.Path)
		}
	}
	if got := r.Header.Get("Authorization"); got == clientAuth {
		e.t.Errorf("upstream received the client's own Authorization on %s", r.URL.Path)
	}
	digest := sha256.New()
	n, _ := io.Copy(digest, r.Body)
	if r.URL.Path != "/big" {
		e.seen <- upstreamSeen{Proto: r.ProtoMajor, Method: r.Method, Host: r.Host, RequestURI: r.RequestURI, Header: r.Header.Clone(), Body: n,
			SHA256: hex.EncodeToString(digest.Sum(nil))}
	}
	if h, ok := e.handlers.Load(r.URL.Path); ok {
		h.(http.HandlerFunc)(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"path": r.URL.Path, "proto": r.ProtoMajor})
}

// expectSeen returns what the upstream received next.
func (e *env) expectSeen(t testing.TB) upstreamSeen {
	t.Helper()
	select {
	case s := <-e.seen:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream received nothing")
		return upstreamSeen{}
	}
}

// expectNothingSeen asserts the upstream received no request.
func (e *env) expectNothingSeen(t testing.TB) {
	t.Helper()
	select {
	case s := <-e.seen:
		t.Fatalf("the upstream received %s %s; it must not have", s.Method, s.RequestURI)
	default:
	}
}

func (e *env) proxyURL(withUser bool) *url.URL {
	u := &url.URL{Scheme: "http", Host: e.addr}
	if withUser {
		u.User = url.UserPassword(e.sess.ID, e.secret)
	}
	return u
}

// client is a Go client that trusts only the session CA.
func (e *env) client(h2 bool) *http.Client {
	tr := &http.Transport{
		Proxy:             http.ProxyURL(e.proxyURL(true)),
		TLSClientConfig:   &tls.Config{RootCAs: e.caPool},
		ForceAttemptHTTP2: h2,
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// rawTunnel opens a CONNECT tunnel by hand and returns the TLS client
// conn and its reader.
func (e *env) rawTunnel(t testing.TB, target string, alpn ...string) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	c, resp := e.connect(t, target, true)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s = %d, want 200", target, resp.StatusCode)
	}
	host, _, _ := net.SplitHostPort(target)
	if len(alpn) == 0 {
		alpn = []string{"http/1.1"}
	}
	tc := tls.Client(c, &tls.Config{RootCAs: e.caPool, ServerName: host, NextProtos: alpn})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS handshake in tunnel: %v", err)
	}
	t.Cleanup(func() { _ = tc.Close() })
	return tc, bufio.NewReader(tc)
}

func dialProxy(e *env) (net.Conn, error) { return net.DialTimeout("tcp", e.addr, 5*time.Second) }

// connect sends CONNECT target and returns the conn and the response.
func (e *env) connect(t testing.TB, target string, auth bool) (net.Conn, *http.Response) {
	t.Helper()
	c, err := net.DialTimeout("tcp", e.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if auth {
		req += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(e.sess.ID+":"+e.secret)) + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("reading CONNECT response: %v", err)
	}
	if resp.StatusCode == http.StatusOK && br.Buffered() > 0 {
		t.Fatalf("bytes after the CONNECT response")
	}
	return c, resp
}

// rawRequest writes one HTTP/1.1 request verbatim and reads the response.
func rawRequest(t testing.TB, c net.Conn, br *bufio.Reader, raw string) (*http.Response, []byte) {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatalf("writing request: %v", err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading response to %q: %v", strings.SplitN(raw, "\r\n", 2)[0], err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	_ = resp.Body.Close()
	return resp, body
}

// errorOf decodes the proxy's JSON error.
func errorOf(t testing.TB, body []byte) errorDetail {
	t.Helper()
	var eb errorBody
	if err := json.Unmarshal(body, &eb); err != nil {
		t.Fatalf("error body %q is not JSON: %v", body, err)
	}
	return eb.Error
}

// wantRefusal fails t unless the request got a response with status and a
// proxy error of code; it returns the error.
func wantRefusal(t testing.TB, resp *http.Response, err error, status int, code string) errorDetail {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	if resp.StatusCode != status {
		t.Fatalf("status = %d, want %d: %s", resp.StatusCode, status, body)
	}
	d := errorOf(t, body)
	if string(d.Code) != code {
		t.Fatalf("code = %q, want %q: %s", d.Code, code, body)
	}
	return d
}

// protoCases are the two ways a client reaches an intercepted host: HTTP/1.1
// to the HTTP/1.1-only upstream, HTTP/2 to the HTTP/2 one.
var protoCases = []struct {
	name string
	h2   bool
	host string
}{{"http1", false, apiHost}, {"http2", true, h2Host}}

func readAll(t testing.TB, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return b
}

// assertNoSecretLeaked checks logs and audit events for every form of the
// token.
func (e *env) assertNoSecretLeaked() {
	forms := []string{testToken, base64.StdEncoding.EncodeToString([]byte(testToken)), url.QueryEscape(testToken), e.secret}
	for _, entry := range e.logs.All() {
		line := entry.Message + fmt.Sprint(entry.ContextMap())
		for _, f := range forms {
			if strings.Contains(line, f) {
				e.t.Errorf("log line %q contains a secret", entry.Message)
			}
		}
	}
	for _, ev := range e.audit.All() {
		b, _ := json.Marshal(ev)
		for _, f := range forms {
			if strings.Contains(string(b), f) {
				e.t.Errorf("audit event %s contains a secret", b)
			}
		}
	}
}

// metric reads a gauge or counter value, or a histogram's sample count, from
// the registry.
func (e *env) metric(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			switch {
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

// isTimeout reports whether err is a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
