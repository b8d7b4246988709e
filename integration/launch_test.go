package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// requireRuntime skips unless the container runtime's engine answers;
// under CI=true (.ci/containers.sh set both up) it fails instead.
func requireRuntime(t *testing.T, kind string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, kind, "info").CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("%s info: %v: %.200s", kind, err, out)
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (CI=true: .ci/containers.sh should have set %s up)", msg, kind)
		}
		t.Skip(msg)
	}
}

// launchCLI runs `aileron-proxy --home HOME ARGS...` with env added to
// testkit.CleanEnv, bounded by timeout; on timeout launch gets SIGINT first so it
// tears its sandbox down.
func launchCLI(t *testing.T, home string, env []string, timeout time.Duration, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, append([]string{"--home", home}, args...)...)
	cmd.Env = testkit.CleanEnv(env...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = 30 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	code := exitCode(t, cmd.Run(), cmd.Args)
	if ctx.Err() != nil {
		t.Errorf("aileron-proxy %s did not finish within %s", strings.Join(args, " "), timeout)
	}
	return out.String(), errb.String(), code
}

// agentWorkspace is a project directory the sandbox's user (agent, uid
// 1000) can write: under a rootful runtime the bind mount keeps host
// ownership, so a root-owned 0700 directory would fail launch's check.
func agentWorkspace(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "project")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 1000, 1000); err != nil {
		// Not root: let any uid write it instead.
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// hostService serves HTTP on every IPv4 address of the host, as a
// developer's database or model server might, and returns its port.
func hostService(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "host-service-reached") }), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// removeSandboxes removes what launch may have left for every session of
// home, in case a test failed half-way.
func removeSandboxes(t *testing.T, kind, home string) {
	raw, _ := os.ReadFile(filepath.Join(home, "audit", "audit.jsonl"))
	for _, m := range regexp.MustCompile(`"session_id":"(ses_[0-9a-f]+)"`).FindAllStringSubmatch(string(raw), -1) {
		name := "aileron-" + m[1]
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		// One at a time: Podman refuses to remove the holder in the same
		// command as the container that shares its namespace.
		_ = exec.CommandContext(ctx, kind, "rm", "--force", name).Run()
		_ = exec.CommandContext(ctx, kind, "rm", "--force", name+"-guard").Run()
		_ = exec.CommandContext(ctx, kind, "network", "rm", name).Run()
		cancel()
	}
}

// launchAgentScript runs inside the sandbox as `sh -c SCRIPT agent
// DIRECT_ADDR DAEMON_PROXY_PORT HOST_SERVICE_PORT`: one line per check, "ok
// NAME" or "FAIL NAME: detail", then it exits 3.
const launchAgentScript = `check() { if [ "$2" = 0 ]; then echo "ok $1"; else echo "FAIL $1: $3"; fi; }
has() { case $2 in *"$1"*) echo 0 ;; *) echo 1 ;; esac; }
[ "$(id -u)" = 1000 ]; check user $? "uid $(id -u)"

out=$(curl -sS --max-time 30 https://api.example.test/v1/items 2>&1)
check curl "$(has '"items":[{"id":"1"}]' "$out")" "$out"

# Plain GNU wget: no CA flags, no proxy flags; it reads only the system store.
out=$(wget -qO- --tries=1 --timeout=30 https://api.example.test/v1/items 2>&1)
check wget "$(has '"items":[{"id":"1"}]' "$out")" "$out"

code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 30 https://api.example.test/v1/not-an-operation 2>&1)
check denied "$([ "$code" = 403 ]; echo $?)" "status $code"

# The shim is on PATH at /usr/local/bin/testapi, as the agent would call it.
out=$(testapi items.list --args '{}' 2>&1)
check shim "$(has '"items":[{"id":"1"}]' "$out")" "$out"

# The static binary is mounted read-only on PATH: its MCP server answers
# one JSON-RPC message per line (stdin stays open until the answers are in).
mcp=$( { printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"sh","version":"1"}}}' \
  '{"jsonrpc":"2.0","method":"notifications/initialized"}' \
  '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"testapi__items_list","arguments":{}}}'; sleep 4; } | aileron-proxy mcp 2>&1)
check mcp "$(has '"structuredContent":{"items":[{"id":"1"}]' "$mcp")" "$mcp"
bin=$(command -v aileron-proxy)
check mcp-binary "$([ "$bin" = /usr/local/bin/aileron-proxy ] && ! [ -w "$bin" ] && ! touch "$bin" 2>/dev/null; echo $?)" "$bin is missing or writable"

out=$(curl -sS --noproxy '*' --connect-timeout 5 --max-time 8 -o /dev/null "https://$1/v1/items" 2>&1)
check direct-upstream "$([ $? != 0 ]; echo $?)" "reached $1 directly"

gw=${AILERON_API_URL#http://}; gw=${gw%%:*}
# The daemon listens on loopback; a relay on the gateway may draw the same
# port number, and that one is allowed: the check needs another number.
relays=" ${HTTPS_PROXY##*:} $(echo "$AILERON_API_URL" | sed -E 's#^http://[^:/]+:([0-9]+).*#\1#') "
case $relays in
*" $2 "*) echo "FAIL direct-daemon: port $2 is also a relay's, so a probe cannot tell the daemon from it (rerun)" ;;
*) out=$(curl -sS --noproxy '*' --connect-timeout 5 --max-time 8 -o /dev/null "http://$gw:$2/" 2>&1)
   check direct-daemon "$([ $? != 0 ]; echo $?)" "reached the daemon's own port $gw:$2" ;;
esac

# A host service bound to 0.0.0.0: the egress guard refuses it.
out=$(curl -sS --noproxy '*' --connect-timeout 5 --max-time 8 "http://$gw:$3/" 2>&1)
check host-service "$([ $? != 0 ]; echo $?)" "reached a host service at $gw:$3: $out"

status=$(grep -E '^(CapBnd|NoNewPrivs):' /proc/self/status | tr -s '\t' ' ' | tr '\n' ' ')
check hardened "$([ "$status" = "CapBnd: 0000000000000000 NoNewPrivs: 1 " ]; echo $?)" "$status"

out=$(env | grep -E '(127\.0\.0\.1|localhost|\[::1\]):[0-9]')
check no-loopback "$([ -z "$out" ]; echo $?)" "$out"
case $AILERON_API_URL in http://*/v1) r=0 ;; *) r=1 ;; esac
check api-url $r "$AILERON_API_URL"

echo from-sandbox > /home/agent/workspace/out.txt
check workspace $? "cannot write the workspace"
echo done
exit 3
`

// TestLaunchRealSandbox launches an agent script in real Docker and Podman
// containers against a real serve and a loopback TLS upstream.
func TestLaunchRealSandbox(t *testing.T) {
	for _, kind := range []string{"docker", "podman"} {
		t.Run(kind, func(t *testing.T) {
			requireRuntime(t, kind)
			e := newEnv(t)
			t.Cleanup(func() { removeSandboxes(t, kind, e.home) })
			project := agentWorkspace(t)
			_, proxyPort, _ := net.SplitHostPort(e.d.ProxyAddr)
			hostSvc := hostService(t)
			stdout, stderr, code := launchCLI(t, e.home, nil, 8*time.Minute,
				"launch", "--sandbox="+kind, "--project", project, "--", "sh", "-c", launchAgentScript, "agent", e.up.addr, proxyPort, hostSvc)
			if code != 3 {
				t.Errorf("launch exited %d, want the agent's 3", code)
			}
			for _, want := range []string{"user", "curl", "wget", "denied", "shim", "mcp", "mcp-binary", "direct-upstream", "direct-daemon", "host-service", "hardened", "no-loopback", "api-url", "workspace"} {
				if !strings.Contains(stdout, "ok "+want+"\n") {
					t.Errorf("check %s did not pass", want)
				}
			}
			if strings.Contains(stdout, "FAIL") || !strings.Contains(stdout, "done\n") || t.Failed() {
				t.Fatalf("agent output:\n%s\nlaunch stderr:\n%s", redactCanary(stdout), redactCanary(stderr))
			}
			if got, err := os.ReadFile(filepath.Join(project, "out.txt")); err != nil || string(got) != "from-sandbox\n" {
				t.Errorf("workspace file on the host = %q, %v", got, err)
			}

			// The upstream got the injected credential from curl and from wget.
			seen := map[string]bool{}
			for _, r := range e.up.requests() {
				if r.Header.Get("Authorization") != "Bearer "+canary {
					t.Errorf("upstream %s %s from %q lacks the injected credential", r.Method, r.Path, r.Header.Get("User-Agent"))
				}
				ua, _, _ := strings.Cut(r.Header.Get("User-Agent"), "/")
				seen[ua] = true
			}
			if !seen["curl"] || !seen["Wget"] {
				t.Errorf("upstream user agents = %v, want curl and Wget", seen)
			}

			m := regexp.MustCompile(`session  (ses_[0-9a-f]+)`).FindStringSubmatch(stderr)
			if m == nil {
				t.Fatalf("no session in the banner:\n%s", stderr)
			}
			id := m[1]
			for _, want := range []string{"runtime  " + kind, "tools    testapi (local://test/echo)", "audit tail -f --session " + id,
				"guard    on: TCP to ", "hardened all capabilities dropped"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("banner lacks %q:\n%s", want, stderr)
				}
			}
			ev := waitAudit(t, e.home, map[string]any{"event": "session.ended", "session_id": id})
			if fmt.Sprint(ev["exit_code"]) != "3" {
				t.Errorf("session.ended = %v, want exit_code 3", ev)
			}
			waitAudit(t, e.home, map[string]any{"event": "connector.proxy.denied", "session_id": id, "path": "/v1/not-an-operation"})

			// Nothing is left behind.
			for _, args := range [][]string{
				{"ps", "--all", "--quiet", "--filter", "label=dev.aileron.session=" + id},
				{"network", "ls", "--quiet", "--filter", "label=dev.aileron.session=" + id},
			} {
				out, err := exec.Command(kind, args...).CombinedOutput()
				if err != nil || strings.TrimSpace(string(out)) != "" {
					t.Errorf("%s %s = %q, %v; want nothing left", kind, strings.Join(args, " "), out, err)
				}
			}
			if strings.Contains(stderr, canary) || strings.Contains(stdout, canary) {
				t.Error("launch's output holds the credential")
			}
		})
	}
}

// conflictSpec has a tool whose command is the agent's.
const conflictSpec = `{"schema_version": "aileron.connector.v1",
  "connector": {"fqn": "local://test/mytool", "version": "1.0.0"},
  "tools": [{"name": "mytool", "operations": [
    {"name": "get", "method": "GET", "path": "/x", "hosts": ["api.example.test"], "credential": "bearer"}]}]}`

// TestLaunchConflictStartsNothing: a tool named like the agent stops
// launch before any runtime call (docker and podman are replaced by
// recorders) and before any session, with the daemon started in-process.
func TestLaunchConflictStartsNothing(t *testing.T) {
	for _, kind := range []string{"docker", "podman"} {
		t.Run(kind, func(t *testing.T) {
			home := t.TempDir()
			spec := filepath.Join(t.TempDir(), "mytool.aileron.connector.v1.json")
			if err := os.WriteFile(spec, []byte(conflictSpec), 0o644); err != nil {
				t.Fatal(err)
			}
			mustCLI(t, home, "", "connector", "install", spec)
			bin := t.TempDir()
			calls := filepath.Join(t.TempDir(), "calls.log")
			for _, name := range []string{"docker", "podman"} {
				script := "#!/bin/sh\nprintf '%s\\n' \"$0 $*\" >> '" + calls + "'\nexit 1\n"
				if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			_, stderr, code := launchCLI(t, home, []string{"PATH=" + bin + ":" + os.Getenv("PATH")}, 2*time.Minute,
				"launch", "--sandbox="+kind, "--project", t.TempDir(), "--", "mytool", "--help")
			if code != 1 {
				t.Errorf("launch exited %d, want 1", code)
			}
			for _, want := range []string{`would shadow the agent command "mytool"`, "aileron-proxy connector remove local://test/mytool", "nothing was started"} {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
			if raw, err := os.ReadFile(calls); err == nil {
				t.Errorf("%s was called before the conflict stopped launch:\n%s", kind, raw)
			}
			raw, _ := os.ReadFile(filepath.Join(home, "audit", "audit.jsonl"))
			if strings.Contains(string(raw), "session.created") {
				t.Errorf("a session was created:\n%s", raw)
			}
			if _, err := os.Stat(filepath.Join(home, "daemon.json")); !os.IsNotExist(err) {
				t.Errorf("the in-process daemon's daemon.json outlived launch (%v)", err)
			}
		})
	}
}
