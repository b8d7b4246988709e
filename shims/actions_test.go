package shims

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/aileron-dev/aileron-proxy/actions"
	"github.com/aileron-dev/aileron-proxy/internal/testkit"
	"github.com/aileron-dev/aileron-proxy/policy"
	"path/filepath"
)

const actionListIssues = `+++
name = "list-issues"
version = "1.0.0"
[match]
intent = "list the open issues of a repository"
[[execute]]
connector = "github://acme/aileron-connector-github"
op = "issues.list"
[execute.args]
state = "open"
[[inputs]]
name = "owner"
required = true
description = "Repository owner."
[[inputs]]
name = "repo"
required = true
+++

# List issues

Lists the open issues, newest first.
`

const actionOpenIssue = `+++
name = "open-issue"
[match]
intent = "open an issue"
[[execute]]
connector = "github://acme/aileron-connector-github"
op = "issues.create"
[execute.args]
owner = "acme"
repo = "widgets"
[approval]
required = true
[[inputs]]
name = "title"
required = true
+++
`

const actionSendMail = `+++
name = "send-mail"
[[execute]]
connector = "github://acme/aileron-connector-google"
op = "gmail.messages.send"
[[inputs]]
name = "raw"
required = true
+++
`

// installedActions parses docs and resolves them against conns.
func installedActions(t *testing.T, conns []policy.Connector, docs ...string) []actions.Installed {
	t.Helper()
	var out []actions.Installed
	for _, d := range docs {
		a, err := actions.Parse([]byte(d))
		if err != nil {
			t.Fatalf("actions.Parse: %v", err)
		}
		target, problems := a.Check(conns)
		if len(problems) > 0 {
			t.Fatalf("Check(%s) = %v", a.Name, problems)
		}
		out = append(out, actions.Installed{Hash: "sha256:" + a.Name, Action: a, Target: target, Status: actions.StatusOK})
	}
	return out
}

// fakeAction is an active action on fqn without a spec behind it.
func fakeAction(name, fqn string) actions.Installed {
	a, _ := actions.Parse([]byte("+++\nname = \"" + name + "\"\n[[execute]]\nconnector = \"" + fqn + "\"\nop = \"op\"\n+++\n"))
	return actions.Installed{Action: a, Status: actions.StatusOK,
		Target: actions.Target{ConnectorFQN: fqn, Tool: "t", Operation: &policy.Operation{Name: "op"}}}
}

func TestActionCommand(t *testing.T) {
	for _, tc := range []struct{ fqn, want string }{
		{"github://acme/aileron-connector-google", "google"},
		{"github://acme/connector-slack", "slack"},
		{"github://acme/Aileron-Connector-Jira", "jira"},
		{"github://acme/aileron-connector-google/sub/path", "google"},
		{"local://acme/My_Tool.v2", "my_tool.v2"},
		{"github://acme/aileron-connector-", "aileron-connector-"},
		{"github://acme/.hidden", "hidden"},
		{"github://acme/___", ""},
		{"not an fqn", ""},
	} {
		if got := ActionCommand(tc.fqn); got != tc.want {
			t.Errorf("ActionCommand(%q) = %q, want %q", tc.fqn, got, tc.want)
		}
	}
}

// TestActionToolsGolden renders the fixture connectors with two actions on
// the GitHub connector: tools.txt lists the action tool first, then the
// connector tools; the action shim and its help are golden.
func TestActionToolsGolden(t *testing.T) {
	sh := testkit.RequireTool(t, "sh")
	conns := fixtureConnectors(t)
	acts := installedActions(t, conns, actionOpenIssue, actionListIssues)
	r, err := Render(RenderOptions{Connectors: conns, AgentCommand: "claude", Actions: acts})
	if err != nil {
		t.Fatalf("Render(fixtures + actions) = %v", err)
	}
	testkit.Golden(t, filepath.Join("testdata", "tools-actions.txt.golden"), r.ToolsTxt)
	var cmds []string
	for _, s := range r.Shims {
		cmds = append(cmds, s.Command)
		if s.Command != "github" {
			continue
		}
		if strings.Join(s.Actions, ",") != "list-issues,open-issue" || s.Tool != "" {
			t.Errorf("action shim = %+v, want actions list-issues, open-issue", s)
		}
		testkit.Golden(t, filepath.Join("testdata", "github-actions.sh.golden"), s.Script)
		testkit.Golden(t, filepath.Join("testdata", "github-actions.help.golden"), helpTranscript(t, []string{sh}, s, s.Actions))
	}
	if got := strings.Join(cmds, " "); got != "gh-api github google" {
		t.Errorf("commands = %q, want %q", got, "gh-api github google")
	}
	// Inactive actions render nothing.
	acts[0].Status = actions.StatusSuperseded
	acts[1].Status = actions.StatusBrokenPrefix + "gone"
	r, err = Render(RenderOptions{Connectors: conns, Actions: acts})
	if err != nil || strings.Contains(string(r.ToolsTxt), "actions") {
		t.Errorf("Render with inactive actions = %v\n%s", err, r.ToolsTxt)
	}
}

func TestActionToolConflicts(t *testing.T) {
	conns := fixtureConnectors(t)
	for _, tc := range []struct {
		name     string
		opts     RenderOptions
		kind     ConflictKind
		contains []string
	}{
		{"spec tool", RenderOptions{Connectors: conns, Actions: installedActions(t, conns, actionSendMail)}, ConflictAction, []string{
			`command "google" of tool "google" of github://acme/aileron-connector-google`,
			"conflicts with the action tool of github://acme/aileron-connector-google (installed actions: send-mail)",
			`"aileron-proxy connector remove github://acme/aileron-connector-google"`, `"aileron-proxy action remove send-mail"`}},
		{"agent", RenderOptions{AgentCommand: "/usr/bin/GitHub", Actions: []actions.Installed{fakeAction("a", "github://x/aileron-connector-github")}}, ConflictAgent, []string{
			`would shadow the agent command "github"`, `"aileron-proxy action remove a"`}},
		{"reserved", RenderOptions{Reserved: []string{"github"}, Actions: []actions.Installed{fakeAction("a", "github://x/aileron-connector-github")}}, ConflictReserved, []string{
			`would shadow "github", a command the sandbox mounts`}},
		{"basic", RenderOptions{Actions: []actions.Installed{fakeAction("a", "github://x/connector-curl")}}, ConflictBasic, []string{
			`would shadow the basic sandbox command "curl"`}},
		{"two connectors", RenderOptions{Actions: []actions.Installed{fakeAction("a", "github://x/aileron-connector-github"), fakeAction("b", "github://y/github")}}, ConflictDuplicate, []string{
			"the action tool of github://x/aileron-connector-github (installed actions: a) and the action tool of github://y/github (installed actions: b)"}},
		{"help word", RenderOptions{Actions: []actions.Installed{fakeAction("help", "github://x/aileron-connector-github")}}, ConflictInvalid, []string{
			`action "help" collides with the shim's own flags`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Render(tc.opts)
			var ce *ConflictError
			if !errors.As(err, &ce) || r != nil {
				t.Fatalf("Render = %v, %v; want a *ConflictError", r, err)
			}
			var found bool
			for _, c := range ce.Conflicts {
				if c.Kind == tc.kind {
					found = true
					for _, s := range tc.contains {
						if !strings.Contains(c.Message, s) {
							t.Errorf("conflict %q does not contain %q", c.Message, s)
						}
					}
				}
			}
			if !found {
				t.Errorf("conflicts = %v, want one of kind %s", ce.Conflicts, tc.kind)
			}
		})
	}
}

// actionEmulator stands in for POST /v1/actions/{name}/run.
type actionEmulator struct {
	mu     sync.Mutex
	paths  []string
	bodies []string
	leaks  []string
	// seen is set when a command line holding the run path (the waiting
	// wget's) was in /proc: proof that the leak scan sees the client.
	seen bool
}

func (e *actionEmulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	leaks := argvHolding(emuToken)
	seen := len(argvHolding("/v1/actions/")) > 0
	e.mu.Lock()
	e.seen = e.seen || seen
	e.paths = append(e.paths, r.URL.Path)
	e.bodies = append(e.bodies, string(body))
	e.leaks = append(e.leaks, leaks...)
	e.mu.Unlock()
	var req struct {
		Args     json.RawMessage `json:"args"`
		APIToken string          `json:"api_token"`
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	err := dec.Decode(&req)
	auth := r.Header.Get("Authorization")
	switch {
	case auth != "Bearer "+emuToken && (auth != "" || req.APIToken != emuToken):
		apiError(w, http.StatusUnauthorized, "unauthorized", "missing or invalid session token")
		return
	case err != nil || len(req.Args) == 0:
		apiError(w, http.StatusBadRequest, "invalid_body", "the body must be {\"args\":{...}}")
		return
	}
	switch r.URL.Path {
	case "/v1/actions/list-issues/run":
		w.Header().Set(HeaderUpstreamStatus, "200")
		w.Header().Set(HeaderAuditID, emuAuditID)
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get(HeaderOutput) == OutputBody {
			_, _ = w.Write(req.Args)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "proxied", "upstream_status": 200, "headers": map[string]string{}, "body": req.Args, "action": "list-issues"})
	case "/v1/actions/open-issue/run":
		apiError(w, http.StatusForbidden, "approval_denied", "open-issue needs a person's approval and it was denied")
	default:
		apiError(w, http.StatusNotFound, "action_not_found", "no such action")
	}
}

// TestActionShims runs the action shim under dash + GNU wget and BusyBox
// sh + BusyBox wget against actionEmulator.
func TestActionShims(t *testing.T) {
	conns := fixtureConnectors(t)
	r, err := Render(RenderOptions{Actions: installedActions(t, conns, actionListIssues, actionOpenIssue)})
	if err != nil || len(r.Shims) != 1 {
		t.Fatalf("Render = %v, %v", r, err)
	}
	script := writeScript(t, r.Shims[0])
	for _, pairName := range []string{"dash+gnu-wget", "busybox"} {
		t.Run(pairName, func(t *testing.T) {
			pair := newShellPair(t, pairName)
			emu := &actionEmulator{}
			srv := httptest.NewServer(emu)
			defer srv.Close()
			argvLog := t.TempDir() + "/argv"

			res := runPair(t, pair, script, srv.URL, map[string]string{"WGET_ARGV_LOG": argvLog}, "list-issues", "--args", `{"owner":"acme","repo":"w"}`)
			if res.code != ExitOK || res.stdout != `{"owner":"acme","repo":"w"}` {
				t.Errorf("list-issues: exit %d stdout %q stderr %q, want 0 and the upstream body", res.code, res.stdout, res.stderr)
			}
			emu.mu.Lock()
			path, body := emu.paths[len(emu.paths)-1], emu.bodies[len(emu.bodies)-1]
			emu.mu.Unlock()
			if path != "/v1/actions/list-issues/run" || !strings.HasPrefix(body, `{"args":{"owner":"acme","repo":"w"}`) {
				t.Errorf("the daemon got %s %s, want /v1/actions/list-issues/run with {\"args\":...}", path, body)
			}
			// The wrapper logs GNU wget's argv; BusyBox sh runs its own
			// applet, which only the /proc scan of the emulator sees.
			if raw, _ := os.ReadFile(argvLog); strings.Contains(string(raw), emuToken) || pair.gnu && len(raw) == 0 {
				t.Errorf("wget's argv holds the token (or was not logged): %q", raw)
			}
			emu.mu.Lock()
			leaks, seen := emu.leaks, emu.seen
			emu.mu.Unlock()
			if len(leaks) > 0 || !seen {
				t.Errorf("command lines holding the token: %v (client seen in /proc: %v)", leaks, seen)
			}

			res = runPair(t, pair, script, srv.URL, nil, "list-issues", "--args", `{"owner":"a","repo":"b"}`, "--json")
			if res.code != ExitOK || !strings.Contains(res.stdout, `"action":"list-issues"`) || !strings.Contains(res.stdout, `"status":"proxied"`) {
				t.Errorf("--json: exit %d stdout %q, want the envelope", res.code, res.stdout)
			}
			res = runPair(t, pair, script, srv.URL, nil, "open-issue", "--args", `{"title":"x"}`)
			if res.code != ExitDenied {
				t.Errorf("denied: exit %d stderr %q, want %d", res.code, res.stderr, ExitDenied)
			}
			if pair.gnu && !strings.Contains(res.stderr, "approval_denied") {
				t.Errorf("denied under GNU wget: stderr %q, want the daemon's reason", res.stderr)
			}
			res = runPair(t, pair, script, srv.URL, nil, "close-issue")
			if res.code != ExitUsage || !strings.Contains(res.stderr, `unknown action "close-issue"; actions: list-issues, open-issue`) {
				t.Errorf("unknown action: exit %d stderr %q", res.code, res.stderr)
			}
			res = runPair(t, pair, script, srv.URL, nil, "--help")
			if res.code != ExitOK || !strings.Contains(res.stdout, "list-issues - list the open issues of a repository") || !strings.Contains(res.stdout, "approval: required") {
				t.Errorf("--help: exit %d stdout %q", res.code, res.stdout)
			}
			res = runPair(t, pair, script, srv.URL, map[string]string{"AILERON_API_URL": ""}, "list-issues")
			if res.code != ExitUnavailable {
				t.Errorf("without AILERON_API_URL: exit %d, want %d", res.code, ExitUnavailable)
			}
		})
	}
}

// TestPublishedActionTools renders the action tool of Aileron's published
// google manifests (installed unchanged, with the spec written for them):
// tools.txt lists it next to the spec's tool, and --help shows the labels
// and the multi-line hint the manifests declare.
func TestPublishedActionTools(t *testing.T) {
	sh := testkit.RequireTool(t, "sh")
	pub := filepath.Join("..", "actions", "testdata", "aileron-connector-google")
	conns := []policy.Connector{loadConnector(t, filepath.Join(pub, "connector.aileron.connector.v1.json"))}
	files, _ := filepath.Glob(filepath.Join(pub, "actions", "*", actions.FileName))
	if len(files) != 21 {
		t.Fatalf("found %d published manifests, want 21", len(files))
	}
	var acts []actions.Installed
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		a, target, problems := actions.Inspect(data, conns)
		if actions.HasErrors(problems) {
			t.Fatalf("Inspect(%s) = %v", f, problems)
		}
		acts = append(acts, actions.Installed{Hash: "sha256:" + a.Name, Action: a, Target: target, Status: actions.StatusOK})
	}
	r, err := Render(RenderOptions{Connectors: conns, AgentCommand: "claude", Actions: acts})
	if err != nil {
		t.Fatalf("Render(published actions) = %v", err)
	}
	testkit.Golden(t, filepath.Join("testdata", "published-tools.txt.golden"), r.ToolsTxt)
	var found bool
	for _, s := range r.Shims {
		if s.Command != "google" {
			continue
		}
		found = true
		if len(s.Actions) != 21 {
			t.Errorf("google shim runs %d actions, want 21", len(s.Actions))
		}
		help := helpTranscript(t, []string{sh}, s, []string{"send-email", "move-file", "update-doc"})
		for _, want := range []string{
			"to       string  required  To: Comma-separated recipient email addresses",
			`body     string  required  Body (multi-line: write line breaks as \n in the JSON string): Plain-text body`,
			"add_parents     string  required  Move to (folder ids): Comma-separated",
			"requests     array   required  (each element an object): Array of Docs API",
		} {
			if !strings.Contains(string(help), want) {
				t.Errorf("help lacks %q", want)
			}
		}
		testkit.Golden(t, filepath.Join("testdata", "published-google.help.golden"), help)
	}
	if !found {
		t.Errorf("no google action tool among %d shims", len(r.Shims))
	}
}
