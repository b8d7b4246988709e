package api

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/aileron-dev/aileron-proxy/approval"
	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/credentials"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/internal/testkit"
	"github.com/aileron-dev/aileron-proxy/internal/testkit/specs"
	"github.com/aileron-dev/aileron-proxy/policy"
	"github.com/aileron-dev/aileron-proxy/proxy"
	"github.com/aileron-dev/aileron-proxy/session"
)

const (
	fqnGH    = "github://acme/conn-gh"
	fqnOther = "github://acme/conn-other"
	hostGH   = "api.test.example"
	hostOth  = "other.test.example"
	// canary is the upstream credential; it must never appear in an API
	// response, a log line or an audit event.
	canary         = "canary-secret-0123456789abcdef"
	adminToken     = "admin-token-for-tests-0123456789"
	internalKey    = "internal-key-for-tests-0123456789"
	smallResponses = 4096
)

const specGH = `{
  "schema_version": "aileron.connector.v1",
  "connector": {"fqn": "github://acme/conn-gh"},
  "tools": [{"name": "gh", "operations": [
    {"name": "issues.list", "method": "GET", "path": "/repos/{owner}/{repo}/issues", "hosts": ["api.test.example"],
     "idempotency": "idempotent", "credential": "bearer",
     "inputs": [
       {"name": "owner", "type": "string", "required": true},
       {"name": "repo", "type": "string", "required": true},
       {"name": "state", "type": "string"},
       {"name": "labels", "type": "array"},
       {"name": "per_page", "type": "integer"},
       {"name": "since_id", "type": "integer"},
       {"name": "q", "type": "string"}
     ],
     "audit": [
       {"name": "repository", "source": "path.repo"},
       {"name": "search", "source": "args.q", "redact": true},
       {"name": "state_arg", "source": "args.state"}
     ]},
    {"name": "issues.create", "method": "POST", "path": "/repos/{owner}/{repo}/issues", "hosts": ["api.test.example"],
     "idempotency": "not_idempotent", "credential": "bearer",
     "inputs": [
       {"name": "owner", "type": "string", "required": true},
       {"name": "repo", "type": "string", "required": true},
       {"name": "title", "type": "string", "required": true},
       {"name": "labels", "type": "array"},
       {"name": "count", "type": "integer"},
       {"name": "ratio", "type": "number"},
       {"name": "draft", "type": "boolean"},
       {"name": "meta", "type": "object"}
     ]},
    {"name": "issues.delete", "method": "DELETE", "path": "/repos/{owner}/{repo}/issues/{number}", "hosts": ["api.test.example"],
     "idempotency": "idempotent", "approval": "required", "credential": "bearer",
     "inputs": [
       {"name": "owner", "type": "string", "required": true},
       {"name": "repo", "type": "string", "required": true},
       {"name": "number", "type": "integer", "required": true}
     ],
     "audit": [{"name": "issue", "source": "path.number"}]},
    {"name": "flaky.get", "method": "GET", "path": "/flaky/get", "hosts": ["api.test.example"], "idempotency": "idempotent"},
    {"name": "flaky.post", "method": "POST", "path": "/flaky/post", "hosts": ["api.test.example"], "idempotency": "not_idempotent"},
    {"name": "big.get", "method": "GET", "path": "/big", "hosts": ["api.test.example"]},
    {"name": "bin.get", "method": "GET", "path": "/bin", "hosts": ["api.test.example"]},
    {"name": "text.get", "method": "GET", "path": "/text", "hosts": ["api.test.example"]},
    {"name": "search", "method": "GET", "path": "/search", "hosts": ["api.test.example"],
     "inputs": [{"name": "filter", "type": "object"}]},
    {"name": "local.only", "summary": "not proxyable: no method, path or hosts"}
  ]}]
}`

const specOther = `{
  "schema_version": "aileron.connector.v1",
  "connector": {"fqn": "github://acme/conn-other"},
  "tools": [{"name": "other", "operations": [
    {"name": "ping", "method": "GET", "path": "/ping", "hosts": ["other.test.example"], "idempotency": "idempotent"},
    {"name": "secure", "method": "GET", "path": "/secure", "hosts": ["other.test.example"], "credential": "api_key"}
  ]}]
}`

// memAudit is an audit.Recorder that keeps events in memory.
type memAudit struct {
	mu     sync.Mutex
	events []audit.Event
	ch     chan audit.Event
}

func newMemAudit() *memAudit { return &memAudit{ch: make(chan audit.Event, 1024)} }

func (m *memAudit) Record(e audit.Event) {
	if e.AuditID == "" {
		e.AuditID = audit.NewID()
	}
	m.mu.Lock()
	m.events = append(m.events, e)
	m.mu.Unlock()
	select {
	case m.ch <- e:
	default:
	}
}

func (m *memAudit) all() []audit.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.events)
}

func (m *memAudit) byName(name string) []audit.Event {
	var out []audit.Event
	for _, e := range m.all() {
		if e.Event == name {
			out = append(out, e)
		}
	}
	return out
}

// waitFor waits (bounded) for an event named name and returns it.
func (m *memAudit) waitFor(t *testing.T, name string) audit.Event {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case e := <-m.ch:
			if e.Event == name {
				return e
			}
		case <-deadline:
			t.Fatalf("no %s audit event within 10s; have %+v", name, m.all())
			return audit.Event{}
		}
	}
}

// harness is an API server (and optionally a real proxy) on loopback.
type harness struct {
	t        *testing.T
	srv      *Server
	url      string
	reg      *session.Registry
	broker   *approval.Broker
	audit    *memAudit
	up       *upstream
	snap     atomic.Pointer[policy.Snapshot]
	logs     *observer.ObservedLogs
	clock    *testClock
	files    string
	promReg  *prometheus.Registry
	apiHTTP  *http.Client
	proxyURL string
}

type testClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

type harnessOptions struct {
	withProxy       bool
	approvalTimeout time.Duration
	mutate          func(*Config)
}

func newHarness(t *testing.T, opts harnessOptions) *harness {
	t.Helper()
	core, logs := observer.New(zap.DebugLevel)
	logger := zap.New(core)
	h := &harness{t: t, audit: newMemAudit(), up: newUpstream(t), logs: logs, clock: &testClock{}, files: t.TempDir()}
	h.snap.Store(specs.Compile(t, specGH, specOther))
	h.reg = session.NewRegistry(session.RegistryConfig{Now: h.clock.Now})
	to := opts.approvalTimeout
	if to == 0 {
		to = 30 * time.Second
	}
	h.broker = approval.NewBroker(approval.BrokerConfig{Timeout: to, Audit: h.audit})

	proxyAddr := testkit.DeadAddr(t)
	if opts.withProxy {
		proxyAddr = h.startProxy(logger)
	}
	h.proxyURL = proxyAddr
	h.promReg = prometheus.NewRegistry()
	cfg := Config{
		Logger:           logger,
		Sessions:         h.reg,
		Policy:           h.snap.Load,
		Approvals:        h.broker,
		Audit:            h.audit,
		AdminToken:       adminToken,
		ProxyAddr:        proxyAddr,
		ProxyInternalKey: internalKey,
		MaxResponseBytes: smallResponses,
		MaxBodyBytes:     64 << 10,
		UpstreamTimeout:  20 * time.Second,
		Registerer:       h.promReg,
		Gatherer:         h.promReg,
		AllowedHosts:     []string{"host.docker.internal"},
		SessionFiles: func(s *session.Session) (string, string, error) {
			dir := filepath.Join(h.files, s.ID)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return "", "", err
			}
			caFile := filepath.Join(dir, "ca.pem")
			if err := os.WriteFile(caFile, s.CAPEM, 0o600); err != nil {
				return "", "", err
			}
			return caFile, filepath.Join(dir, "ca-bundle.pem"), nil
		},
	}
	if opts.mutate != nil {
		opts.mutate(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.srv = srv
	hs := httptest.NewUnstartedServer(srv.Handler())
	hs.Config = srv.HTTPServer()
	hs.Start()
	t.Cleanup(func() { hs.Close(); srv.Close() })
	h.url = hs.URL
	h.apiHTTP = &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 60 * time.Second}
	return h
}

// startProxy runs a real proxy.Server on 127.0.0.1:0 that resolves the test
// hosts to the upstream and trusts only the upstream's CA.
func (h *harness) startProxy(logger *zap.Logger) string {
	t := h.t
	t.Helper()
	f := &credentials.File{}
	f.Set(credentials.Binding{FQN: fqnGH, Kind: credentials.Kind("bearer"),
		Source: credentials.Source{Type: credentials.SourceStored, Value: credentials.NewValue(canary)}})
	res, err := credentials.NewResolver(credentials.ResolverConfig{File: f})
	if err != nil {
		t.Fatalf("credentials.NewResolver: %v", err)
	}
	upAddr := h.up.srv.Listener.Addr().String()
	p, err := proxy.New(proxy.Config{
		Logger:      logger,
		Sessions:    ProxySessions{Registry: h.reg},
		Policy:      h.snap.Load,
		Credentials: func() proxy.CredentialSource { return res },
		Audit:       h.audit,
		Approver:    ProxyApprover{Broker: h.broker},
		InternalKey: internalKey,
		Resolve:     map[string]string{hostGH + ":443": upAddr, hostOth + ":443": upAddr},
		SystemRoots: x509.NewCertPool(),
		UpstreamRoots: []*x509.Certificate{
			h.up.ca.Certificate(),
		},
	})
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("proxy Serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("proxy Serve did not return after Shutdown")
		}
	})
	return l.Addr().String()
}

// response is a decoded API response.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response body is not a JSON object (status %d): %v\n%s", r.status, err, r.body)
	}
	return m
}

// errCode returns error.code of an error response.
func (r response) errCode(t *testing.T) contract.Code {
	t.Helper()
	m := r.json(t)
	e, ok := m["error"].(map[string]any)
	if !ok {
		t.Fatalf("no error object in %s", r.body)
	}
	code, _ := e["code"].(string)
	if msg, _ := e["message"].(string); msg == "" {
		t.Errorf("error without a message: %s", r.body)
	}
	return contract.Code(code)
}

// do sends a request to the API. body may be a string (sent as is) or a
// value (JSON-encoded).
func (h *harness) do(method, path, token string, body any, hdr ...string) response {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, h.url+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if strings.EqualFold(hdr[i], "Host") {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := h.apiHTTP.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: raw}
}

// createSession creates a session through the API.
func (h *harness) createSession(connectors ...string) CreatedSession {
	h.t.Helper()
	r := h.do(http.MethodPost, "/v1/sessions", adminToken, CreateSessionRequest{Connectors: connectors, TTL: "1h"})
	if r.status != http.StatusCreated {
		h.t.Fatalf("POST /v1/sessions: %d %s", r.status, r.body)
	}
	var cs CreatedSession
	if err := json.Unmarshal(r.body, &cs); err != nil {
		h.t.Fatal(err)
	}
	return cs
}

// run calls the run endpoint as the session.
func (h *harness) run(token string, body any, hdr ...string) response {
	h.t.Helper()
	return h.do(http.MethodPost, "/v1/connector-operations/run", token, body, hdr...)
}

// assertNoSecrets fails if any secret appears in the captured logs or the
// audit events.
func (h *harness) assertNoSecrets(secrets ...string) {
	h.t.Helper()
	secrets = append(secrets, canary, adminToken, internalKey)
	var logText strings.Builder
	for _, e := range h.logs.All() {
		logText.WriteString(e.Message)
		for k, v := range e.ContextMap() {
			fmt.Fprintf(&logText, " %s=%v", k, v)
		}
		logText.WriteString("\n")
	}
	auditJSON, _ := json.Marshal(h.audit.all())
	for _, s := range secrets {
		if s == "" {
			continue
		}
		if strings.Contains(logText.String(), s) {
			h.t.Errorf("a secret (%d chars) appears in the logs", len(s))
		}
		if bytes.Contains(auditJSON, []byte(s)) {
			h.t.Errorf("a secret (%d chars) appears in the audit events", len(s))
		}
	}
}
