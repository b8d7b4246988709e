package launcher

import (
	"bytes"
	"context"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCheckScriptRealShells runs the in-container script with the shells
// sandbox images commonly have (dash, BusyBox, bash) on the host.
func TestCheckScriptRealShells(t *testing.T) {
	shells := map[string][]string{}
	for name, args := range map[string][]string{"dash": nil, "busybox": {"sh"}, "bash": {"--posix"}} {
		p, err := exec.LookPath(name)
		if err != nil {
			// .ci/setup installs dash and BusyBox: under CI they must run.
			if os.Getenv("CI") == "true" && name != "bash" {
				t.Fatalf("%s is required under CI=true (run .ci/setup)", name)
			}
			continue
		}
		shells[name] = append([]string{p}, args...)
	}
	if len(shells) == 0 {
		t.Skip("no dash, busybox or bash")
	}
	pwned := filepath.Join(t.TempDir(), "pwned")
	for name, sh := range shells {
		t.Run(name, func(t *testing.T) {
			ws := t.TempDir()
			tests := []struct {
				agent, wget, workspace string
				want                   map[string]string // marker → value prefix
			}{
				{"sh", "1", ws, map[string]string{"shell": "ok", "workspace": "ok", "agent": "ok:", "wget": "ok:"}},
				{"definitely-missing-agent", "0", filepath.Join(ws, "absent"), map[string]string{"shell": "ok", "workspace": "fail", "agent": "fail", "wget": ""}},
				{"$(touch " + pwned + ")", "0", ws, map[string]string{"agent": "fail"}},
				{"/bin/sh", "0", ws, map[string]string{"agent": "ok:"}},
			}
			for _, tc := range tests {
				if _, err := exec.LookPath("wget"); err != nil && tc.wget == "1" {
					tc.want["wget"] = "fail"
				}
				args := append(append([]string{}, sh[1:]...), "-c", checkScript, "aileron-check", tc.agent, tc.wget, tc.workspace)
				cmd := exec.Command(sh[0], args...)
				var out bytes.Buffer
				cmd.Stdout = &out
				if err := cmd.Run(); err != nil {
					t.Fatalf("%s check script (agent %q): %v\n%s", name, tc.agent, err, out.String())
				}
				marks := map[string]string{}
				for _, line := range strings.Split(out.String(), "\n") {
					if rest, ok := strings.CutPrefix(line, "aileron-check:"); ok {
						k, v, _ := strings.Cut(rest, ":")
						marks[k] = v
					}
				}
				for k, want := range tc.want {
					if got, ok := marks[k]; want == "" && ok || !strings.HasPrefix(got, want) {
						t.Errorf("%s agent %q: marker %s = %q, want prefix %q\n%s", name, tc.agent, k, got, want, out.String())
					}
				}
				if entries, _ := os.ReadDir(ws); len(entries) != 0 {
					t.Errorf("%s left %d probe files in the workspace", name, len(entries))
				}
			}
			if _, err := os.Stat(pwned); !os.IsNotExist(err) {
				t.Fatalf("the agent argument was executed by the shell (%s exists)", pwned)
			}
		})
	}
}

func TestInterpretCheck(t *testing.T) {
	opts := CheckOptions{Agent: "claude", Shims: true, Workspace: runtime.Mount{Target: WorkspacePath}}
	base := BaseImage("")
	tests := []struct {
		name     string
		stdout   string
		stderr   string
		code     int
		wantOK   map[string]bool
		wantText []string
	}{
		{
			name:   "all pass",
			stdout: "aileron-check:shell:ok\naileron-check:uid:1000\naileron-check:path:/usr/bin\naileron-check:workspace:ok\naileron-check:agent:ok:/usr/bin/claude\naileron-check:wget:ok:/usr/bin/wget\n",
			wantOK: map[string]bool{CheckShell: true, CheckWorkspace: true, CheckAgent: true, CheckWget: true},
		},
		{
			name:     "no shell",
			stderr:   "docker: Error response from daemon: failed to create shim task: OCI runtime create failed: exec: \"/bin/sh\": stat /bin/sh: no such file or directory: unknown.\n",
			code:     127,
			wantOK:   map[string]bool{CheckShell: false},
			wantText: []string{"shell: /bin/sh did not run (container exit status 127): docker: Error response", "needs a POSIX shell at /bin/sh: extend " + base},
		},
		{
			name:   "agent, workspace and wget missing",
			stdout: "aileron-check:shell:ok\naileron-check:uid:4242\naileron-check:path:/usr/local/bin:/usr/bin\naileron-check:workspace:fail\naileron-check:agent:fail\naileron-check:wget:fail\n",
			wantOK: map[string]bool{CheckShell: true, CheckWorkspace: false, CheckAgent: false, CheckWget: false},
			wantText: []string{
				"workspace: " + WorkspacePath + " is not writable by the image's user (uid 4242)",
				`agent: agent command "claude" is not on PATH (PATH=/usr/local/bin:/usr/bin); install "claude" in .devcontainer/Dockerfile`,
				"wget: wget is not on PATH, and the connector shims call it; install it in the Dockerfile",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := interpretCheck(tc.stdout, tc.stderr, tc.code, opts, base)
			got := map[string]bool{}
			for _, r := range res {
				got[r.Name] = r.OK
				if r.OK == (r.Fix != "") {
					t.Errorf("result %+v: a fix must come with, and only with, a failure", r)
				}
			}
			if len(got) != len(tc.wantOK) {
				t.Errorf("results = %+v, want %v", res, tc.wantOK)
			}
			for k, v := range tc.wantOK {
				if got[k] != v {
					t.Errorf("%s ok = %v, want %v", k, got[k], v)
				}
			}
			rep := CheckReport{Image: "img:1", Agent: "claude", Results: res}
			if rep.OK() != (len(tc.wantText) == 0) {
				t.Errorf("OK() = %v", rep.OK())
			}
			if len(tc.wantText) == 0 {
				if rep.Err() != nil {
					t.Errorf("Err() = %v, want nil", rep.Err())
				}
				return
			}
			msg := rep.Err().Error()
			if !strings.HasPrefix(msg, `checking image img:1 for agent "claude":`) {
				t.Errorf("Err() = %q", msg)
			}
			for _, w := range tc.wantText {
				if !strings.Contains(msg, w) {
					t.Errorf("Err() =\n%s\nwant it to contain %q", msg, w)
				}
			}
		})
	}
	if (CheckReport{}).OK() {
		t.Errorf("an empty report is OK; it must not be")
	}
}

func TestCheckRunsAThrowawayContainer(t *testing.T) {
	rt := &fakeRuntime{images: map[string]bool{}, runFn: func(req runtime.RunRequest) (int, error) {
		// Behave like the image: run the real script against the mounted dir.
		args := append([]string{}, req.Cmd...)
		args[len(args)-1] = req.Mounts[0].Source
		cmd := exec.Command("sh", args...)
		cmd.Stdout, cmd.Stderr = req.Stdout, req.Stderr
		if err := cmd.Run(); err != nil {
			return 1, nil
		}
		return 0, nil
	}}
	rep, err := Check(context.Background(), rt, CheckOptions{Image: "img:1", Agent: "no-such-agent-xyz", Shims: false})
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	req := rt.runs[0]
	if req.Network != "none" || req.Entrypoint != "/bin/sh" || req.Keep || req.Workdir != WorkspacePath {
		t.Errorf("run request = %+v, want a removed, network-less /bin/sh container", req)
	}
	if len(req.Mounts) != 1 || req.Mounts[0].Target != WorkspacePath || req.Mounts[0].ReadOnly {
		t.Errorf("mounts = %+v, want the workspace read-write", req.Mounts)
	}
	if got := req.Cmd[len(req.Cmd)-3]; got != "no-such-agent-xyz" || strings.Contains(req.Cmd[1], "no-such-agent-xyz") {
		t.Errorf("agent passed as %q; it must be a positional argument, never in the script", req.Cmd)
	}
	if _, err := os.Stat(req.Mounts[0].Source); !os.IsNotExist(err) {
		t.Errorf("temporary workspace %s left behind", req.Mounts[0].Source)
	}
	if rep.OK() || len(rep.Results) != 3 {
		t.Fatalf("report = %+v, want shell, workspace, agent with the agent failing", rep)
	}
	err = rep.Err()
	if err == nil || !strings.Contains(err.Error(), `agent command "no-such-agent-xyz" is not on PATH`) {
		t.Errorf("Err() = %v", err)
	}

	for _, bad := range []string{"", "-rf", "a\nb"} {
		if _, err := Check(context.Background(), rt, CheckOptions{Image: "i", Agent: bad}); err == nil {
			t.Errorf("Check(agent %q) succeeded", bad)
		}
	}

	// A devcontainer workspaceMount moves the workspace: the check writes
	// where the agent will.
	const target = "/workspaces/project"
	if _, err := Check(context.Background(), rt, CheckOptions{Image: "img:1", Agent: "sh", Workspace: runtime.Mount{Target: target, ReadOnly: true}}); err != nil {
		t.Fatalf("Check: %v", err)
	}
	req = rt.runs[len(rt.runs)-1]
	if req.Workdir != target || len(req.Mounts) != 1 || req.Mounts[0].Target != target || req.Mounts[0].ReadOnly || req.Cmd[len(req.Cmd)-1] != target {
		t.Errorf("with WorkspaceTarget %s: run request = %+v, want the workspace mounted read-write, checked and entered there", target, req)
	}
	results := interpretCheck("aileron-check:shell:ok\naileron-check:uid:1000\naileron-check:workspace:fail\n", "", 1, CheckOptions{Image: "i", Agent: "sh", Workspace: runtime.Mount{Target: target}}, BaseImage(""))
	if i := slices.IndexFunc(results, func(r CheckResult) bool { return r.Name == CheckWorkspace }); i < 0 || !strings.Contains(results[i].Detail, target+" is not writable") {
		t.Errorf("results = %+v, want a workspace result naming %s", results, target)
	}
}
