package api

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/shims"
)

// TestRunShimProtocol covers what POSIX sh shims rely on: the upstream
// status and audit id in headers, and the raw body on request.
func TestRunShimProtocol(t *testing.T) {
	h := newHarness(t, harnessOptions{withProxy: true})
	cs := h.createSession(fqnGH)
	call := `{"connector_fqn":"github://acme/conn-gh","tool":"gh","operation":"issues.create","args":{"owner":"o","repo":"r","title":"t"}}`

	env := h.run(cs.APIToken, call)
	e := envelope(t, env)
	if got := env.header.Get(HeaderUpstreamStatus); got != strconv.Itoa(e.UpstreamStatus) {
		t.Errorf("%s = %q on an envelope reply, want %d", HeaderUpstreamStatus, got, e.UpstreamStatus)
	}
	if got := env.header.Get(HeaderAuditID); got == "" || got != e.AuditID {
		t.Errorf("%s = %q, want the envelope's audit_id %q", HeaderAuditID, got, e.AuditID)
	}

	raw := h.run(cs.APIToken, call, HeaderOutput, OutputBody)
	if raw.status != http.StatusOK || raw.header.Get(HeaderUpstreamStatus) != "201" || raw.header.Get(HeaderAuditID) == "" {
		t.Fatalf("X-Aileron-Output: body = %d %v", raw.status, raw.header)
	}
	if ct := raw.header.Get("Content-Type"); ct != e.ContentType {
		t.Errorf("raw body Content-Type = %q, want the upstream's %q", ct, e.ContentType)
	}
	if strings.TrimSpace(string(raw.body)) != string(e.Body) {
		t.Errorf("raw body = %s\nwant the upstream body %s", raw.body, e.Body)
	}
}

func TestEndSessionWithExitCode(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	cs := h.createSession(fqnGH)
	if r := h.do(http.MethodDelete, "/v1/sessions/"+cs.ID+"?exit_code=300", adminToken, nil); r.status != http.StatusBadRequest || r.errCode(t) != CodeInvalidBody {
		t.Fatalf("exit_code=300 = %d %s, want 400 invalid_body", r.status, r.body)
	}
	if r := h.do(http.MethodDelete, "/v1/sessions/"+cs.ID+"?exit_code=3", adminToken, nil); r.status != http.StatusOK {
		t.Fatalf("end with exit_code=3 = %d %s", r.status, r.body)
	}
	if _, err := h.reg.Lookup(cs.ID); err == nil {
		t.Error("the session is still live after DELETE")
	}
}

// TestShimProtocolNamesMatch keeps the names the generated sh shims send and
// read (shims cannot import api) equal to the API's.
func TestShimProtocolNamesMatch(t *testing.T) {
	for _, p := range [][2]string{
		{shims.HeaderOutput, HeaderOutput},
		{shims.OutputBody, OutputBody},
		{shims.HeaderUpstreamStatus, HeaderUpstreamStatus},
		{shims.HeaderAuditID, HeaderAuditID},
		{shims.HeaderSessionID, HeaderSessionID},
	} {
		if p[0] != p[1] {
			t.Errorf("shims uses %q where the API uses %q", p[0], p[1])
		}
	}
}
