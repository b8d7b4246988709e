package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/daemon"
	"github.com/aileron-dev/aileron-proxy/launcher/guard"
)

func TestLaunchUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no agent", []string{"launch"}, "no agent command given"},
		{"no agent after dash", []string{"launch", "--"}, "no agent command given"},
		{"bad sandbox", []string{"launch", "--sandbox=lxc", "--", "claude"}, `--sandbox: unknown container runtime "lxc"`},
		{"bad build policy", []string{"launch", "--sandbox-build=sometimes", "--", "claude"}, `--sandbox-build: unknown build policy "sometimes"`},
		{"unknown flag", []string{"launch", "--bogus", "--", "claude"}, "unknown flag: --bogus"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := runCLI(t, t.TempDir(), "", nil, tc.args...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Errorf("%q = exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr, exitUsage, tc.want)
			}
		})
	}
}

// staticELF writes a minimal statically linked ELF header (no program
// interpreter), which the fake docker never runs, as the guard helper.
func staticELF(t *testing.T) string {
	t.Helper()
	h := make([]byte, 64)
	copy(h, "\x7fELF\x02\x01\x01")
	binary.LittleEndian.PutUint16(h[16:], 2)  // ET_EXEC
	binary.LittleEndian.PutUint16(h[18:], 62) // EM_X86_64
	binary.LittleEndian.PutUint32(h[20:], 1)  // EV_CURRENT
	binary.LittleEndian.PutUint16(h[52:], 64) // e_ehsize
	p := filepath.Join(t.TempDir(), "aileron-proxy")
	if err := os.WriteFile(p, h, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLaunchRefusesDynamicGuardHelper: the guard helper runs in the holder
// container, so a dynamically linked one stops launch with the fix.
func TestLaunchRefusesDynamicGuardHelper(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "docker"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	_, stderr, code := runCLI(t, t.TempDir(), "", map[string]string{guard.EnvBinary: "/bin/sh"}, "launch", "--sandbox=docker", "--project", t.TempDir(), "--", "claude")
	if code != exitFailure || !strings.Contains(stderr, "/bin/sh is dynamically linked") || !strings.Contains(stderr, "CGO_ENABLED=0") {
		t.Errorf("launch with a dynamic guard helper = exit %d, stderr %q", code, stderr)
	}
}

// fakeDockerScript stands in for the docker CLI: it logs each argv,
// answers the image, network and check calls (the user probe alone, the
// check alone, or both in one run), and runs the agent on the
// host with the env file's variables (the "gateway" is 127.0.0.1).
const fakeDockerScript = `#!/bin/sh
printf '%s\n' "$*" >> "$AILERON_FAKE_DOCKER_LOG"
case "$1 ${2-}" in
"image inspect") echo sha256:feed; exit 0 ;;
"network create") echo netid; exit 0 ;;
"network inspect") echo '[{"IPAM":{"Config":[{"Subnet":"127.0.0.0/8","Gateway":"127.0.0.1"}]}}]'; exit 0 ;;
"network rm") exit 0 ;;
esac
[ "$1" = rm ] && exit 0
[ "$1" = exec ] && exit 0
[ "$1" = run ] || exit 1
case " $* " in
*" --detach "*) exit 0 ;;
*aileron-user*aileron-check*)
	echo "aileron-user:$(id -u):$(id -g):agent"
	printf 'aileron-check:shell:ok\naileron-check:uid:1000\naileron-check:path:/bin\naileron-check:workspace:ok\naileron-check:agent:ok:/bin/sh\naileron-check:wget:ok:/bin/wget\n'
	exit 0 ;;
*aileron-user*) echo "aileron-user:$(id -u):$(id -g):agent"; exit 0 ;;
*" --network none "*)
	printf 'aileron-check:shell:ok\naileron-check:uid:1000\naileron-check:path:/bin\naileron-check:workspace:ok\naileron-check:agent:ok:/bin/sh\naileron-check:wget:ok:/bin/wget\n'
	exit 0 ;;
esac
shift
envfile= entry=
while [ $# -gt 0 ]; do
	case $1 in
	--env-file) envfile=$2; shift 2 ;;
	--entrypoint) entry=$2; shift 2 ;;
	--rm | --interactive | --tty) shift ;;
	--*) shift 2 ;;
	*) break ;;
	esac
done
shift
while IFS= read -r line; do export "$line"; done < "$envfile"
exec "$entry" "$@"
`

// useFakeDocker puts fakeDockerScript first on PATH as docker and returns
// the file it logs its calls to.
func useFakeDocker(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "docker"), []byte(fakeDockerScript), 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "docker.log")
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("AILERON_FAKE_DOCKER_LOG", log)
	for _, k := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"} {
		t.Setenv(k, "")
	}
	return log
}

// TestLaunchStartsDaemonInProcess: with no serve running, launch runs the
// daemon in-process for its lifetime; the agent reaches its API through
// the relay, its exit status becomes launch's and is audited.
func TestLaunchStartsDaemonInProcess(t *testing.T) {
	log := useFakeDocker(t)
	home, project := t.TempDir(), t.TempDir()
	out := filepath.Join(project, "agent.out")
	// The agent records what it sees, calls the API through the relay and exits 3.
	script := `{ test -f "$1/daemon.json" && echo daemon=yes
echo "api=$AILERON_API_URL"
curl -sS --noproxy '*' --max-time 10 -o /dev/null -w 'status=%{http_code}\n' "$AILERON_API_URL/openapi.json"
} > "$2" 2>&1; exit 3`
	env := map[string]string{guard.EnvBinary: staticELF(t)}
	_, stderr, code := runCLI(t, home, "", env, "launch", "--sandbox=docker", "--project", project, "--", "sh", "-c", script, "agent", home, out)
	if code != 3 {
		t.Fatalf("launch = exit %d, want the agent's 3\nstderr: %s", code, stderr)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("the agent did not run: %v\nstderr: %s", err, stderr)
	}
	for _, w := range []string{"daemon=yes", "api=http://127.0.0.1:", "status=200"} {
		if !strings.Contains(string(got), w) {
			t.Errorf("agent output lacks %q:\n%s", w, got)
		}
	}
	if _, err := os.Stat(filepath.Join(home, daemon.DaemonFile)); !os.IsNotExist(err) {
		t.Errorf("daemon.json outlived launch (%v)", err)
	}
	// The daemon's log goes to a private file named on the terminal, and
	// none of its request lines reach the agent's terminal.
	logPath := filepath.Join(home, daemon.LogFile)
	if fi, err := os.Stat(logPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("daemon log %s: %v (mode %v), want a 0600 file", logPath, err, fi)
	}
	if raw, _ := os.ReadFile(logPath); !strings.Contains(string(raw), `"api request"`) {
		t.Errorf("the daemon log lacks the API's request lines:\n%s", raw)
	}
	for _, w := range []string{logPath, "/ui/login?code="} {
		if !strings.Contains(stderr, w) {
			t.Errorf("launch's terminal output does not name %q:\n%s", w, stderr)
		}
	}
	for _, bad := range []string{"api request", "policy loaded", "serving"} {
		if strings.Contains(stderr, bad) {
			t.Errorf("a daemon log line (%q) reached the agent's terminal:\n%s", bad, stderr)
		}
	}
	m := regexp.MustCompile(`session  (ses_[0-9a-f]+)`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no session in the banner:\n%s", stderr)
	}
	raw, err := os.ReadFile(filepath.Join(home, "audit", "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	ended := false
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var ev struct {
			Event     string `json:"event"`
			SessionID string `json:"session_id"`
			ExitCode  *int   `json:"exit_code"`
		}
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Event == "session.ended" && ev.SessionID == m[1] && ev.ExitCode != nil && *ev.ExitCode == 3 {
			ended = true
		}
	}
	if !ended {
		t.Errorf("no session.ended event with exit_code 3 for %s:\n%s", m[1], raw)
	}
	calls, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"network create --internal", "network rm aileron-" + m[1], "rm --force aileron-" + m[1]} {
		if !strings.Contains(string(calls), w) {
			t.Errorf("docker calls lack %q:\n%s", w, calls)
		}
	}
}

// heldSpec has one operation that needs a person's approval.
const heldSpec = `{
  "schema_version": "aileron.connector.v1",
  "connector": {"fqn": "local://test/held", "version": "1.0.0"},
  "tools": [{"name": "mail", "operations": [
    {"name": "send", "method": "POST", "path": "/send", "hosts": ["mail.example.test"], "credential": "bearer", "approval": "required"}
  ]}]
}`

// TestLaunchTellsHeldApproval: a request of the agent held for approval
// is told on launch's terminal, once, with the console link and the
// command; nobody decides, so the agent gets approval_timeout.
func TestLaunchTellsHeldApproval(t *testing.T) {
	useFakeDocker(t)
	home, project := t.TempDir(), t.TempDir()
	spec := filepath.Join(t.TempDir(), "held.aileron.connector.v1.json")
	if err := os.WriteFile(spec, []byte(heldSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, daemon.ConfigFile), []byte(`{"approval_timeout": "3s"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"connector", "install", spec}, {"credential", "set", "local://test/held", "--kind", "bearer", "--stdin"}} {
		if _, stderr, code := runCLI(t, home, "held-token-value\n", nil, args...); code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, stderr)
		}
	}
	out := filepath.Join(project, "agent.out")
	script := `curl -sS --noproxy '*' --max-time 20 -H "Authorization: Bearer $AILERON_TOKEN" -H 'Content-Type: application/json' \
  -d '{"connector_fqn":"local://test/held","tool":"mail","operation":"send","args":{}}' "$AILERON_API_URL/connector-operations/run" > "$1" 2>&1`
	// Not runCLI's bytes.Buffer: the agent's stderr is copied into it with
	// ReadFrom, which drops what other goroutines write meanwhile.
	var errOut auditSyncBuffer
	helper := staticELF(t)
	getenv := func(k string) string {
		if k == guard.EnvBinary {
			return helper
		}
		return ""
	}
	root := newRootCmd(newApp(strings.NewReader(""), io.Discard, &errOut, getenv))
	root.SetArgs([]string{"--home", home, "launch", "--sandbox=docker", "--project", project, "--", "sh", "-c", script, "agent", out})
	ctx, cancel := context.WithTimeout(t.Context(), runCLITimeout)
	defer cancel()
	code := exitStatus(root.ExecuteContext(ctx), &errOut)
	stderr := errOut.String()
	got, _ := os.ReadFile(out)
	if code != 0 || !strings.Contains(string(got), "approval_timeout") {
		t.Fatalf("launch = exit %d, agent got %q; want the held call to time out\nstderr: %s", code, got, stderr)
	}
	lines := regexp.MustCompile(`(?m)^aileron-proxy: mail send is waiting for approval: open http://127\.0\.0\.1:\d+/ui/approvals or run `+
		"`aileron-proxy approvals approve apr_[0-9a-f]+`").FindAllString(stderr, -1)
	if len(lines) != 1 {
		t.Errorf("launch told the held request %d times, want once:\n%s", len(lines), stderr)
	}
}
