package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/actions"
	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
)

// testActions parses manifests and resolves them against specGH.
func testActions(t *testing.T, h *harness, docs ...string) map[string]actions.Installed {
	t.Helper()
	out := map[string]actions.Installed{}
	for _, d := range docs {
		a, err := actions.Parse([]byte(d))
		if err != nil {
			t.Fatalf("actions.Parse: %v", err)
		}
		target, problems := a.Check(h.snap.Load().Connectors())
		if len(problems) > 0 {
			t.Fatalf("Check(%s): %v", a.Name, problems)
		}
		out[a.Name] = actions.Installed{Action: a, Target: target, Status: actions.StatusOK}
	}
	return out
}

const actionListOpen = `+++
name = "list-open"
[[execute]]
connector = "github://acme/conn-gh"
op = "issues.list"
[execute.args]
state = "open"
per_page = 5
[[inputs]]
name = "owner"
required = true
[[inputs]]
name = "repo"
required = true
+++
Lists open issues.
`

const actionClose = `+++
name = "close-issue"
[[execute]]
connector = "github://acme/conn-gh"
op = "issues.create"
[execute.args]
owner = "acme"
repo = "w"
[approval]
required = true
[[inputs]]
name = "title"
required = true
+++
`

func newActionHarness(t *testing.T) *harness {
	t.Helper()
	var h *harness
	h = newHarness(t, harnessOptions{withProxy: true, mutate: func(c *Config) {
		c.Actions = func() map[string]actions.Installed { return testActions(t, h, actionListOpen, actionClose) }
	}})
	return h
}

func (h *harness) runAction(token, name string, body any) response {
	h.t.Helper()
	return h.do(http.MethodPost, "/v1/actions/"+name+"/run", token, body)
}

func TestActionRunThroughProxy(t *testing.T) {
	h := newActionHarness(t)
	cs := h.createSession(fqnGH)
	r := h.runAction(cs.APIToken, "list-open", `{"args":{"owner":"acme","repo":"widgets"}}`)
	env := envelope(t, r)
	if env.Action != "list-open" || env.UpstreamStatus != http.StatusOK {
		t.Errorf("envelope action %q upstream %d, want list-open 200", env.Action, env.UpstreamStatus)
	}
	got := h.up.last(t)
	if got.Path != "/repos/acme/widgets/issues" || got.RawQuery != "per_page=5&state=open" {
		t.Errorf("upstream got %s?%s, want the presets per_page=5&state=open", got.Path, got.RawQuery)
	}
	if got.Auth != "Bearer "+canary {
		t.Errorf("upstream Authorization = %q, want the injected credential", got.Auth)
	}
	if strings.Contains(string(r.body), canary) {
		t.Error("the API response carries the credential")
	}
	ev := h.audit.waitFor(t, audit.EventActionRun)
	if ev.Action != "list-open" || ev.Operation != "issues.list" || ev.ConnectorFQN != fqnGH || ev.Status != http.StatusOK || ev.SessionID != cs.ID {
		t.Errorf("action.run event = %+v", ev)
	}
	raw, _ := json.Marshal(h.audit.byName(audit.EventActionRun))
	if strings.Contains(string(raw), "widgets") {
		t.Errorf("action.run records an argument value: %s", raw)
	}
	h.assertNoSecrets(cs.APIToken, proxySecret(t, cs))
}

func TestActionRunRefusals(t *testing.T) {
	h := newActionHarness(t)
	cs := h.createSession(fqnGH)
	before := h.up.count.Load()
	for _, tc := range []struct {
		name, action, body string
		code               contract.Code
		msg                string
		status             int
	}{
		{"undeclared arg cannot override a preset", "list-open", `{"args":{"owner":"a","repo":"b","state":"closed"}}`, CodeInvalidArgs, "state: not an input of action", 400},
		{"missing required input", "list-open", `{"args":{"owner":"a"}}`, CodeInvalidArgs, "repo: required input is missing", 400},
		{"wrong type", "list-open", `{"args":{"owner":1,"repo":"b"}}`, CodeInvalidArgs, "owner: must be a string", 400},
		{"unknown action", "nope", `{"args":{}}`, CodeActionNotFound, `installed actions: close-issue, list-open`, 404},
		{"unknown body field", "list-open", `{"argz":{}}`, CodeInvalidBody, "argz", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.runAction(cs.APIToken, tc.action, tc.body)
			if r.status != tc.status || r.errCode(t) != tc.code || !strings.Contains(string(r.body), tc.msg) {
				t.Errorf("POST /v1/actions/%s/run %s = %d %s, want %d %s containing %q", tc.action, tc.body, r.status, r.body, tc.status, tc.code, tc.msg)
			}
		})
	}
	if h.up.count.Load() != before {
		t.Error("a refused action reached the upstream")
	}
	if r := h.runAction("", "list-open", `{"args":{"owner":"a","repo":"b"}}`); r.status != http.StatusUnauthorized {
		t.Errorf("without a token: %d, want 401", r.status)
	}
}

func TestActionApprovalHeldThenDecided(t *testing.T) {
	h := newActionHarness(t)
	cs := h.createSession(fqnGH)
	hold := func() (<-chan response, string) {
		ch := make(chan response, 1)
		go func() { ch <- h.runAction(cs.APIToken, "close-issue", `{"args":{"title":"done"}}`) }()
		h.audit.waitFor(t, audit.EventApprovalRequested)
		var list ApprovalList
		r := h.do(http.MethodGet, "/v1/approvals", adminToken, nil)
		if err := json.Unmarshal(r.body, &list); err != nil || len(list.Approvals) != 1 || list.Approvals[0].Operation != "issues.create" {
			t.Fatalf("pending approvals = %s", r.body)
		}
		return ch, list.Approvals[0].ID
	}
	ch, id := hold()
	if n := h.up.count.Load(); n != 0 {
		t.Fatalf("a held action reached the upstream (%d)", n)
	}
	if r := h.do(http.MethodPost, "/v1/approvals/"+id, adminToken, DecideRequest{Decision: "approve"}); r.status != http.StatusOK {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	env := envelope(t, waitResponse(t, ch))
	if env.Action != "close-issue" {
		t.Errorf("envelope action = %q", env.Action)
	}
	if got := h.up.last(t); got.Method != http.MethodPost || got.Path != "/repos/acme/w/issues" {
		t.Errorf("upstream got %s %s, want POST /repos/acme/w/issues", got.Method, got.Path)
	}

	before := h.up.count.Load()
	ch, id = hold()
	if r := h.do(http.MethodPost, "/v1/approvals/"+id, adminToken, DecideRequest{Decision: "deny"}); r.status != http.StatusOK {
		t.Fatalf("deny: %d %s", r.status, r.body)
	}
	r := waitResponse(t, ch)
	if r.status != http.StatusForbidden || r.errCode(t) != "approval_denied" {
		t.Errorf("denied action = %d %s, want 403 approval_denied", r.status, r.body)
	}
	if h.up.count.Load() != before {
		t.Error("a denied action reached the upstream")
	}
	evs := h.audit.byName(audit.EventActionRun)
	if len(evs) != 2 || evs[0].Status != 200 || evs[1].Status != 403 || evs[1].Reason != "approval_denied" {
		t.Errorf("action.run events = %+v, want a 200 then a 403 approval_denied", evs)
	}
}
