package proxy

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// failingAudit is a Recorder whose log can be made unavailable, as
// audit.Writer is when its disk is full.
type failingAudit struct {
	*testkit.Recorder
	down atomic.Bool
}

func (a *failingAudit) Available() bool { return !a.down.Load() }
func (a *failingAudit) Status() audit.Status {
	return audit.Status{Available: a.Available()}
}

var _ audit.Health = (*failingAudit)(nil)

// TestAuditUnavailableFailsClosed: while the audit log cannot be written,
// nothing that would need an audit line is forwarded (intercepted requests
// over HTTP/1.1 and HTTP/2, passthrough tunnels, plain passthrough), no
// credential is injected, denials are still answered, and forwarding
// resumes as soon as the log is available again.
func TestAuditUnavailableFailsClosed(t *testing.T) {
	fa := &failingAudit{Recorder: testkit.NewRecorder()}
	e := newEnv(t, func(c *Config) { c.Audit = fa })
	fa.down.Store(true)
	for _, pc := range protoCases {
		t.Run(pc.name, func(t *testing.T) {
			resp, err := e.client(pc.h2).Get("https://" + pc.host + "/user")
			d := wantRefusal(t, resp, err, http.StatusServiceUnavailable, contract.CodeAuditUnavailable.String())
			if !strings.Contains(d.Message, "$AILERON_HOME/audit") {
				t.Errorf("the refusal does not say what to free: %q", d.Message)
			}
			if got := resp.Header.Get(contract.HeaderDecision); got != contract.DecisionError {
				t.Errorf("%s = %q, want %q", contract.HeaderDecision, got, contract.DecisionError)
			}
			e.expectNothingSeen(t)
			// A denial is still answered.
			resp, err = e.client(pc.h2).Get("https://" + pc.host + "/not-an-operation")
			wantRefusal(t, resp, err, http.StatusForbidden, contract.CodeOperationNotAllowed.String())
		})
	}
	_, resp := e.connect(t, passHost+":443", true)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("CONNECT to a passthrough host = %d, want 503", resp.StatusCode)
	}
	resp, err := e.client(false).Get("http://" + plainPassHost + "/")
	wantRefusal(t, resp, err, http.StatusServiceUnavailable, contract.CodeAuditUnavailable.String())
	e.expectNothingSeen(t)
	for _, ev := range fa.All() {
		if ev.Reason == contract.CodeAuditUnavailable.String() {
			t.Errorf("a refusal was audited although the log is unavailable: %+v", ev)
		}
	}
	if got := e.metric(t, "aileron_proxy_decisions_total", map[string]string{"result": "deny", "reason": "audit_unavailable"}); got != 4 {
		t.Errorf("decisions_total{deny,audit_unavailable} = %v, want 4", got)
	}

	fa.down.Store(false)
	resp, err = e.client(false).Get("https://" + apiHost + "/user")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("after the log recovered: status %d, want 200", resp.StatusCode)
	}
	if got := e.expectSeen(t).Header.Get("Authorization"); got != "Bearer "+testToken {
		t.Errorf("after the log recovered the upstream got Authorization %q", got)
	}
	fa.WaitFor(t, "of the request after recovery", func(ev audit.Event) bool {
		return ev.Event == audit.EventProxied && ev.Path == "/user" && ev.Status == http.StatusOK
	})
}
