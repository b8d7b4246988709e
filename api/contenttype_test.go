package api

import (
	"net/http"
	"testing"
)

// TestJSONRoutesRequireJSONContentType sends each JSON route a valid body
// under other content types: each is 415 and nothing runs.
func TestJSONRoutesRequireJSONContentType(t *testing.T) {
	h := newHarness(t, harnessOptions{withProxy: true})
	cs := h.createSession(fqnGH)
	run := `{"connector_fqn":"github://acme/conn-gh","tool":"gh","operation":"text.get"}`
	bodyToken := `{"connector_fqn":"github://acme/conn-gh","tool":"gh","operation":"text.get","api_token":"` + cs.APIToken + `"}`
	routes := []struct {
		name, method, path, token, body string
	}{
		{"create session", http.MethodPost, "/v1/sessions", adminToken, `{"ttl":"1h"}`},
		{"decide approval", http.MethodPost, "/v1/approvals/apr_none", adminToken, `{"decision":"approve"}`},
		{"run", http.MethodPost, "/v1/connector-operations/run", cs.APIToken, run},
		{"run with body token", http.MethodPost, "/v1/connector-operations/run", "", bodyToken},
		{"sandbox proxy", http.MethodPost, "/v1/sandbox-proxy/requests", cs.APIToken, `{"method":"GET","url":"https://api.github.test/text"}`},
	}
	for _, rt := range routes {
		for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "application/jsonx",
			"application/json; charset=latin1", "application/json; x=1", "application/json;;"} {
			t.Run(rt.name+" "+ct, func(t *testing.T) {
				r := h.do(rt.method, rt.path, rt.token, rt.body, "Content-Type", ct)
				if r.status != http.StatusUnsupportedMediaType || r.errCode(t) != CodeUnsupportedMediaType {
					t.Fatalf("%s %s with Content-Type %q = %d %s, want 415 %s", rt.method, rt.path, ct, r.status, r.body, CodeUnsupportedMediaType)
				}
			})
		}
	}
	if n := len(h.reg.List()); n != 1 {
		t.Errorf("%d sessions exist, want only the one created before", n)
	}
	if n := h.up.count.Load(); n != 0 {
		t.Errorf("the upstream received %d requests, want none", n)
	}
	// JSON with or without a UTF-8 charset is accepted.
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON; Charset=\"UTF-8\""} {
		r := h.do(http.MethodPost, "/v1/connector-operations/run", cs.APIToken, run, "Content-Type", ct)
		if r.status != http.StatusOK {
			t.Errorf("run with Content-Type %q = %d %s, want 200", ct, r.status, r.body)
		}
	}
	// A bodiless create still takes the defaults.
	if r := h.do(http.MethodPost, "/v1/sessions", adminToken, nil); r.status != http.StatusCreated {
		t.Errorf("POST /v1/sessions without a body = %d %s, want 201", r.status, r.body)
	}
}
