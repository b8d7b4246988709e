package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
)

// These tests send calls through a real proxy.Server to a loopback TLS
// upstream and assert inside the upstream what arrived.

func envelope(t *testing.T, r response) Envelope {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", r.status, r.body)
	}
	var env Envelope
	if err := json.Unmarshal(r.body, &env); err != nil {
		t.Fatalf("envelope: %v\n%s", err, r.body)
	}
	if env.Status != "proxied" || env.AuditID == "" {
		t.Errorf("status %q audit_id %q, want proxied and an audit id", env.Status, env.AuditID)
	}
	return env
}

func bodyMap(t *testing.T, env Envelope) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(env.Body, &m); err != nil {
		t.Fatalf("envelope body is not a JSON object: %v\n%s", err, env.Body)
	}
	return m
}

func proxiedEvent(t *testing.T, h *harness, auditID string) audit.Event {
	t.Helper()
	for _, e := range h.audit.byName(audit.EventProxied) {
		if e.AuditID == auditID {
			return e
		}
	}
	t.Fatalf("no connector.proxy.proxied event with audit_id %q in %+v", auditID, h.audit.all())
	return audit.Event{}
}

func TestRunGETWithQuery(t *testing.T) {
	h := newHarness(t, harnessOptions{withProxy: true})
	cs := h.createSession(fqnGH)
	r := h.run(cs.APIToken, `{"connector_fqn":"github://acme/conn-gh","tool":"gh","operation":"issues.list",
		"args":{"owner":"acme","repo":"widgets","per_page":12345678901234567890,"labels":["bug","help wanted"],"state":"open","q":"secret words"}}`)
	env := envelope(t, r)
	if env.UpstreamStatus != http.StatusOK || env.ContentType != "application/json" {
		t.Errorf("upstream_status %d content_type %q", env.UpstreamStatus, env.ContentType)
	}
	if len(env.Headers) != 2 || env.Headers["link"] == "" || env.Headers["content-type"] != "application/json" {
		t.Errorf("headers = %v, want only content-type and link", env.Headers)
	}
	got := h.up.last(t)
	if got.Method != http.MethodGet || got.Path != "/repos/acme/widgets/issues" {
		t.Errorf("upstream got %s %s", got.Method, got.Path)
	}
	if want := "labels=bug&labels=help+wanted&per_page=12345678901234567890&q=secret+words&state=open"; got.RawQuery != want {
		t.Errorf("upstream query = %q\n want %q", got.RawQuery, want)
	}
	if got.Auth != "Bearer "+canary {
		t.Errorf("upstream Authorization = %q, want the injected credential", got.Auth)
	}
	if got.Internal != "" {
		t.Errorf("the upstream saw X-Aileron-* headers: %q", got.Internal)
	}
	if got.Host != hostGH {
		t.Errorf("upstream Host = %q", got.Host)
	}
	b := bodyMap(t, env)
	if auth, _ := b["auth"].(string); strings.Contains(auth, canary) || auth == "" {
		t.Errorf("the echoed credential was not scrubbed: %q", auth)
	}
	ev := proxiedEvent(t, h, env.AuditID)
	if ev.Source != SourceRunEndpoint || ev.SessionID != cs.ID || ev.Operation != "issues.list" || ev.Status != http.StatusOK {
		t.Errorf("proxied event = %+v", ev)
	}
	if ev.Fields["repository"] != "widgets" || ev.Fields["state_arg"] != "open" || !strings.HasPrefix(ev.Fields["search"], "sha256:") {
		t.Errorf("audit fields = %v, want repository, state_arg and a redacted search", ev.Fields)
	}
	raw, _ := json.Marshal(h.audit.all())
	if strings.Contains(string(raw), "secret words") {
		t.Error("a redacted audit arg appears in the audit events")
	}
	if strings.Contains(string(r.body), canary) {
		t.Error("the API response carries the credential")
	}
	var line map[string]any
	for _, e := range h.logs.FilterMessage("api request").All() {
		if m := e.ContextMap(); m["route"] == "/v1/connector-operations/run" {
			line = m
		}
	}
	if line == nil || line["status"] != int64(http.StatusOK) || line["session_id"] != cs.ID || line["method"] != "POST" {
		t.Errorf("canonical log line = %v", line)
	}
	h.assertNoSecrets(cs.APIToken, proxySecret(t, cs))
}

func TestRunPOSTJSONBodyAndTemplatePath(t *testing.T) {
	h := newHarness(t, harnessOptions{withProxy: true})
	cs := h.createSession(fqnGH)
	r := h.run(cs.APIToken, `{"connector_fqn":"github://acme/conn-gh","tool":"gh","operation":"issues.create",
		"args":{"owner":"the acme","repo":"w%x","title":"Bug","count":98765432109876543210,"labels":["a","b"],"meta":{"k":1}}}`)
	env := envelope(t, r)
	if env.UpstreamStatus != http.StatusCreated {
		t.Errorf("upstream_status = %d, want 201 (passed through in a 200 envelope)", env.UpstreamStatus)
	}
	got := h.up.last(t)
	if got.Method != http.MethodPost || got.Path != "/repos/the acme/w%x/issues" || got.RawPath != "/repos/the%20acme/w%25x/issues" {
		t.Errorf("upstream got %s path %q raw %q", got.Method, got.Path, got.RawPath)
	}
	if want := `{"count":98765432109876543210,"labels":["a","b"],"meta":{"k":1},"title":"Bug"}`; got.Body != want {
		t.Errorf("upstream body = %s\n want %s", got.Body, want)
	}
	if got.ContentType != "application/json" || got.RawQuery != "" {
		t.Errorf("content type %q, query %q", got.ContentType, got.RawQuery)
	}
	if got.Auth != "Bearer "+canary {
		t.Errorf("upstream Authorization = %q", got.Auth)
	}
}

func TestRunBodyKinds(t *testing.T) {
	h := newHarness(t, harnessOptions{withProxy: true})
	cs := h.createSession(fqnGH)
	env := envelope(t, h.run(cs.APIToken, RunRequest{ConnectorFQN: fqnGH, Tool: "gh", Operation: "text.get"}))
	var s string
	if err := json.Unmarshal(env.Body, &s); err != nil || s != "héllo" {
		t.Errorf("text body = %s (%v), want the string", env.Body, err)
	}
	want := map[string]string{"content-type": "text/plain; charset=utf-8", "etag": `"v1"`, "x-ratelimit-remaining": "42"}
	if len(env.Headers) != len(want) {
		t.Errorf("headers = %v, want %v", env.Headers, want)
	}
	for k, v := range want {
		if env.Headers[k] != v {
			t.Errorf("header %s = %q, want %q", k, env.Headers[k], v)
		}
	}
	env = envelope(t, h.run(cs.APIToken, RunRequest{ConnectorFQN: fqnGH, Tool: "gh", Operation: "bin.get"}))
	if env.Body != nil || env.BodyBase64 != "//4AAQ==" {
		t.Errorf("binary body: body %s, body_base64 %q", env.Body, env.BodyBase64)
	}
	r := h.run(cs.APIToken, RunRequest{ConnectorFQN: fqnGH, Tool: "gh", Operation: "big.get"})
	if r.status != http.StatusBadGateway || r.errCode(t) != CodeUpstreamResponseTooLarge {
		t.Errorf("large response = %d %s, want 502 upstream_response_too_large", r.status, r.body)
	}
}

func TestRunCrossSession(t *testing.T) {
	h := newHarness(t, harnessOptions{withProxy: true})
	a := h.createSession(fqnGH)
	b := h.createSession(fqnOther)
	// A's token cannot reach B's connector.
	r := h.run(a.APIToken, RunRequest{ConnectorFQN: fqnOther, Tool: "other", Operation: "ping"})
	if r.status != http.StatusNotFound || r.errCode(t) != CodeOperationNotFound {
		t.Errorf("A running B's operation = %d %s, want 404", r.status, r.body)
	}
	// A's token cannot claim to be B.
	r = h.run(a.APIToken, RunRequest{ConnectorFQN: fqnOther, Tool: "other", Operation: "ping"}, HeaderSessionID, b.ID)
	if r.status != http.StatusForbidden || r.errCode(t) != CodeSessionMismatch {
		t.Errorf("A claiming B = %d %s, want 403", r.status, r.body)
	}
	if n := h.up.count.Load(); n != 0 {
		t.Fatalf("upstream received %d requests, want 0", n)
	}
	// B's own call works, and its audit event is B's.
	env := envelope(t, h.run(b.APIToken, RunRequest{ConnectorFQN: fqnOther, Tool: "other", Operation: "ping"}))
	if ev := proxiedEvent(t, h, env.AuditID); ev.SessionID != b.ID {
		t.Errorf("event session = %q, want %q", ev.SessionID, b.ID)
	}
	// Once B ends, its token is refused before anything is sent.
	if r := h.do(http.MethodDelete, "/v1/sessions/"+b.ID, adminToken, nil); r.status != http.StatusOK {
		t.Fatal(r.status)
	}
	before := h.up.count.Load()
	r = h.run(b.APIToken, RunRequest{ConnectorFQN: fqnOther, Tool: "other", Operation: "ping"})
	if r.status != http.StatusUnauthorized || r.errCode(t) != CodeSessionEnded || h.up.count.Load() != before {
		t.Errorf("ended session = %d %s", r.status, r.body)
	}
}

func TestProxyDenialPassesThrough(t *testing.T) {
	h := newHarness(t, harnessOptions{withProxy: true})
	cs := h.createSession(fqnOther)
	r := h.run(cs.APIToken, RunRequest{ConnectorFQN: fqnOther, Tool: "other", Operation: "secure"})
	if r.status != http.StatusForbidden || r.errCode(t) != "credential_not_configured" {
		t.Fatalf("= %d %s, want 403 credential_not_configured from the proxy", r.status, r.body)
	}
	if e := r.json(t)["error"].(map[string]any); e["command"] == nil || e["host"] == nil {
		t.Errorf("the proxy's error members were not passed through: %v", e)
	}
	if n := h.up.count.Load(); n != 0 {
		t.Errorf("upstream received %d requests", n)
	}
}

func TestSandboxProxyRequest(t *testing.T) {
	h := newHarness(t, harnessOptions{withProxy: true})
	cs := h.createSession(fqnGH)
	r := h.do(http.MethodPost, "/v1/sandbox-proxy/requests", cs.APIToken, SandboxProxyRequest{
		ConnectorFQN: fqnGH, Tool: "gh", Operation: "issues.create", Method: "post",
		URL:        "https://" + hostGH + "/repos/acme/w/issues?x=1",
		Headers:    map[string]string{"Authorization": "Bearer sandbox-own", "Content-Type": "application/json", "X-Aileron-Source": "run_endpoint", "X-Custom": "kept"},
		BodyBase64: "eyJ0aXRsZSI6IngifQ==",
	})
	env := envelope(t, r)
	if env.UpstreamStatus != http.StatusCreated {
		t.Errorf("upstream_status = %d", env.UpstreamStatus)
	}
	got := h.up.last(t)
	if got.Method != http.MethodPost || got.Path != "/repos/acme/w/issues" || got.RawQuery != "x=1" || got.Body != `{"title":"x"}` {
		t.Errorf("upstream got %+v", got)
	}
	if got.Auth != "Bearer "+canary {
		t.Errorf("upstream Authorization = %q, want the injected credential, not the sandbox's", got.Auth)
	}
	if ev := proxiedEvent(t, h, env.AuditID); ev.Source != SourceSandboxProxy {
		t.Errorf("a sandbox-proxy request was audited as %q, want %q (even when the caller claims run_endpoint)", ev.Source, SourceSandboxProxy)
	}
}

func TestRetries(t *testing.T) {
	t.Run("idempotent retried once", func(t *testing.T) {
		h := newHarness(t, harnessOptions{withProxy: true})
		cs := h.createSession(fqnGH)
		env := envelope(t, h.run(cs.APIToken, RunRequest{ConnectorFQN: fqnGH, Tool: "gh", Operation: "flaky.get"}))
		if env.UpstreamStatus != http.StatusOK {
			t.Errorf("upstream_status = %d", env.UpstreamStatus)
		}
		if n := h.up.count.Load(); n != 2 {
			t.Errorf("upstream received %d requests, want 2 (one retry)", n)
		}
	})
	t.Run("not idempotent never retried", func(t *testing.T) {
		h := newHarness(t, harnessOptions{withProxy: true})
		cs := h.createSession(fqnGH)
		r := h.run(cs.APIToken, RunRequest{ConnectorFQN: fqnGH, Tool: "gh", Operation: "flaky.post"})
		if r.status != http.StatusBadGateway || r.errCode(t) != CodeUpstreamUnreachable {
			t.Errorf("= %d %s, want 502 upstream_unreachable", r.status, r.body)
		}
		if n := h.up.count.Load(); n != 1 {
			t.Errorf("upstream received %d requests, want 1", n)
		}
	})
	t.Run("proxy unreachable", func(t *testing.T) {
		h := newHarness(t, harnessOptions{}) // the proxy address is a dead port
		cs := h.createSession(fqnGH)
		r := h.run(cs.APIToken, RunRequest{ConnectorFQN: fqnGH, Tool: "gh", Operation: "flaky.get"})
		if r.status != http.StatusBadGateway || r.errCode(t) != CodeUpstreamUnreachable {
			t.Errorf("= %d %s, want 502 upstream_unreachable", r.status, r.body)
		}
	})
}

// holdDelete starts a run of the approval-required issues.delete and
// returns its result channel and the pending approval's ID.
func holdDelete(t *testing.T, h *harness, token string) (<-chan response, string) {
	t.Helper()
	out := make(chan response, 1)
	go func() {
		out <- h.run(token, RunRequest{ConnectorFQN: fqnGH, Tool: "gh", Operation: "issues.delete",
			Args: map[string]any{"owner": "acme", "repo": "w", "number": 7}})
	}()
	e := h.audit.waitFor(t, audit.EventApprovalRequested)
	r := h.do(http.MethodGet, "/v1/approvals", adminToken, nil)
	var list ApprovalList
	if err := json.Unmarshal(r.body, &list); err != nil || len(list.Approvals) != 1 {
		t.Fatalf("pending approvals = %s", r.body)
	}
	p := list.Approvals[0]
	if p.ID != e.Fields["approval_id"] || p.Operation != "issues.delete" || p.Path != "/repos/acme/w/issues/7" || p.Fields["issue"] != "7" {
		t.Errorf("pending approval = %+v", p)
	}
	return out, p.ID
}

func waitResponse(t *testing.T, ch <-chan response) response {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("the held call did not return")
		return response{}
	}
}

func TestApprovalHeldThenDecided(t *testing.T) {
	h := newHarness(t, harnessOptions{withProxy: true})
	cs := h.createSession(fqnGH)

	// Approved: the request proceeds.
	ch, id := holdDelete(t, h, cs.APIToken)
	if n := h.up.count.Load(); n != 0 {
		t.Fatalf("a held request reached the upstream (%d)", n)
	}
	if r := h.do(http.MethodPost, "/v1/approvals/"+id, adminToken, DecideRequest{Decision: "approve"}); r.status != http.StatusOK {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	env := envelope(t, waitResponse(t, ch))
	if got := h.up.last(t); got.Method != http.MethodDelete || got.Path != "/repos/acme/w/issues/7" {
		t.Errorf("upstream got %s %s", got.Method, got.Path)
	}
	if ev := proxiedEvent(t, h, env.AuditID); ev.Reason != "approved" {
		t.Errorf("proxied event reason = %q, want approved", ev.Reason)
	}

	// Denied: 403 approval_denied from the proxy, nothing upstream.
	before := h.up.count.Load()
	ch, id = holdDelete(t, h, cs.APIToken)
	if r := h.do(http.MethodPost, "/v1/approvals/"+id, adminToken, DecideRequest{Decision: "deny"}); r.status != http.StatusOK {
		t.Fatalf("deny: %d %s", r.status, r.body)
	}
	r := waitResponse(t, ch)
	if r.status != http.StatusForbidden || r.errCode(t) != "approval_denied" {
		t.Errorf("denied call = %d %s, want 403 approval_denied", r.status, r.body)
	}
	if h.up.count.Load() != before {
		t.Error("a denied request reached the upstream")
	}

	// The audit trail: requested and decided twice, in order.
	var trail []string
	for _, e := range h.audit.all() {
		switch e.Event {
		case audit.EventApprovalRequested:
			trail = append(trail, "requested")
		case audit.EventApprovalDecided:
			trail = append(trail, "decided:"+e.Decision+"/"+e.Reason)
		case audit.EventProxied, audit.EventDenied:
			if e.Operation == "issues.delete" {
				trail = append(trail, e.Event+":"+e.Reason)
			}
		}
	}
	want := []string{"requested", "decided:approved/approved", audit.EventProxied + ":approved",
		"requested", "decided:denied/denied", audit.EventDenied + ":approval_denied"}
	if strings.Join(trail, ",") != strings.Join(want, ",") {
		t.Errorf("audit trail = %v\n want %v", trail, want)
	}
}

func TestApprovalTimeout(t *testing.T) {
	h := newHarness(t, harnessOptions{withProxy: true, approvalTimeout: 300 * time.Millisecond})
	cs := h.createSession(fqnGH)
	r := h.run(cs.APIToken, RunRequest{ConnectorFQN: fqnGH, Tool: "gh", Operation: "issues.delete",
		Args: map[string]any{"owner": "acme", "repo": "w", "number": 7}})
	if r.status != http.StatusForbidden || r.errCode(t) != "approval_timeout" {
		t.Errorf("= %d %s, want 403 approval_timeout", r.status, r.body)
	}
	if n := h.up.count.Load(); n != 0 {
		t.Errorf("upstream received %d requests", n)
	}
	decided := h.audit.byName(audit.EventApprovalDecided)
	if len(decided) != 1 || decided[0].Reason != "timeout" || decided[0].Decision != "denied" {
		t.Errorf("approval.decided = %+v", decided)
	}
}

func TestApprovalRememberedForSession(t *testing.T) {
	h := newHarness(t, harnessOptions{withProxy: true})
	cs := h.createSession(fqnGH)
	ch, id := holdDelete(t, h, cs.APIToken)
	if r := h.do(http.MethodPost, "/v1/approvals/"+id, adminToken, DecideRequest{Decision: "approve", Remember: "session"}); r.status != http.StatusOK {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	envelope(t, waitResponse(t, ch))
	// The next call of the same operation is not held.
	envelope(t, h.run(cs.APIToken, RunRequest{ConnectorFQN: fqnGH, Tool: "gh", Operation: "issues.delete",
		Args: map[string]any{"owner": "acme", "repo": "w", "number": 8}}))
	if n := h.up.count.Load(); n != 2 {
		t.Errorf("upstream received %d requests, want 2", n)
	}
	if n := len(h.audit.byName(audit.EventApprovalRequested)); n != 1 {
		t.Errorf("%d approval.requested events, want 1 (the remembered call must not be held)", n)
	}
}

// TestRunBodyToken covers the session token in the run body's "api_token",
// for clients that cannot send a header outside their argv (BusyBox wget).
func TestRunBodyToken(t *testing.T) {
	h := newHarness(t, harnessOptions{withProxy: true})
	a := h.createSession(fqnGH)
	b := h.createSession(fqnGH)
	ended := h.createSession(fqnGH)
	if r := h.do(http.MethodDelete, "/v1/sessions/"+ended.ID, adminToken, nil); r.status != http.StatusOK {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	req := func(tok string) RunRequest {
		return RunRequest{ConnectorFQN: fqnGH, Tool: "gh", Operation: "text.get", APIToken: tok}
	}

	envelope(t, h.run("", req(a.APIToken)))
	if ev := h.audit.waitFor(t, audit.EventProxied); ev.SessionID != a.ID {
		t.Errorf("audited under session %q, want %q", ev.SessionID, a.ID)
	}
	// A header, when sent, is the credential; the body's token is ignored.
	envelope(t, h.run(a.APIToken, req("not-a-token")))

	upstream := h.up.count.Load()
	tests := []struct {
		name   string
		token  string
		body   any
		hdr    []string
		status int
		code   contract.Code
	}{
		{"no token anywhere", "", req(""), nil, http.StatusUnauthorized, CodeUnauthorized},
		{"wrong body token", "", req("tok-wrong"), nil, http.StatusUnauthorized, CodeUnauthorized},
		{"ended session", "", req(ended.APIToken), nil, http.StatusUnauthorized, CodeSessionEnded},
		{"wrong header beats a good body token", "tok-wrong", req(a.APIToken), nil, http.StatusUnauthorized, CodeUnauthorized},
		{"other session's id header", "", req(a.APIToken), []string{HeaderSessionID, b.ID}, http.StatusForbidden, CodeSessionMismatch},
		{"not JSON", "", `{"api_token":`, nil, http.StatusBadRequest, CodeInvalidBody},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := h.run(tc.token, tc.body, tc.hdr...)
			if r.status != tc.status || r.errCode(t) != tc.code {
				t.Errorf("run = %d %s, want %d %s", r.status, r.body, tc.status, tc.code)
			}
			if strings.Contains(string(r.body), a.APIToken) {
				t.Errorf("the reply echoes the token: %s", r.body)
			}
		})
	}
	// Only the run endpoint takes a body token.
	r := h.do(http.MethodPost, "/v1/sandbox-proxy/requests", "", map[string]string{"api_token": a.APIToken})
	if r.status != http.StatusUnauthorized || r.errCode(t) != CodeUnauthorized {
		t.Errorf("sandbox-proxy with a body token = %d %s, want 401 unauthorized", r.status, r.body)
	}
	if n := h.up.count.Load(); n != upstream {
		t.Errorf("refused calls reached the upstream %d times", n-upstream)
	}
	h.assertNoSecrets(a.APIToken, b.APIToken)
}

// TestProxyRetryAfterPassesThrough stands a fake proxy in that refuses
// CONNECT with 429 (its tunnel limit): the API's 429 keeps the proxy's
// error and its Retry-After.
func TestProxyRetryAfterPassesThrough(t *testing.T) {
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			t.Errorf("fake proxy got %s, want CONNECT", r.Method)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"error":{"code":"too_many_tunnels","message":"too many open tunnels"}}`))
	}))
	t.Cleanup(fake.Close)
	h := newHarness(t, harnessOptions{mutate: func(c *Config) { c.ProxyAddr = fake.Listener.Addr().String() }})
	cs := h.createSession(fqnGH)
	r := h.run(cs.APIToken, RunRequest{ConnectorFQN: fqnGH, Tool: "gh", Operation: "text.get"})
	if r.status != http.StatusTooManyRequests || r.errCode(t) != "too_many_tunnels" {
		t.Fatalf("= %d %s, want 429 too_many_tunnels from the proxy", r.status, r.body)
	}
	if got := r.header.Get("Retry-After"); got != "7" {
		t.Errorf("Retry-After = %q, want the proxy's %q", got, "7")
	}
}
