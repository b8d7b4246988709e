package integration

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// notesSpec is a second connector on the test upstream whose action tool
// ("notes", from the repository segment) does not collide with its own
// tool ("notes-api"). GET /v1/send is free: the echo connector has POST.
const notesSpec = `{"schema_version": "aileron.connector.v1",
  "connector": {"fqn": "local://test/aileron-connector-notes", "version": "1.0.0"},
  "tools": [{"name": "notes-api", "operations": [
    {"name": "notes.find", "method": "GET", "path": "/v1/send", "hosts": ["api.example.test"], "credential": "bearer",
     "idempotency": "idempotent", "inputs": [{"name": "q", "required": true}, {"name": "limit", "type": "integer"}]}]}]}`

const notesAction = `+++
name = "find-notes"
version = "1.0.0"
[match]
intent = "find notes by text"
[[execute]]
connector = "local://test/aileron-connector-notes"
op = "notes.find"
[execute.args]
limit = 7
[[inputs]]
name = "q"
required = true
+++

Finds notes.
`

// installNotes installs the notes connector, its credential and the
// find-notes action into e's home, and waits until serve runs the action.
func installNotes(t *testing.T, e *env) {
	t.Helper()
	dir := t.TempDir()
	spec := filepath.Join(dir, "notes.aileron.connector.v1.json")
	manifest := filepath.Join(dir, "actions", "find-notes", "action.md")
	if err := os.MkdirAll(filepath.Dir(manifest), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spec, []byte(notesSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(manifest, []byte(notesAction), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, e.home, "", "connector", "install", spec)
	mustCLI(t, e.home, canary+"\n", "credential", "set", "local://test/aileron-connector-notes", "--kind", "bearer", "--stdin")
	mustCLI(t, e.home, "", "action", "install", dir)
}

// notesSession creates a session for the notes connector once serve has
// loaded it.
func notesSession(t *testing.T, e *env) sessionInfo {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, errOut, code := cli(t, e.home, "", "session", "create", "--json", "--connector", "local://test/aileron-connector-notes")
		if code == 0 {
			return parseSession(t, out)
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve never loaded the notes connector: %s", errOut)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestActionShimAgainstServe installs a connector and an action while serve
// runs, then calls the rendered action shim under BusyBox and GNU wget: the
// call goes through the real proxy, the upstream gets the injected
// credential and the preset, and the audit has action.run.
func TestActionShimAgainstServe(t *testing.T) {
	e := newEnv(t)
	installNotes(t, e)
	s := notesSession(t, e)
	dir := filepath.Join(t.TempDir(), "tools")
	mustCLI(t, e.home, "", "tools", "render", "--out", dir, "--agent", "claude")
	tools, _ := os.ReadFile(filepath.Join(dir, "tools.txt"))
	if !strings.HasPrefix(string(tools), "notes local://test/aileron-connector-notes -- installed Aileron connector used by actions: find-notes\n") {
		t.Fatalf("tools.txt does not start with the action line:\n%s", tools)
	}
	shim := filepath.Join(dir, "bin", "notes")
	sandboxEnv := []string{"AILERON_API_URL=" + e.d.APIURL + "/v1", "AILERON_TOKEN=" + s.APIToken, "AILERON_SESSION_ID=" + s.ID}
	for _, sh := range shells(t) {
		t.Run(sh.name, func(t *testing.T) {
			// serve notices the install within its reload interval.
			deadline := time.Now().Add(15 * time.Second)
			var out, errOut string
			var code int
			for {
				out, errOut, code = runShim(t, sh, shim, sandboxEnv, "find-notes", "--args", `{"q":"milk"}`)
				if code != 64 || time.Now().After(deadline) {
					break
				}
				time.Sleep(300 * time.Millisecond)
			}
			if code != 0 || out != `{"sent":true}` {
				t.Fatalf("find-notes = exit %d\nstdout %q\nstderr %q", code, out, errOut)
			}
			got := e.up.last(t)
			if got.Method != "GET" || got.Path != "/v1/send" || got.RawQuery != "limit=7&q=milk" {
				t.Errorf("upstream got %s %s?%s, want GET /v1/send?limit=7&q=milk (the preset limit)", got.Method, got.Path, got.RawQuery)
			}
			if got.Header.Get("Authorization") != "Bearer "+canary {
				t.Errorf("upstream Authorization = %q, want the injected credential", got.Header.Get("Authorization"))
			}
			if _, errOut, code := runShim(t, sh, shim, sandboxEnv, "find-notes", "--args", `{"q":"x","limit":1}`); code != 64 || errOut == "" {
				t.Errorf("overriding the preset = exit %d (%q), want 64", code, errOut)
			}
		})
	}
	ev := waitAudit(t, e.home, map[string]any{"event": "action.run", "action": "find-notes", "session_id": s.ID, "status": float64(200)})
	if ev["operation"] != "notes.find" || strings.Contains(strings.Join(auditLines(t, e.home), "\n"), "milk") {
		t.Errorf("action.run = %v; it must name the operation and no argument value", ev)
	}

	// Removing the action is noticed too.
	mustCLI(t, e.home, "", "action", "remove", "find-notes")
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, errOut, code := runShim(t, shells(t)[1], shim, sandboxEnv, "find-notes", "--args", `{"q":"milk"}`)
		if code == 64 && strings.Contains(errOut, "action_not_found") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve still runs the removed action: exit %d %s", code, errOut)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func auditLines(t *testing.T, home string) []string {
	raw, _ := os.ReadFile(filepath.Join(home, "audit", "audit.jsonl"))
	return strings.Split(string(raw), "\n")
}

// actionAgentScript checks the action manifests and the action shim inside
// the sandbox, one "ok NAME" or "FAIL NAME: detail" line each.
const actionAgentScript = `check() { if [ "$2" = 0 ]; then echo "ok $1"; else echo "FAIL $1: $3"; fi; }
has() { case $2 in *"$1"*) echo 0 ;; *) echo 1 ;; esac; }
m=$(ls /opt/aileron/manifests/actions/sha256/*/action.md 2>&1)
check manifest "$(has 'action.md' "$m")" "$m"
out=$(cat $m 2>&1)
check manifest-content "$(has 'name = "find-notes"' "$out")" "$out"
out=$(grep ' /opt/aileron/manifests/actions ' /proc/mounts)
check read-only "$(has ' ro,' "$out")" "mount: $out"
out=$(head -n 1 /etc/aileron/tools.txt)
check tools-txt "$(has 'notes local://test/aileron-connector-notes -- installed Aileron connector used by actions: find-notes' "$out")" "$out"
out=$(notes --help 2>&1)
check help "$(has 'find-notes - find notes by text' "$out")" "$out"
out=$(notes find-notes --args '{"q":"milk"}' 2>&1)
check run "$(has '{"sent":true}' "$out")" "$out"
echo done
`

// TestActionLaunchRealSandbox launches a real Docker and Podman sandbox
// with an installed action: its manifest is mounted read-only at
// /opt/aileron/manifests/actions and its shim runs through the proxy.
func TestActionLaunchRealSandbox(t *testing.T) {
	for _, kind := range []string{"docker", "podman"} {
		t.Run(kind, func(t *testing.T) {
			requireRuntime(t, kind)
			e := newEnv(t)
			installNotes(t, e)
			t.Cleanup(func() { removeSandboxes(t, kind, e.home) })
			// serve must run the action before the sandbox calls it.
			deadline := time.Now().Add(15 * time.Second)
			for !strings.Contains(mustCLI(t, e.home, "", "action", "list"), " ok ") && time.Now().Before(deadline) {
				time.Sleep(200 * time.Millisecond)
			}
			time.Sleep(2 * time.Second) // > serve's reload interval
			stdout, stderr, code := launchCLI(t, e.home, nil, 8*time.Minute,
				"launch", "--sandbox="+kind, "--project", agentWorkspace(t), "--", "sh", "-c", actionAgentScript)
			if code != 0 {
				t.Errorf("launch exited %d, want 0", code)
			}
			for _, want := range []string{"manifest", "manifest-content", "read-only", "tools-txt", "help", "run"} {
				if !strings.Contains(stdout, "ok "+want+"\n") {
					t.Errorf("check %s did not pass", want)
				}
			}
			if strings.Contains(stdout, "FAIL") || !strings.Contains(stdout, "done\n") || t.Failed() {
				t.Fatalf("agent output:\n%s\nlaunch stderr:\n%s", redactCanary(stdout), redactCanary(stderr))
			}
			if got := e.up.last(t); got.RawQuery != "limit=7&q=milk" || got.Header.Get("Authorization") != "Bearer "+canary {
				t.Errorf("upstream got ?%s with Authorization %q", got.RawQuery, got.Header.Get("Authorization"))
			}
			if m := regexp.MustCompile(`tools    (.*)`).FindStringSubmatch(stderr); m == nil || !strings.Contains(m[1], "notes (local://test/aileron-connector-notes)") {
				t.Errorf("banner tools line = %v", m)
			}
		})
	}
}

// TestActionLaunchConflict: the notes action tool is named like the agent,
// so launch stops before anything starts, naming the action.
func TestActionLaunchConflict(t *testing.T) {
	e := newEnv(t)
	installNotes(t, e)
	_, stderr, code := launchCLI(t, e.home, nil, 2*time.Minute, "launch", "--sandbox=docker", "--project", t.TempDir(), "--", "notes")
	if code != 1 {
		t.Errorf("launch exited %d, want 1", code)
	}
	for _, want := range []string{`would shadow the agent command "notes"`, "installed actions: find-notes", `"aileron-proxy action remove find-notes"`, "nothing was started"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}
