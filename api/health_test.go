package api

import (
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
)

// downAudit is a memAudit whose log can be made unavailable.
type downAudit struct {
	*memAudit
	down atomic.Bool
}

func (a *downAudit) Available() bool { return !a.down.Load() }
func (a *downAudit) Status() audit.Status {
	if !a.down.Load() {
		return audit.Status{Available: true}
	}
	return audit.Status{Since: time.Date(2026, 5, 4, 3, 2, 1, 0, time.UTC), WriteErrors: 3, Lost: 1,
		Err: &writeErr{"/home/op/.aileron/audit/audit.jsonl", syscall.ENOSPC}}
}

type writeErr struct {
	path string
	err  error
}

func (e *writeErr) Error() string { return "writing " + e.path + ": " + e.err.Error() }
func (e *writeErr) Unwrap() error { return e.err }

// TestAuditUnavailableRefusesStateChanges: while the audit log cannot be
// written, calls that change state get 503 audit_unavailable and change
// nothing, reads still answer, and /healthz says so without naming paths.
func TestAuditUnavailableRefusesStateChanges(t *testing.T) {
	da := &downAudit{memAudit: newMemAudit()}
	h := newHarness(t, harnessOptions{mutate: func(c *Config) { c.Audit = da }})
	r := h.do(http.MethodGet, "/healthz", "", nil)
	if r.status != http.StatusOK || r.json(t)["status"] != "ok" {
		t.Fatalf("GET /healthz while available = %d %s", r.status, r.body)
	}
	live := h.createSession("github://acme/conn-gh")

	da.down.Store(true)
	r = h.do(http.MethodGet, "/healthz", "", nil)
	body := r.json(t)
	a, _ := body["audit"].(map[string]any)
	if r.status != http.StatusServiceUnavailable || body["status"] != "degraded" || a["available"] != false ||
		a["code"] != "audit_unavailable" || a["reason"] != "no space left on device" || a["write_errors"] != 3.0 {
		t.Errorf("GET /healthz while unavailable = %d %s", r.status, r.body)
	}
	if want := "$AILERON_HOME/audit"; !contains(a["fix"], want) {
		t.Errorf("/healthz fix %q does not name %s", a["fix"], want)
	}
	if contains(string(r.body), "/home/op") {
		t.Errorf("/healthz leaks a path: %s", r.body)
	}
	for _, c := range []struct{ method, path, token string }{
		{http.MethodPost, "/v1/sessions", adminToken},
		{http.MethodDelete, "/v1/sessions/" + live.ID, adminToken},
		{http.MethodPost, "/v1/connector-operations/run", live.APIToken},
	} {
		r := h.do(c.method, c.path, c.token, map[string]any{"connectors": []string{"github://acme/conn-gh"}})
		if r.status != http.StatusServiceUnavailable || r.errCode(t) != contract.CodeAuditUnavailable {
			t.Errorf("%s %s while the audit log is unavailable = %d %s, want 503 audit_unavailable", c.method, c.path, r.status, r.body)
		}
	}
	if r := h.do(http.MethodGet, "/v1/sessions", adminToken, nil); r.status != http.StatusOK {
		t.Errorf("GET /v1/sessions while the audit log is unavailable = %d, want 200 (reads still answer)", r.status)
	}
	if _, ok := h.reg.Get(live.ID); !ok {
		t.Error("the refused DELETE ended the session anyway")
	}
	if n := len(da.byName(audit.EventSessionCreated)); n != 1 {
		t.Errorf("%d session.created events, want only the one before the episode", n)
	}

	da.down.Store(false)
	if r := h.do(http.MethodDelete, "/v1/sessions/"+live.ID, adminToken, nil); r.status != http.StatusOK {
		t.Errorf("DELETE after recovery = %d %s", r.status, r.body)
	}
}

func contains(v any, sub string) bool {
	s, _ := v.(string)
	return strings.Contains(s, sub)
}
