package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/aileron-dev/aileron-proxy/approval"
	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/internal/testkit/specs"
	"github.com/aileron-dev/aileron-proxy/policy"
	"github.com/aileron-dev/aileron-proxy/session"
)

func TestNewRequiresDependencies(t *testing.T) {
	_, err := New(Config{})
	if err == nil {
		t.Fatal("New(Config{}) succeeded")
	}
	for _, f := range []string{"Logger", "Sessions", "Policy", "Approvals", "Audit", "AdminToken", "ProxyAddr", "ProxyInternalKey", "Registerer", "Gatherer"} {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("New error %q does not name %s", err, f)
		}
	}
}

// TestRoutesDocumented walks echo's registered routes and the OpenAPI
// document both ways.
func TestRoutesDocumented(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	registered := map[string]bool{}
	for _, r := range h.srv.e.Routes() {
		if r.Method == echo.RouteNotFound || isConsolePath(r.Path) {
			continue // the web console's HTML routes are not part of the JSON API
		}
		segs := strings.Split(r.Path, "/")
		for i, s := range segs {
			if strings.HasPrefix(s, ":") {
				segs[i] = "{" + s[1:] + "}"
			}
		}
		p := strings.Join(segs, "/")
		m := strings.ToLower(r.Method)
		registered[m+" "+p] = true
		if _, ok := doc.Paths[p][m]; !ok {
			t.Errorf("route %s %s is not documented in openapi.json", r.Method, p)
		}
	}
	for p, ops := range doc.Paths {
		for m := range ops {
			if m == "parameters" {
				continue
			}
			if !registered[m+" "+p] {
				t.Errorf("openapi.json documents %s %s, which is not a route", strings.ToUpper(m), p)
			}
		}
	}
	if consoleRoutes := 3; len(registered) != len(h.srv.routes())-consoleRoutes {
		t.Errorf("%d routes registered, route table has %d", len(registered), len(h.srv.routes()))
	}
	r := h.do(http.MethodGet, "/v1/openapi.json", "", nil)
	if r.status != http.StatusOK || string(r.body) != string(OpenAPI()) {
		t.Errorf("GET /v1/openapi.json = %d, body differs from the embedded document", r.status)
	}
}

func TestHealthzAndMetrics(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	if r := h.do(http.MethodGet, "/healthz", "", nil); r.status != http.StatusOK || r.json(t)["status"] != "ok" {
		t.Errorf("GET /healthz = %d %s", r.status, r.body)
	}
	h.do(http.MethodGet, "/v1/sessions", "wrong", nil)
	r := h.do(http.MethodGet, "/metrics", "", nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /metrics = %d", r.status)
	}
	want := `aileron_api_requests_total{code="401",method="GET",route="/v1/sessions"} 1`
	if !strings.Contains(string(r.body), want) {
		t.Errorf("metrics lack %q:\n%s", want, r.body)
	}
}

func TestUnknownRouteAndMethod(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	tests := []struct {
		method, path string
		status       int
		code         contract.Code
	}{
		{http.MethodGet, "/nope", http.StatusNotFound, CodeNotFound},
		{http.MethodPut, "/v1/sessions", http.StatusMethodNotAllowed, CodeMethodNotAllowed},
	}
	for _, tc := range tests {
		r := h.do(tc.method, tc.path, adminToken, nil)
		if r.status != tc.status || r.errCode(t) != tc.code {
			t.Errorf("%s %s = %d %s, want %d %s", tc.method, tc.path, r.status, r.body, tc.status, tc.code)
		}
	}
}

func TestHostAndOriginChecks(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	tests := []struct {
		name   string
		hdr    []string
		status int
		code   contract.Code
	}{
		{"ip literal", nil, http.StatusOK, ""},
		{"localhost with port", []string{"Host", "localhost:7700"}, http.StatusOK, ""},
		{"ipv6 loopback", []string{"Host", "[::1]:7700"}, http.StatusOK, ""},
		{"configured host", []string{"Host", "host.docker.internal:7700"}, http.StatusOK, ""},
		{"rebinding name", []string{"Host", "evil.example:7700"}, http.StatusForbidden, CodeForbiddenHost},
		{"localhost suffix trick", []string{"Host", "localhost.evil.example"}, http.StatusForbidden, CodeForbiddenHost},
		{"browser origin", []string{"Origin", "https://evil.example"}, http.StatusForbidden, CodeForbiddenOrigin},
		{"referer", []string{"Referer", "https://evil.example/x"}, http.StatusForbidden, CodeForbiddenOrigin},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := h.do(http.MethodGet, "/v1/sessions", adminToken, nil, tc.hdr...)
			if r.status != tc.status {
				t.Fatalf("status = %d %s, want %d", r.status, r.body, tc.status)
			}
			if tc.code != "" && r.errCode(t) != tc.code {
				t.Errorf("code = %q, want %q", r.errCode(t), tc.code)
			}
		})
	}
}

func TestAdminAuth(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	cs := h.createSession()
	routes := []struct{ method, path string }{
		{http.MethodPost, "/v1/sessions"},
		{http.MethodGet, "/v1/sessions"},
		{http.MethodDelete, "/v1/sessions/" + cs.ID},
		{http.MethodGet, "/v1/approvals"},
		{http.MethodPost, "/v1/approvals/apr_x"},
	}
	tokens := []struct {
		name, token string
	}{
		{"no token", ""},
		{"wrong token", "nope"},
		{"admin token prefix", adminToken[:10]},
		{"session api token", cs.APIToken},
	}
	for _, rt := range routes {
		for _, tok := range tokens {
			t.Run(rt.method+" "+rt.path+"/"+tok.name, func(t *testing.T) {
				r := h.do(rt.method, rt.path, tok.token, `{}`)
				if r.status != http.StatusUnauthorized || r.errCode(t) != CodeUnauthorized {
					t.Errorf("= %d %s, want 401 unauthorized", r.status, r.body)
				}
				if r.header.Get("WWW-Authenticate") == "" {
					t.Error("401 without WWW-Authenticate")
				}
			})
		}
	}
	if _, ok := h.reg.Get(cs.ID); !ok {
		t.Error("an unauthenticated DELETE ended the session")
	}
}

func TestSessionAuth(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	a := h.createSession(fqnGH)
	b := h.createSession(fqnOther)
	ended := h.createSession()
	if r := h.do(http.MethodDelete, "/v1/sessions/"+ended.ID, adminToken, nil); r.status != http.StatusOK {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	body := RunRequest{ConnectorFQN: fqnGH, Tool: "gh", Operation: "nope"}
	sbody := SandboxProxyRequest{ConnectorFQN: fqnGH, Tool: "gh", Operation: "nope", Method: "GET", URL: "https://" + hostGH + "/x"}
	tests := []struct {
		name    string
		token   string
		hdr     []string
		status  int
		code    contract.Code
		sandbox contract.Code // code on the sandbox endpoint when it differs
	}{
		{"no token", "", nil, http.StatusUnauthorized, CodeUnauthorized, ""},
		{"admin token is not a session token", adminToken, nil, http.StatusUnauthorized, CodeUnauthorized, ""},
		{"proxy secret is not a token", proxySecret(t, a), nil, http.StatusUnauthorized, CodeUnauthorized, ""},
		{"ended session", ended.APIToken, nil, http.StatusUnauthorized, CodeSessionEnded, ""},
		{"other session's id header", a.APIToken, []string{HeaderSessionID, b.ID}, http.StatusForbidden, CodeSessionMismatch, ""},
		{"own session id header", a.APIToken, []string{HeaderSessionID, a.ID}, http.StatusNotFound, CodeOperationNotFound, CodeSandboxOperationNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := h.run(tc.token, body, tc.hdr...)
			if r.status != tc.status || r.errCode(t) != tc.code {
				t.Errorf("run = %d %s, want %d %s", r.status, r.body, tc.status, tc.code)
			}
			want := tc.code
			if tc.sandbox != "" {
				want = tc.sandbox
			}
			r = h.do(http.MethodPost, "/v1/sandbox-proxy/requests", tc.token, sbody, tc.hdr...)
			if r.status != tc.status || r.errCode(t) != want {
				t.Errorf("sandbox-proxy = %d %s, want %d %s", r.status, r.body, tc.status, want)
			}
		})
	}
	// Expiry: the token stops working when the session's TTL passes.
	h.clock.Advance(2 * time.Hour)
	r := h.run(a.APIToken, body)
	if r.status != http.StatusUnauthorized || r.errCode(t) != CodeSessionExpired {
		t.Errorf("expired session: %d %s, want 401 session_expired", r.status, r.body)
	}
	if h.up.count.Load() != 0 {
		t.Errorf("upstream saw %d requests, want 0", h.up.count.Load())
	}
}

func proxySecret(t *testing.T, cs CreatedSession) string {
	t.Helper()
	u, err := url.Parse(cs.ProxyURL)
	if err != nil {
		t.Fatalf("proxy_url %q: %v", cs.ProxyURL, err)
	}
	p, _ := u.User.Password()
	return p
}

func TestCreateListEndSessions(t *testing.T) {
	h := newHarness(t, harnessOptions{mutate: func(c *Config) { c.AdvertiseProxyAddr = "172.17.0.1:3128" }})
	r := h.do(http.MethodPost, "/v1/sessions", adminToken, `{"connectors":["github://acme/conn-gh"],"ttl":"2d"}`)
	if r.status != http.StatusCreated {
		t.Fatalf("POST /v1/sessions = %d %s", r.status, r.body)
	}
	var cs CreatedSession
	if err := json.Unmarshal(r.body, &cs); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cs.ID, "ses_") || cs.APIToken == "" {
		t.Errorf("id %q, api_token empty=%v", cs.ID, cs.APIToken == "")
	}
	u, err := url.Parse(cs.ProxyURL)
	if err != nil || u.Scheme != "http" || u.Host != "172.17.0.1:3128" || u.User.Username() != cs.ID {
		t.Errorf("proxy_url = %q, want http://<id>:<secret>@172.17.0.1:3128", cs.ProxyURL)
	}
	secret := proxySecret(t, cs)
	if len(secret) != 43 {
		t.Errorf("proxy secret has %d chars, want 43 (32 bytes base64url)", len(secret))
	}
	if _, err := h.reg.AuthenticateProxy(cs.ID, secret); err != nil {
		t.Errorf("the proxy_url secret does not authenticate: %v", err)
	}
	if !strings.Contains(cs.CAPEM, "BEGIN CERTIFICATE") {
		t.Error("ca_pem is not PEM")
	}
	if got, err := os.ReadFile(cs.CAFile); err != nil || string(got) != cs.CAPEM {
		t.Errorf("ca_file %q: %v", cs.CAFile, err)
	}
	if cs.CABundleFile != filepath.Join(filepath.Dir(cs.CAFile), "ca-bundle.pem") {
		t.Errorf("ca_bundle_file = %q", cs.CABundleFile)
	}
	if d := time.Until(cs.ExpiresAt); d < 47*time.Hour || d > 49*time.Hour {
		t.Errorf("expires_at %v is not ~2d away", cs.ExpiresAt)
	}
	if !slices.Equal(cs.Connectors, []string{fqnGH}) || !slices.Equal(cs.Hosts, []string{hostGH + ":443"}) {
		t.Errorf("connectors %v hosts %v", cs.Connectors, cs.Hosts)
	}
	ev := h.audit.byName(audit.EventSessionCreated)
	if len(ev) != 1 || ev[0].SessionID != cs.ID || ev[0].Fields["connectors"] != fqnGH {
		t.Errorf("session.created events = %+v", ev)
	}

	r = h.do(http.MethodGet, "/v1/sessions", adminToken, nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /v1/sessions = %d", r.status)
	}
	if strings.Contains(string(r.body), secret) || strings.Contains(string(r.body), cs.APIToken) {
		t.Error("GET /v1/sessions leaks a secret")
	}
	var list SessionList
	if err := json.Unmarshal(r.body, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Sessions) != 1 || list.Sessions[0].ID != cs.ID || !slices.Equal(list.Sessions[0].Connectors, []string{fqnGH}) {
		t.Errorf("sessions = %+v", list.Sessions)
	}

	if r := h.do(http.MethodDelete, "/v1/sessions/"+cs.ID, adminToken, nil); r.status != http.StatusOK || r.json(t)["state"] != "ended" {
		t.Errorf("DELETE = %d %s", r.status, r.body)
	}
	if r := h.do(http.MethodDelete, "/v1/sessions/"+cs.ID, adminToken, nil); r.status != http.StatusConflict || r.errCode(t) != CodeSessionEnded {
		t.Errorf("second DELETE = %d %s, want 409 session_ended", r.status, r.body)
	}
	if r := h.do(http.MethodDelete, "/v1/sessions/ses_nope", adminToken, nil); r.status != http.StatusNotFound || r.errCode(t) != CodeSessionNotFound {
		t.Errorf("DELETE unknown = %d %s, want 404", r.status, r.body)
	}
	if _, ok := h.srv.clients.get(cs.ID); ok {
		t.Error("the API still holds the ended session's proxy client")
	}
	h.assertNoSecrets(secret, cs.APIToken)
}

func TestCreateSessionErrors(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	tests := []struct {
		name   string
		body   string
		status int
		code   contract.Code
		want   string // substring of the message
	}{
		{"unknown connector", `{"connectors":["github://acme/nope"]}`, http.StatusBadRequest, CodeUnknownConnector, "github://acme/conn-gh, github://acme/conn-other"},
		{"bad ttl", `{"ttl":"soon"}`, http.StatusBadRequest, CodeInvalidBody, `"soon"`},
		{"bad approval surface", `{"approval_surface":"web"}`, http.StatusBadRequest, CodeInvalidBody, `"web"`},
		{"control character in a label", `{"agent":"a\u001b[2J"}`, http.StatusBadRequest, CodeInvalidBody, "control character"},
		{"ttl over max", `{"ttl":"30d"}`, http.StatusBadRequest, CodeInvalidBody, "maximum"},
		{"unknown field", `{"connector":["x"]}`, http.StatusBadRequest, CodeInvalidBody, `"connector"`},
		{"not json", `{`, http.StatusBadRequest, CodeInvalidBody, "truncated"},
		{"array body", `[]`, http.StatusBadRequest, CodeInvalidBody, "object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := h.do(http.MethodPost, "/v1/sessions", adminToken, tc.body)
			if r.status != tc.status || r.errCode(t) != tc.code {
				t.Fatalf("= %d %s, want %d %s", r.status, r.body, tc.status, tc.code)
			}
			if msg := r.json(t)["error"].(map[string]any)["message"].(string); !strings.Contains(msg, tc.want) {
				t.Errorf("message %q lacks %q", msg, tc.want)
			}
		})
	}
	if got := h.reg.List(); len(got) != 0 {
		t.Errorf("%d sessions exist after failed creates", len(got))
	}
	// An empty body means all connectors and the default TTL.
	r := h.do(http.MethodPost, "/v1/sessions", adminToken, nil)
	if r.status != http.StatusCreated {
		t.Fatalf("empty body: %d %s", r.status, r.body)
	}
	var cs CreatedSession
	_ = json.Unmarshal(r.body, &cs)
	if !slices.Equal(cs.Connectors, []string{fqnGH, fqnOther}) {
		t.Errorf("connectors = %v, want all", cs.Connectors)
	}
}

func TestSessionFilesFailure(t *testing.T) {
	h := newHarness(t, harnessOptions{mutate: func(c *Config) {
		c.SessionFiles = func(*session.Session) (string, string, error) { return "", "", os.ErrPermission }
	}})
	r := h.do(http.MethodPost, "/v1/sessions", adminToken, nil)
	if r.status != http.StatusInternalServerError || r.errCode(t) != CodeInternal {
		t.Fatalf("= %d %s, want 500", r.status, r.body)
	}
	if strings.Contains(string(r.body), "permission") {
		t.Errorf("the client message leaks the cause: %s", r.body)
	}
	if got := h.reg.List(); len(got) != 0 {
		t.Errorf("the session survived its failed files: %d live", len(got))
	}
	found := false
	for _, e := range h.logs.FilterMessage("api internal error").All() {
		if strings.Contains(e.ContextMap()["error"].(string), "permission") {
			found = true
		}
	}
	if !found {
		t.Error("the cause was not logged")
	}
}

func TestBodyLimit(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	cs := h.createSession()
	big := `{"connector_fqn":"` + strings.Repeat("x", 70<<10) + `","tool":"gh","operation":"x"}`
	r := h.run(cs.APIToken, big)
	if r.status != http.StatusRequestEntityTooLarge || r.errCode(t) != CodeBodyTooLarge {
		t.Errorf("= %d %s, want 413 body_too_large", r.status, r.body)
	}
}

func TestApprovalEndpoints(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	out := make(chan approval.Outcome, 1)
	go func() {
		out <- h.broker.Await(context.Background(), approval.Request{
			SessionID: "ses_1", ConnectorFQN: fqnGH, Tool: "gh", Operation: "issues.delete",
			Method: "DELETE", Host: hostGH + ":443", Path: "/repos/acme/x/issues/7", Fields: map[string]string{"issue": "7"},
		})
	}()
	h.audit.waitFor(t, audit.EventApprovalRequested)

	r := h.do(http.MethodGet, "/v1/approvals?state=pending", adminToken, nil)
	var list ApprovalList
	if err := json.Unmarshal(r.body, &list); err != nil || r.status != http.StatusOK {
		t.Fatalf("GET /v1/approvals = %d %s", r.status, r.body)
	}
	if len(list.Approvals) != 1 {
		t.Fatalf("approvals = %+v, want 1", list.Approvals)
	}
	p := list.Approvals[0]
	if p.SessionID != "ses_1" || p.Operation != "issues.delete" || p.Path != "/repos/acme/x/issues/7" || p.Fields["issue"] != "7" || p.State != "pending" {
		t.Errorf("approval = %+v", p)
	}
	m := r.json(t)["approvals"].([]any)[0].(map[string]any)
	for _, k := range []string{"id", "session_id", "connector_fqn", "tool", "operation", "method", "host", "path", "fields", "requested_at", "state"} {
		if _, ok := m[k]; !ok {
			t.Errorf("approval JSON lacks %q: %v", k, m)
		}
	}

	errTests := []struct {
		name, id, body string
		status         int
		code           contract.Code
	}{
		{"bad decision", p.ID, `{"decision":"maybe"}`, http.StatusBadRequest, CodeInvalidBody},
		{"bad remember", p.ID, `{"decision":"approve","remember":"forever"}`, http.StatusBadRequest, CodeInvalidBody},
		{"unknown id", "apr_nope", `{"decision":"approve"}`, http.StatusNotFound, CodeApprovalNotFound},
		{"no body", p.ID, ``, http.StatusBadRequest, CodeInvalidBody},
	}
	for _, tc := range errTests {
		r := h.do(http.MethodPost, "/v1/approvals/"+tc.id, adminToken, tc.body)
		if r.status != tc.status || r.errCode(t) != tc.code {
			t.Errorf("%s: = %d %s, want %d %s", tc.name, r.status, r.body, tc.status, tc.code)
		}
	}
	r = h.do(http.MethodPost, "/v1/approvals/"+p.ID, adminToken, `{"decision":"approve","remember":"once"}`)
	if r.status != http.StatusOK || r.json(t)["decision"] != "approved" {
		t.Fatalf("approve = %d %s", r.status, r.body)
	}
	select {
	case o := <-out:
		if o != approval.OutcomeApproved {
			t.Errorf("Await = %q, want approved", o)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Await did not return after the API approved")
	}
	r = h.do(http.MethodPost, "/v1/approvals/"+p.ID, adminToken, `{"decision":"deny"}`)
	if r.status != http.StatusConflict || r.errCode(t) != CodeApprovalAlreadyDecided {
		t.Errorf("second decision = %d %s, want 409", r.status, r.body)
	}
	r = h.do(http.MethodGet, "/v1/approvals?state=decided", adminToken, nil)
	if err := json.Unmarshal(r.body, &list); err != nil || len(list.Approvals) != 1 || list.Approvals[0].Decision != "approved" {
		t.Errorf("decided = %s", r.body)
	}
	r = h.do(http.MethodGet, "/v1/approvals", adminToken, nil)
	if err := json.Unmarshal(r.body, &list); err != nil || len(list.Approvals) != 0 || !strings.Contains(string(r.body), `"approvals":[]`) {
		t.Errorf("default (pending) list = %s, want an empty array", r.body)
	}
	if r := h.do(http.MethodGet, "/v1/approvals?state=bogus", adminToken, nil); r.status != http.StatusBadRequest || r.errCode(t) != CodeInvalidQuery {
		t.Errorf("state=bogus = %d %s", r.status, r.body)
	}
}

func TestPanicIsInternalError(t *testing.T) {
	h := newHarness(t, harnessOptions{mutate: func(c *Config) {
		c.Policy = func() *policy.Snapshot { panic("boom") }
	}})
	_, sec, err := h.reg.Create(session.CreateOptions{Snapshot: specs.Compile(t, specGH)})
	if err != nil {
		t.Fatal(err)
	}
	r := h.run(sec.APIToken, RunRequest{ConnectorFQN: fqnGH, Tool: "gh", Operation: "x"})
	if r.status != http.StatusInternalServerError || r.errCode(t) != CodeInternal || strings.Contains(string(r.body), "boom") {
		t.Errorf("= %d %s, want 500 internal_error without the panic value", r.status, r.body)
	}
	if h.logs.FilterMessage("api internal error").Len() != 1 {
		t.Error("the panic was not logged once")
	}
}
