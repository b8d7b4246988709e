package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// agentCase is one agent recipe of `sandbox init --agent` run for real.
type agentCase struct {
	// name is the recipe; label, when set, names the subtest instead.
	name, label string
	// connector is the shipped spec file; credential the `credential set`
	// arguments after the FQN (the secret comes on stdin).
	connector, fqn string
	credential     []string
	// host is the model API; key reads the credential the stand-in got.
	host string
	key  func(recorded) string
	// argv runs the agent non-interactively.
	argv []string
	// telemetry are "host path-prefix" pairs of non-model calls (telemetry,
	// update checks, plugin installs) the agent may make and the proxy
	// refuses; any other refusal fails the test.
	telemetry []string
	// wantRefused says at least one of them must be refused and audited.
	wantRefused bool
}

const agentPrompt = "Reply with the canned text."

var agentCases = []agentCase{
	{
		name: "claude", connector: "anthropic", fqn: "github://aileron-dev/aileron-connector-anthropic",
		credential: []string{"--kind", "api_key", "--header", "x-api-key"},
		host:       "api.anthropic.com", key: func(r recorded) string { return r.Header.Get("X-Api-Key") },
		argv:      []string{"claude", "-p", agentPrompt},
		telemetry: []string{"api.anthropic.com /api/", "statsig.anthropic.com /", "http-intake.logs.us5.datadoghq.com /"},
	},
	{
		// The recipe's telemetry switches unset: the calls they stop are
		// refused quietly, one audit line each, and the agent carries on.
		name: "claude", label: "claude-telemetry-on", connector: "anthropic", fqn: "github://aileron-dev/aileron-connector-anthropic",
		credential: []string{"--kind", "api_key", "--header", "x-api-key"},
		host:       "api.anthropic.com", key: func(r recorded) string { return r.Header.Get("X-Api-Key") },
		argv: []string{"env", "-u", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "-u", "DISABLE_TELEMETRY", "-u", "DISABLE_ERROR_REPORTING",
			"-u", "DISABLE_AUTOUPDATER", "claude", "-p", agentPrompt},
		telemetry:   []string{"api.anthropic.com /api/", "statsig.anthropic.com /", "http-intake.logs.us5.datadoghq.com /", "storage.googleapis.com /claude-code-dist"},
		wantRefused: true,
	},
	{
		name: "gemini", connector: "google", fqn: "github://acme/aileron-connector-google",
		credential: []string{"--kind", "api_key", "--header", "x-goog-api-key"},
		host:       "generativelanguage.googleapis.com", key: func(r recorded) string { return r.Header.Get("X-Goog-Api-Key") },
		argv:      []string{"gemini", "-p", agentPrompt},
		telemetry: []string{"play.googleapis.com /log"},
	},
	{
		name: "codex", connector: "openai", fqn: "github://aileron-dev/aileron-connector-openai",
		credential: []string{"--kind", "bearer"},
		host:       "api.openai.com", key: func(r recorded) string { return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ") },
		argv:      []string{"codex", "exec", "--skip-git-repo-check", agentPrompt},
		telemetry: []string{"chatgpt.com /", "ab.chatgpt.com /", "api.github.com /"},
	},
	{
		name: "opencode", connector: "anthropic", fqn: "github://aileron-dev/aileron-connector-anthropic",
		credential: []string{"--kind", "api_key", "--header", "x-api-key"},
		host:       "api.anthropic.com", key: func(r recorded) string { return r.Header.Get("X-Api-Key") },
		argv: []string{"opencode", "run", "-m", "anthropic/claude-sonnet-4-5", agentPrompt},
		// registry.npmjs.org: its background install of @opencode-ai/plugin.
		telemetry: []string{"models.dev /", "opencode.ai /", "registry.npmjs.org /"},
	},
}

// sharedImages holds the sandbox images built once per test run, each for
// one runtime; TestMain removes them at the end.
var sharedImages sync.Map // "name/runtime" → *sharedImage

type sharedImage struct {
	once           sync.Once
	kind           string
	project, image string
	err            error
}

// buildSharedImage builds the sandbox image of a project named name once
// per test run: scaffold writes its .devcontainer (home is a throwaway
// aileron-proxy home), then `sandbox build` builds it, trusting env's
// SSL_CERT_FILE as the host's CA bundle. Tests launch with --project set
// to the returned directory and --sandbox-build=never.
func buildSharedImage(t *testing.T, name, kind string, env []string, scaffold func(home, project string) error) string {
	t.Helper()
	v, _ := sharedImages.LoadOrStore(name+"/"+kind, &sharedImage{})
	img := v.(*sharedImage)
	img.once.Do(func() {
		dir, err := os.MkdirTemp("", "aileron-image-"+name+"-")
		if err != nil {
			img.err = err
			return
		}
		// The image is named after the project; the project is owned by
		// the sandbox's user (uid 1000) so that the agent runs as it.
		img.project = filepath.Join(dir, name)
		if img.err = os.Mkdir(img.project, 0o755); img.err != nil {
			return
		}
		if err := os.Chown(img.project, 1000, 1000); err != nil {
			img.err = os.Chmod(img.project, 0o777)
		}
		home := t.TempDir()
		if img.err = scaffold(home, img.project); img.err != nil {
			return
		}
		if out, errOut, code := launchCLI(t, home, env, 20*time.Minute, "sandbox", "build", "--runtime", kind, "--project", img.project); code != 0 {
			img.err = fmt.Errorf("sandbox build (%s, %s): exit %d\n%s%s", name, kind, code, out, lastN(errOut, 3000))
			return
		}
		out, _, code := launchCLI(t, home, nil, time.Minute, "sandbox", "plan", "--json", "--runtime", kind, "--project", img.project)
		if code != 0 {
			img.err = fmt.Errorf("sandbox plan (%s, %s): exit %d", name, kind, code)
			return
		}
		img.kind, img.image = kind, jsonField(t, out, "image")
	})
	if img.err != nil {
		t.Fatal(img.err)
	}
	return img.project
}

// buildAgentImage scaffolds the recipe with `sandbox init --agent` and
// builds it once per test run (buildSharedImage).
func buildAgentImage(t *testing.T, agent, kind string, env []string) string {
	t.Helper()
	return buildSharedImage(t, agent, kind, env, func(home, project string) error {
		if out, errOut, code := launchCLI(t, home, nil, time.Minute, "sandbox", "init", "--agent", agent, "--project", project); code != 0 {
			return fmt.Errorf("sandbox init --agent %s: exit %d\n%s%s", agent, code, out, errOut)
		}
		return nil
	})
}

// removeSharedImages removes the images buildSharedImage built (each is
// several hundred MB, and every build gets a new tag).
func removeSharedImages() {
	sharedImages.Range(func(k, v any) bool {
		img := v.(*sharedImage)
		if img.image != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			_ = exec.CommandContext(ctx, img.kind, "rmi", "--force", "--no-prune", img.image).Run()
			cancel()
		}
		if img.project != "" {
			os.RemoveAll(filepath.Dir(img.project))
		}
		sharedImages.Delete(k)
		return true
	})
}

func lastN(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// inSandboxScript runs the agent ("$@" after the pattern), then looks for
// the canary in the sandbox (sandboxSecretScan). $1 is a pattern that
// matches the canary without containing it.
const inSandboxScript = `pat=$1; shift
"$@" </dev/null; rc=$?
echo "aileron-agent-exit:$rc"
` + sandboxSecretScan

// sandboxSecretScan looks for $pat, an extended regular expression that
// matches the secrets without containing them, in the sandbox's
// environment, process list and files, and prints
// "aileron-canary-found:0" when it is nowhere.
const sandboxSecretScan = `n=0
env | grep -qE -- "$pat" && { echo "canary in env"; n=1; }
for p in /proc/[0-9]*; do
  tr '\0' ' ' < "$p/cmdline" 2>/dev/null | grep -qE -- "$pat" && { echo "canary in $p/cmdline"; n=1; }
  tr '\0' '\n' < "$p/environ" 2>/dev/null | grep -qE -- "$pat" && { echo "canary in $p/environ"; n=1; }
done
files=$(grep -rlE -- "$pat" /home /tmp /etc /usr/local/etc /run /var/tmp 2>/dev/null | head -5)
[ -n "$files" ] && { echo "canary in files: $files"; n=1; }
echo "aileron-canary-found:$n"
`

// canaryPattern matches canary but does not contain it.
func canaryPattern() string { return canary[:len(canary)-1] + "[" + canary[len(canary)-1:] + "]" }

// TestAgentsInSandbox runs each agent recipe's real CLI in a launched
// sandbox against a stand-in for its model API.
func TestAgentsInSandbox(t *testing.T) {
	if testing.Short() {
		t.Skip("agent images skipped with -short")
	}
	t.Cleanup(removeSharedImages)
	runtimes := map[string][]string{"claude": {"docker", "podman"}}
	for _, ac := range agentCases {
		kinds := runtimes[ac.name]
		if kinds == nil {
			kinds = []string{"docker"}
		}
		label := ac.name
		if ac.label != "" {
			label = ac.label
		}
		for _, kind := range kinds {
			t.Run(label+"/"+kind, func(t *testing.T) {
				requireRuntime(t, kind)
				runAgentCase(t, ac, kind)
			})
		}
	}
	t.Run("check/docker", agentCheck)
}

func runAgentCase(t *testing.T, ac agentCase, kind string) {
	bundle := hostBundleWithMarker(t)
	project := buildAgentImage(t, ac.name, kind, []string{"SSL_CERT_FILE=" + bundle.path})
	if ac.name == "claude" && ac.label == "" {
		assertImageLacks(t, kind, project, bundle.marker)
	}

	home := t.TempDir()
	up := newUpstream(t, []string{ac.host}, modelStandIn())
	mustCLI(t, home, "", "connector", "install", filepath.Join("..", "configs", "connectors", ac.connector+".aileron.connector.v1.json"))
	mustCLI(t, home, canary+"\n", append([]string{"credential", "set", ac.fqn}, append(ac.credential, "--stdin")...)...)
	d := startServe(t, home, nil, "--resolve", ac.host+":443="+up.addr, "--upstream-ca", up.certFile)
	t.Cleanup(func() {
		if strings.Contains(d.stderr.String(), canary) {
			t.Error("serve's log contains the credential")
		}
	})
	t.Cleanup(func() { removeSandboxes(t, kind, home) })

	args := append([]string{"launch", "--sandbox=" + kind, "--sandbox-build=never", "--project", project, "--",
		"sh", "-c", inSandboxScript, "agent", canaryPattern()}, ac.argv...)
	stdout, stderr, code := launchCLI(t, home, nil, 6*time.Minute, args...)
	t.Logf("agent output:\n%s", redactCanary(stdout))
	if code != 0 || !strings.Contains(stdout, "aileron-agent-exit:0\n") {
		t.Errorf("launch exited %d; want the agent to exit 0\nstderr:\n%s", code, redactCanary(lastN(stderr, 4000)))
	}
	if !strings.Contains(stdout, cannedReply) {
		t.Errorf("the agent did not print the stand-in's reply %q", cannedReply)
	}
	if !strings.Contains(stdout, "aileron-canary-found:0\n") {
		t.Errorf("the canary is in the sandbox (or the scan did not run)")
	}
	if strings.Contains(stdout+stderr, canary) {
		t.Error("launch's output holds the credential")
	}

	// The stand-in saw the real key on every request, never the placeholder.
	reqs := up.requests()
	if len(reqs) == 0 {
		t.Fatal("the model stand-in got no request")
	}
	for _, r := range reqs {
		t.Logf("stand-in got %s %s%s (%s)", r.Method, r.Host, r.Path, r.Proto)
		if got := ac.key(r); got != canary {
			t.Errorf("stand-in %s %s: credential %q, want the injected key", r.Method, r.Path, redactCanary(got))
		}
		for k, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, "aileron-injected") {
					t.Errorf("stand-in %s %s: header %s carries the placeholder", r.Method, r.Path, k)
				}
			}
		}
		if strings.Contains(string(r.Body), "aileron-injected") {
			t.Errorf("stand-in %s %s: body carries the placeholder", r.Method, r.Path)
		}
	}

	// Refusals are the agent's telemetry and nothing else.
	refused := 0
	for _, ev := range auditEvents(t, home) {
		if ev["decision"] != "deny" && !strings.Contains(fmt.Sprint(ev["event"]), "denied") {
			continue
		}
		host, path := fmt.Sprint(ev["host"]), fmt.Sprint(ev["path"])
		t.Logf("denied: %s %s %s (%v)", ev["method"], host, path, ev["reason"])
		if !isTelemetry(ac.telemetry, host, path) {
			t.Errorf("the proxy refused %s %s%s (%v), which is not the agent's telemetry", ev["method"], host, path, ev["reason"])
		}
		refused++
	}
	if ac.wantRefused && refused == 0 {
		t.Error("no telemetry call was refused and audited")
	}
	if ac.wantRefused {
		// Quietly: nothing about the refusals in the agent's terminal.
		// launch's banner ends with its audit line; the agent's stderr follows.
		_, agentErr, ok := strings.Cut(stderr, "\n  audit ")
		if !ok {
			t.Fatalf("launch's banner has no audit line, so the agent's stderr cannot be told from it:\n%s", redactCanary(stderr))
		}
		// The rest of the audit line is its path, whose random temporary
		// directory may itself contain "403"; with no newline after it the
		// agent wrote nothing to stderr.
		_, agentErr, _ = strings.Cut(agentErr, "\n")
		agentOut := stdout + agentErr
		for _, noise := range []string{"403", "Forbidden", "denied", "not_allowed", "operation_not_allowed"} {
			if strings.Contains(agentOut, noise) {
				t.Errorf("the agent's output mentions %q:\n%s", noise, redactCanary(agentOut))
			}
		}
	}
	raw, _ := os.ReadFile(filepath.Join(home, "audit", "audit.jsonl"))
	if strings.Contains(string(raw), canary) || strings.Contains(d.stderr.String(), canary) {
		t.Error("the audit log or serve's log holds the credential")
	}
}

func isTelemetry(allowed []string, host, path string) bool {
	for _, a := range allowed {
		h, p, _ := strings.Cut(a, " ")
		if name, port, ok := strings.Cut(host, ":"); ok && port == "443" {
			host = name
		}
		if strings.EqualFold(host, h) && (path == "<nil>" || path == "" || strings.HasPrefix(path, p)) {
			return true
		}
	}
	return false
}

type markedBundle struct{ path, marker string }

// hostBundleWithMarker is the host's CA bundle plus a throwaway CA whose
// base64 body is the marker to look for in image layers.
func hostBundleWithMarker(t *testing.T) markedBundle {
	t.Helper()
	host := os.Getenv("SSL_CERT_FILE")
	if host == "" {
		host = "/etc/ssl/certs/ca-certificates.crt"
	}
	pem, err := os.ReadFile(host)
	if err != nil {
		t.Fatalf("reading the host CA bundle: %v", err)
	}
	_, marker := selfSigned(t, []string{"aileron-build-ca-marker.test"})
	path := filepath.Join(t.TempDir(), "bundle.pem")
	if err := os.WriteFile(path, append(append(pem, '\n'), marker...), 0o644); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(marker)), "\n")
	return markedBundle{path: path, marker: lines[len(lines)/2]}
}

// assertImageLacks saves the project's image and fails if any layer or
// the history holds marker.
func assertImageLacks(t *testing.T, kind, project, marker string) {
	t.Helper()
	out, _, code := launchCLI(t, t.TempDir(), nil, time.Minute, "sandbox", "plan", "--json", "--runtime", kind, "--project", project)
	if code != 0 {
		t.Fatalf("sandbox plan: exit %d", code)
	}
	image := jsonField(t, out, "image")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kind, "save", image)
	r, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	found, total := streamContains(r, []byte(marker))
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%s save %s: %v", kind, image, err)
	}
	if total < 1<<20 {
		t.Fatalf("%s save %s gave only %d bytes", kind, image, total)
	}
	if found {
		t.Errorf("image %s holds the build's CA bundle", image)
	}
	hist, err := exec.CommandContext(ctx, kind, "history", "--no-trunc", image).CombinedOutput()
	if err != nil || strings.Contains(string(hist), marker) {
		t.Errorf("%s history %s: %v, or it holds the CA", kind, image, err)
	}
}

// jsonField is the string field key of the JSON object raw.
func jsonField(t *testing.T, raw, key string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatalf("parsing %q: %v", raw, err)
	}
	s, _ := m[key].(string)
	if s == "" {
		t.Fatalf("no %q in %s", key, raw)
	}
	return s
}

// streamContains reads r to the end and reports whether needle occurs in
// it, and how many bytes it read.
func streamContains(r io.Reader, needle []byte) (bool, int64) {
	buf := make([]byte, 0, 1<<20+len(needle))
	var total int64
	found := false
	chunk := make([]byte, 1<<20)
	for {
		n, err := r.Read(chunk)
		total += int64(n)
		buf = append(buf, chunk[:n]...)
		if bytes.Contains(buf, needle) {
			found = true
		}
		if keep := len(needle) - 1; len(buf) > keep {
			buf = append(buf[:0], buf[len(buf)-keep:]...)
		}
		if err != nil {
			return found, total
		}
	}
}

// agentCheck runs `sandbox check --agent claude` on the recipe's image:
// without the model credential it fails and names the command that sets
// it; with it, every check passes.
func agentCheck(t *testing.T) {
	requireRuntime(t, "docker")
	bundle := hostBundleWithMarker(t)
	project := buildAgentImage(t, "claude", "docker", []string{"SSL_CERT_FILE=" + bundle.path})
	home := t.TempDir()
	mustCLI(t, home, "", "connector", "install", "../configs/connectors/anthropic.aileron.connector.v1.json")
	check := []string{"sandbox", "check", "--agent", "claude", "--runtime", "docker", "--sandbox-build=never", "--project", project}
	out, errOut, code := launchCLI(t, home, nil, 2*time.Minute, check...)
	fix := "run `aileron-proxy credential set github://aileron-dev/aileron-connector-anthropic --kind api_key --header x-api-key --from-env ANTHROPIC_API_KEY`"
	if code != 1 || !strings.Contains(out, "FAIL  credential") || !strings.Contains(errOut, fix) {
		t.Errorf("check without a credential = exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 1 and the fix %q", code, out, errOut, fix)
	}
	for _, want := range []string{"ok    version      claude --version: 2.1.330 (Claude Code)", "ok    connector", "ok    placeholder"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	mustCLI(t, home, canary+"\n", "credential", "set", "github://aileron-dev/aileron-connector-anthropic", "--kind", "api_key", "--header", "x-api-key", "--stdin")
	out, errOut, code = launchCLI(t, home, nil, 2*time.Minute, check...)
	if code != 0 || strings.Contains(out, "FAIL") {
		t.Errorf("check with the credential = exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if strings.Contains(out+errOut, canary) {
		t.Error("sandbox check printed the credential")
	}
}
