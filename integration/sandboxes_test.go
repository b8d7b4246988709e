package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
	"github.com/aileron-dev/aileron-proxy/launcher"
)

// sandboxClient calls a long-lived sandbox's exec/files API with its
// control token.
type sandboxClient struct {
	t     *testing.T
	base  string
	token string
}

// eachRuntime runs f on Docker and on Podman, each with its own serve
// (newEnv with serveFlags); what a sandbox test leaves behind is removed:
// through the daemon while it runs (serve leaves its sandboxes running
// when it stops), then whatever is left.
func eachRuntime(t *testing.T, f func(t *testing.T, kind string, e *env), serveFlags ...string) {
	for _, kind := range []string{"docker", "podman"} {
		t.Run(kind, func(t *testing.T) {
			requireRuntime(t, kind)
			e := newEnv(t, serveFlags...)
			t.Cleanup(func() {
				_, _, _ = cli(t, e.home, "", "sandbox", "down", "--all")
				removeSandboxes(t, kind, e.home)
			})
			f(t, kind, e)
		})
	}
}

// upSandbox is `sandbox up --json` on runtime kind for project, parsed.
func upSandbox(t *testing.T, e *env, kind, project string, flags ...string) upped {
	t.Helper()
	out, stderr, code := launchCLI(t, e.home, nil, 8*time.Minute, append([]string{"sandbox", "up", "--json", "--sandbox=" + kind, "--project", project}, flags...)...)
	if code != 0 {
		t.Fatalf("sandbox up exited %d:\n%s", code, stderr)
	}
	var sb upped
	if err := json.Unmarshal([]byte(out), &sb); err != nil || sb.ID == "" || sb.Token == "" {
		t.Fatalf("sandbox up --json = %q (%v); want id and token", out, err)
	}
	return sb
}

// upped is what `sandbox up --json` prints.
type upped struct {
	ID        string `json:"id"`
	APIURL    string `json:"api_url"`
	Token     string `json:"token"`
	Workdir   string `json:"workdir"`
	SessionID string `json:"session_id"`
	Runtime   string `json:"runtime"`
	Image     string `json:"image"`
}

func (c *sandboxClient) do(method, path string, body io.Reader, ctype string) (int, []byte) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: reading: %v", method, path, err)
	}
	return resp.StatusCode, raw
}

func (c *sandboxClient) json(method, path string, in any) (int, map[string]any) {
	c.t.Helper()
	b, _ := json.Marshal(in)
	code, raw := c.do(method, path, bytes.NewReader(b), "application/json")
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		c.t.Fatalf("%s %s: %d %q is not JSON", method, path, code, raw)
	}
	return code, out
}

func (c *sandboxClient) exec(in map[string]any) map[string]any {
	c.t.Helper()
	code, out := c.json(http.MethodPost, "/exec", in)
	if code != 200 {
		c.t.Fatalf("exec %v = %d %v", in, code, out)
	}
	return out
}

func errCode(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

// TestSandboxUpExecFiles starts a long-lived sandbox with `sandbox up` on a
// real serve, drives the exec/files API and `sandbox exec|ls|down`, on
// Docker and on Podman.
func TestSandboxUpExecFiles(t *testing.T) {
	eachRuntime(t, func(t *testing.T, kind string, e *env) {
		project := agentWorkspace(t)
		hostSvc := hostService(t)
		sb := upSandbox(t, e, kind, project, "--ttl", "1h")
		if sb.Runtime != kind || sb.APIURL != e.d.APIURL {
			t.Fatalf("sandbox up --json = %+v; want runtime %s, api_url %s", sb, kind, e.d.APIURL)
		}
		c := &sandboxClient{t: t, base: sb.APIURL + "/v1/sandboxes/" + sb.ID, token: sb.Token}

		if code, info := c.json(http.MethodGet, "/", nil); code != 200 || info["state"] != "running" || info["workdir"] != sb.Workdir || info["session_id"] != sb.SessionID {
			t.Errorf("info = %d %v", code, info)
		}
		bad := &sandboxClient{t: t, base: c.base, token: "wrong"}
		if code, _ := bad.json(http.MethodGet, "/", nil); code != 401 {
			t.Errorf("info with a wrong token = %d, want 401", code)
		}

		// exec: exit codes, stdout/stderr apart, cwd, env layering, user.
		r := c.exec(map[string]any{"command": "echo out; echo err >&2; pwd; echo $FOO $AILERON_SESSION_ID; id -u; exit 7", "env": map[string]string{"FOO": "bar"}})
		if r["exitCode"] != 7.0 || r["stderr"] != "err\n" || r["stdout"] != "out\n"+sb.Workdir+"\nbar "+sb.SessionID+"\n1000\n" {
			t.Errorf("exec = %v", r)
		}
		if r := c.exec(map[string]any{"command": "pwd", "cwd": "/tmp"}); r["stdout"] != "/tmp\n" {
			t.Errorf("exec cwd /tmp = %v", r)
		}
		if code, r := c.json(http.MethodPost, "/exec", map[string]any{"command": "true", "cwd": "/nonexistent"}); code != 404 || errCode(r) != "ENOENT" {
			t.Errorf("exec in a missing cwd = %d %v, want 404 ENOENT", code, r)
		}
		// timeoutMs: 124 with a note, a trapped SIGTERM still 124, and a
		// grandchild that left the group never writes its marker.
		start := time.Now()
		r = c.exec(map[string]any{"command": "trap 'exit 0' TERM; set -m; (sleep 3; touch /tmp/marker) & sleep 30 & wait", "timeoutMs": 500})
		if r["exitCode"] != 124.0 || r["timedOut"] != true || !strings.Contains(r["stderr"].(string), "timed out") {
			t.Errorf("exec with timeoutMs = %v", r)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("the timed-out exec answered after %s", d)
		}
		time.Sleep(4 * time.Second)
		if r := c.exec(map[string]any{"command": "test -e /tmp/marker && echo leaked || echo clean"}); r["stdout"] != "clean\n" {
			t.Errorf("a process of the timed-out command survived: %v", r)
		}
		// A backgrounded child that left the group does not delay the result.
		start = time.Now()
		if r := c.exec(map[string]any{"command": "set -m; sleep 8 & echo started"}); r["stdout"] != "started\n" || time.Since(start) > 4*time.Second {
			t.Errorf("exec with a background child = %v after %s", r, time.Since(start))
		}
		// 5 MiB of output intact.
		if r := c.exec(map[string]any{"command": "head -c 5242880 /dev/zero | tr '\\0' a"}); len(r["stdout"].(string)) != 5<<20 || r["truncated"] != false {
			t.Errorf("5 MiB output: got %d bytes, truncated %v", len(r["stdout"].(string)), r["truncated"])
		}

		// Files: all byte values round-trip; a 10 MiB file; errors.
		all := make([]byte, 256)
		for i := range all {
			all[i] = byte(i)
		}
		if code, raw := c.do(http.MethodPut, "/files?path="+url.QueryEscape(sb.Workdir+"/bytes.bin"), bytes.NewReader(all), ""); code != 204 {
			t.Fatalf("write = %d %s", code, raw)
		}
		if code, raw := c.do(http.MethodGet, "/files?path="+url.QueryEscape(sb.Workdir+"/bytes.bin"), nil, ""); code != 200 || !bytes.Equal(raw, all) {
			t.Errorf("read = %d, %d bytes, equal %v", code, len(raw), bytes.Equal(raw, all))
		}
		if got, err := os.ReadFile(filepath.Join(project, "bytes.bin")); err != nil || !bytes.Equal(got, all) {
			t.Errorf("the file on the host = %d bytes, %v", len(got), err)
		}
		big := bytes.Repeat([]byte("0123456789abcdef"), 10<<20/16)
		if code, raw := c.do(http.MethodPut, "/files?path=/tmp/big", bytes.NewReader(big), ""); code != 204 {
			t.Fatalf("write 10 MiB = %d %s", code, raw)
		}
		if code, raw := c.do(http.MethodGet, "/files?path=/tmp/big", nil, ""); code != 200 || !bytes.Equal(raw, big) {
			t.Errorf("read 10 MiB = %d, %d bytes", code, len(raw))
		}
		if code, raw := c.do(http.MethodGet, "/files?path=/tmp", nil, ""); code != 400 || !strings.Contains(string(raw), "EISDIR") {
			t.Errorf("read a directory = %d %s, want 400 EISDIR", code, raw)
		}
		if code, raw := c.do(http.MethodPut, "/files?path=/tmp/missing/x", strings.NewReader("x"), ""); code != 404 || !strings.Contains(string(raw), `"ENOENT"`) || !strings.Contains(string(raw), `"path":"/tmp/missing/x"`) {
			t.Errorf("write under a missing parent = %d %s, want 404 ENOENT with the path", code, raw)
		}
		if code, raw := c.do(http.MethodPut, "/files?path=/etc/passwd", strings.NewReader("x"), ""); code != 403 || !strings.Contains(string(raw), "EACCES") {
			t.Errorf("write /etc/passwd as the sandbox user = %d %s, want 403 EACCES", code, raw)
		}
		// fs: stat, symlinks, readdir, mkdir, rm.
		c.exec(map[string]any{"command": "mkdir -p /tmp/d && cd /tmp/d && touch .dot 'a b' && ln -s /tmp/big link && ln -s /nope dangling"})
		if code, st := c.json(http.MethodPost, "/fs/stat", map[string]any{"path": "/tmp/d/link"}); code != 200 || st["isFile"] != true || st["isSymbolicLink"] != true || st["size"] != float64(len(big)) {
			t.Errorf("stat link = %d %v", code, st)
		}
		if code, st := c.json(http.MethodPost, "/fs/stat", map[string]any{"path": "/tmp/d/dangling"}); code != 404 || errCode(st) != "ENOENT" {
			t.Errorf("stat dangling = %d %v", code, st)
		}
		if code, rd := c.json(http.MethodPost, "/fs/readdir", map[string]any{"path": "/tmp/d"}); code != 200 || fmt.Sprint(rd["names"]) != "[.dot a b dangling link]" {
			t.Errorf("readdir = %d %v", code, rd)
		}
		for _, tc := range []struct {
			verb string
			body map[string]any
			want int
			code string
		}{
			{"mkdir", map[string]any{"path": "/tmp/d"}, 409, "EEXIST"},
			{"mkdir", map[string]any{"path": "/tmp/x/y"}, 404, "ENOENT"},
			{"mkdir", map[string]any{"path": "/tmp/x/y", "recursive": true}, 200, ""},
			{"mkdir", map[string]any{"path": "/tmp/x/y", "recursive": true}, 200, ""},
			{"rm", map[string]any{"path": "/tmp/x", "force": true}, 400, "EISDIR"},
			{"rm", map[string]any{"path": "/tmp/nope"}, 404, "ENOENT"},
			{"rm", map[string]any{"path": "/tmp/nope", "force": true}, 200, ""},
			{"rm", map[string]any{"path": "/tmp/d/link"}, 200, ""},
			{"rm", map[string]any{"path": "/tmp/x", "recursive": true}, 200, ""},
		} {
			code, r := c.json(http.MethodPost, "/fs/"+tc.verb, tc.body)
			if code != tc.want || errCode(r) != tc.code {
				t.Errorf("%s %v = %d %v, want %d %s", tc.verb, tc.body, code, r, tc.want, tc.code)
			}
		}
		if code, st := c.json(http.MethodPost, "/fs/stat", map[string]any{"path": "/tmp/big"}); code != 200 || st["isFile"] != true {
			t.Errorf("rm of a symlink followed it: stat target = %d %v", code, st)
		}

		// The lock holds for exec'd commands: an allowed operation gets
		// the credential injected, a host service is unreachable.
		r = c.exec(map[string]any{"command": "curl -sS --max-time 30 https://api.example.test/v1/items"})
		if !strings.Contains(r["stdout"].(string), `"items":[{"id":"1"}]`) {
			t.Errorf("curl to an allowed operation = %v", r)
		}
		if got := e.up.last(t).Header.Get("Authorization"); got != "Bearer "+canary {
			t.Errorf("the upstream got Authorization %q, want the injected credential", got)
		}
		r = c.exec(map[string]any{"command": "gw=${AILERON_API_URL#http://}; gw=${gw%%:*}; curl -sS --noproxy '*' --connect-timeout 5 --max-time 8 http://$gw:" + hostSvc + "/"})
		if r["exitCode"] == 0.0 || strings.Contains(r["stdout"].(string), "host-service-reached") {
			t.Errorf("an exec'd command reached a host service: %v", r)
		}
		if r := c.exec(map[string]any{"command": "env; tr '\\0' '\\n' < /proc/1/cmdline; tr '\\0' '\\n' < /proc/1/environ"}); !strings.Contains(r["stdout"].(string), "PATH=") || strings.Contains(r["stdout"].(string), sb.Token) {
			t.Errorf("the sandbox's environment and its first process's command line and environment: want them readable and without the control token, got %v", r["exitCode"])
		}

		// The static binary is on PATH, read-only: an agent's MCP client
		// starts `aileron-proxy mcp`, which reaches the session's tools.
		mcpLines := `'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"sh","version":"1"}}}' ` +
			`'{"jsonrpc":"2.0","method":"notifications/initialized"}' '{"jsonrpc":"2.0","id":2,"method":"tools/list"}'`
		r = c.exec(map[string]any{"command": "test ! -w /usr/local/bin/aileron-proxy || echo writable; { printf '%s\\n' " + mcpLines + "; sleep 3; } | aileron-proxy mcp"})
		if out, _ := r["stdout"].(string); r["exitCode"] != 0.0 || strings.Contains(out, "writable") || !strings.Contains(out, `"name":"testapi__items_list"`) {
			t.Errorf("aileron-proxy mcp in the sandbox = %v", r)
		}

		// The CLI: exec passes stdio and the exit status, ls lists it.
		stdout, stderr, code := launchCLI(t, e.home, []string{"CI_SANDBOX_V=from-env"}, time.Minute, "sandbox", "exec", sb.ID, "--cwd", "/tmp", "--env", "K=v 1", "--", "sh", "-c", "pwd; echo $K; echo e >&2; exit 5")
		if code != 5 || stdout != "/tmp\nv 1\n" || !strings.Contains(stderr, "e\n") {
			t.Errorf("sandbox exec = %d %q %q", code, stdout, stderr)
		}
		// With a terminal on its stdin (script(1) makes one), exec gives the
		// command a terminal too.
		tty := exec.Command(testkit.RequireTool(t, "script"), "-qec", binPath+" --home "+e.home+" sandbox exec "+sb.ID+
			" -- sh -c 'test -t 0 && test -t 1 && echo TTY-OK; tty'", "/dev/null")
		tty.Env = testkit.CleanEnv()
		if out, err := tty.CombinedOutput(); err != nil || !strings.Contains(string(out), "TTY-OK") || !strings.Contains(string(out), "/dev/pts/") {
			t.Errorf("sandbox exec on a terminal = %v, %q; want the command on a terminal", err, out)
		}
		if out := mustCLI(t, e.home, "", "sandbox", "ls", "--json"); !strings.Contains(out, `"id": "`+sb.ID+`"`) || strings.Contains(out, sb.Token) {
			t.Errorf("sandbox ls --json = %s", out)
		}
		waitAudit(t, e.home, map[string]any{"event": "sandbox.call", "operation": "exec", "exit_code": 7.0})
		if raw, _ := os.ReadFile(filepath.Join(e.home, "audit", "audit.jsonl")); strings.Contains(string(raw), "FOO") || strings.Contains(string(raw), "0123456789abcdef0123") {
			t.Error("the audit log holds env names or file contents")
		}

		// An in-flight call when the sandbox goes down, then 410.
		inflight := make(chan int, 1)
		go func() {
			b, _ := json.Marshal(map[string]any{"command": "sleep 60"})
			req, _ := http.NewRequest(http.MethodPost, c.base+"/exec", bytes.NewReader(b))
			req.Header.Set("Authorization", "Bearer "+c.token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
			if err != nil {
				inflight <- 0
				return
			}
			resp.Body.Close()
			inflight <- resp.StatusCode
		}()
		time.Sleep(time.Second)
		if out := mustCLI(t, e.home, "", "sandbox", "down", sb.ID); !strings.Contains(out, "removed "+sb.ID) {
			t.Errorf("sandbox down = %q", out)
		}
		select {
		case code := <-inflight:
			if code != 410 {
				t.Errorf("the in-flight exec got %d, want 410", code)
			}
		case <-time.After(30 * time.Second):
			t.Error("the in-flight exec did not end after sandbox down")
		}
		if code, r := c.json(http.MethodPost, "/exec", map[string]any{"command": "true"}); code != 410 || errCode(r) != "SANDBOX_GONE" {
			t.Errorf("exec after down = %d %v, want 410 SANDBOX_GONE", code, r)
		}
		for _, args := range [][]string{
			{"ps", "--all", "--quiet", "--filter", "label=dev.aileron.session=" + sb.SessionID},
			{"network", "ls", "--quiet", "--filter", "label=dev.aileron.session=" + sb.SessionID},
		} {
			out, err := exec.Command(kind, args...).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "" {
				t.Errorf("%s %s = %q, %v; want nothing left", kind, strings.Join(args, " "), out, err)
			}
		}
		waitAudit(t, e.home, map[string]any{"event": "session.ended", "session_id": sb.SessionID})
	})
}

// TestSandboxUpNeedsDaemon: without a running serve, sandbox up says to
// start one.
func TestSandboxUpNeedsDaemon(t *testing.T) {
	_, stderr, code := cli(t, t.TempDir(), "", "sandbox", "up", "--project", t.TempDir())
	if code != 1 || !strings.Contains(stderr, "start `aileron-proxy serve` first") {
		t.Errorf("sandbox up without a daemon = %d %q", code, stderr)
	}
}

// TestSandboxDaemonShutdown: stopping serve --shutdown-sandboxes removes
// its sandboxes (TestSandboxSurvivesRestart covers the default, which
// keeps them).
func TestSandboxDaemonShutdown(t *testing.T) {
	eachRuntime(t, func(t *testing.T, kind string, e *env) {
		sb := upSandbox(t, e, kind, agentWorkspace(t))
		filter := "label=dev.aileron.session=" + sb.SessionID
		if out, _ := exec.Command(kind, "ps", "--quiet", "--filter", filter).CombinedOutput(); strings.TrimSpace(string(out)) == "" {
			t.Fatalf("no running container for the sandbox")
		}
		if err := e.d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			ps, _ := exec.Command(kind, "ps", "--all", "--quiet", "--filter", filter).CombinedOutput()
			nets, _ := exec.Command(kind, "network", "ls", "--quiet", "--filter", filter).CombinedOutput()
			if strings.TrimSpace(string(ps)+string(nets)) == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("60s after serve's SIGTERM the sandbox is still there: containers %q, networks %q", ps, nets)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}, "--shutdown-sandboxes")
}

// TestSandboxContainerDied: when the container is removed behind the
// daemon's back, calls answer 410 SANDBOX_GONE.
func TestSandboxContainerDied(t *testing.T) {
	eachRuntime(t, func(t *testing.T, kind string, e *env) {
		sb := upSandbox(t, e, kind, agentWorkspace(t))
		c := &sandboxClient{t: t, base: sb.APIURL + "/v1/sandboxes/" + sb.ID, token: sb.Token}
		if r := c.exec(map[string]any{"command": "echo alive"}); r["stdout"] != "alive\n" {
			t.Fatalf("exec = %v", r)
		}
		if out, err := exec.Command(kind, "rm", "--force", "aileron-"+sb.SessionID).CombinedOutput(); err != nil {
			t.Fatalf("%s rm: %v: %s", kind, err, out)
		}
		if code, r := c.json(http.MethodPost, "/exec", map[string]any{"command": "true"}); code != 410 || errCode(r) != "SANDBOX_GONE" {
			t.Errorf("exec in a removed container = %d %v, want 410 SANDBOX_GONE", code, r)
		}
		if code, raw := c.do(http.MethodGet, "/files?path=/etc/hostname", nil, ""); code != 410 {
			t.Errorf("read in a removed container = %d %s, want 410", code, raw)
		}
		if out := mustCLI(t, e.home, "", "sandbox", "down", sb.ID); !strings.Contains(out, "removed") {
			t.Errorf("sandbox down after the container died = %q", out)
		}
	})
}

// TestSandboxTTL: a sandbox is removed when its TTL is over.
func TestSandboxTTL(t *testing.T) {
	eachRuntime(t, func(t *testing.T, kind string, e *env) {
		sb := upSandbox(t, e, kind, agentWorkspace(t), "--ttl", "4s")
		c := &sandboxClient{t: t, base: sb.APIURL + "/v1/sandboxes/" + sb.ID, token: sb.Token}
		filter := "label=dev.aileron.session=" + sb.SessionID
		deadline := time.Now().Add(60 * time.Second)
		for {
			ps, _ := exec.Command(kind, "ps", "--all", "--quiet", "--filter", filter).CombinedOutput()
			if strings.TrimSpace(string(ps)) == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the sandbox outlived its 4s TTL by a minute: %q", ps)
			}
			time.Sleep(500 * time.Millisecond)
		}
		if code, r := c.json(http.MethodPost, "/exec", map[string]any{"command": "true"}); code != 410 || errCode(r) != "SANDBOX_GONE" {
			t.Errorf("exec after the TTL = %d %v, want 410 SANDBOX_GONE", code, r)
		}
		if out := mustCLI(t, e.home, "", "sandbox", "ls", "--json"); strings.Contains(out, sb.ID) {
			t.Errorf("sandbox ls still lists the expired sandbox: %s", out)
		}
	})
}

// TestSandboxLifecycleOnce: a long-lived sandbox runs the devcontainer's
// lifecycle commands once, when it comes up, as launch does before an
// agent; a failing one stops `sandbox up` with its exit status and leaves
// no container.
func TestSandboxLifecycleOnce(t *testing.T) {
	eachRuntime(t, func(t *testing.T, kind string, e *env) {
		project := agentWorkspace(t)
		devc := filepath.Join(project, ".devcontainer")
		if err := os.MkdirAll(devc, 0o755); err != nil {
			t.Fatal(err)
		}
		write := func(name, data string) {
			t.Helper()
			if err := os.WriteFile(filepath.Join(devc, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write("Dockerfile", "FROM "+launcher.BaseImage("")+"\n")
		write("devcontainer.json", `{"build": {"dockerfile": "Dockerfile"},
  "postCreateCommand": "echo created >> ${containerWorkspaceFolder}/lifecycle.txt",
  "postStartCommand": ["sh", "-c", "echo started >> /home/agent/workspace/lifecycle.txt"],
  "containerEnv": {"SBX_MARK": "${localEnv:SBX_MARK:unset}"}}`)
		// ${localEnv:...} comes from sandbox up's environment, not serve's.
		out, stderr, code := launchCLI(t, e.home, []string{"SBX_MARK=from-the-cli"}, 8*time.Minute, "sandbox", "up", "--json", "--sandbox="+kind, "--project", project)
		var sb upped
		if code != 0 || json.Unmarshal([]byte(out), &sb) != nil {
			t.Fatalf("sandbox up = exit %d, %q\n%s", code, out, stderr)
		}
		c := &sandboxClient{t: t, base: sb.APIURL + "/v1/sandboxes/" + sb.ID, token: sb.Token}
		r := c.exec(map[string]any{"command": "cat lifecycle.txt"})
		if r["stdout"] != "created\nstarted\n" {
			t.Errorf("lifecycle.txt in the sandbox = %v; want the create and start commands run once, in order", r)
		}
		if r := c.exec(map[string]any{"command": "printf %s \"$SBX_MARK\""}); r["stdout"] != "from-the-cli" {
			t.Errorf("SBX_MARK in the sandbox = %v; want the value from sandbox up's environment", r)
		}

		write("devcontainer.json", `{"build": {"dockerfile": "Dockerfile"}, "postCreateCommand": "exit 7"}`)
		_, stderr, code = launchCLI(t, e.home, nil, 5*time.Minute, "sandbox", "up", "--json", "--sandbox="+kind, "--project", project)
		if code == 0 || !strings.Contains(stderr, "exit status 7") {
			t.Errorf("sandbox up with a failing postCreateCommand = exit %d, stderr %s; want a failure naming exit status 7", code, stderr)
		}
		out = mustCLI(t, e.home, "", "sandbox", "ls", "--json")
		if n := strings.Count(out, `"id"`); n != 1 {
			t.Errorf("sandbox ls after the failed up lists %d sandboxes, want only the first: %s", n, out)
		}
	})
}
