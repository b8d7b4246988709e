package launcher

import (
	"bytes"
	"context"
	"errors"
	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestLifecycleParsedAndPlanned(t *testing.T) {
	dir := writeProject(t, map[string]string{devcontainer.Path: `{
  "image": "debian:bookworm-slim",
  "postStartCommand": ["echo", "started"],
  "postCreateCommand": {"b": "echo b > b.txt", "a": ["touch", "${containerWorkspaceFolder}/a.txt"]},
  "onCreateCommand": "echo on-create",
  "updateContentCommand": "",
  "initializeCommand": "echo host",
  "postAttachCommand": "echo attach",
}`})
	p, err := NewPlan(dir, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, s := range p.Lifecycle {
		keys = append(keys, s.Key)
	}
	if got := strings.Join(keys, " "); got != "onCreateCommand postCreateCommand postStartCommand" {
		t.Errorf("lifecycle order = %q, want onCreate, postCreate, postStart (an empty command is skipped)", got)
	}
	if p.InitializeCommand == nil || p.InitializeCommand.Commands[0].Shell != "echo host" {
		t.Errorf("InitializeCommand = %+v", p.InitializeCommand)
	}
	if err := p.HostCommandsRefusal(false); err == nil || !strings.Contains(err.Error(), "initializeCommand: refused: it runs on the host") || !strings.Contains(err.Error(), "--allow-host-commands") {
		t.Errorf("HostCommandsRefusal(false) = %v, want the reason and the flag", err)
	}
	if err := p.HostCommandsRefusal(true); err != nil {
		t.Errorf("HostCommandsRefusal(true) = %v", err)
	}
	var text bytes.Buffer
	if err := WritePlanText(&text, p, RuntimeInfo{Kind: "docker", Selection: "--runtime docker"}); err != nil {
		t.Fatal(err)
	}
	golden(t, "plan-lifecycle.txt", normalize(text.String(), dir))
	for _, bad := range []string{`{"image": "x", "postCreateCommand": 3}`, `{"image": "x", "postCreateCommand": {"a": true}}`} {
		if _, err := devcontainer.Parse("dc.json", []byte(bad)); err == nil || !strings.Contains(err.Error(), "must be a string, an array of strings or an object") {
			t.Errorf("ParseDevContainer(%s) error = %v", bad, err)
		}
	}
}

// runScript runs LifecycleScript with the real /bin/sh in dir.
func runScript(t *testing.T, dir string, steps []devcontainer.LifecycleStep, createTime bool, agent ...string) (string, int) {
	t.Helper()
	cmd := exec.Command("/bin/sh", append([]string{"-c", devcontainer.LifecycleScript(steps, createTime), "aileron-lifecycle"}, agent...)...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), 0
}

func TestLifecycleScript(t *testing.T) {
	dir := t.TempDir()
	steps := []devcontainer.LifecycleStep{
		{Key: "onCreateCommand", Commands: []devcontainer.LifecycleCommand{{Shell: "echo one >> order"}}},
		{Key: "postCreateCommand", Commands: []devcontainer.LifecycleCommand{
			// Parallel: a waits for b's file, so it only finishes if both run at once.
			{Name: "a", Shell: "i=0; while [ ! -f b-ran ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done; [ -f b-ran ] && echo two >> order"},
			{Name: "b", Args: []string{"touch", "b-ran"}},
		}},
		{Key: "postStartCommand", Commands: []devcontainer.LifecycleCommand{{Args: []string{"sh", "-c", "echo \"$0\" >> order", "it's quoted"}}}},
	}
	out, code := runScript(t, dir, steps, true, "sh", "-c", "cat order; exit 7")
	if code != 7 || !strings.Contains(out, "one\ntwo\nit's quoted\n") {
		t.Errorf("script = exit %d, output %q; want the steps in order, then the agent's exit 7", code, out)
	}
	if !strings.Contains(out, "aileron: running postCreateCommand: a: ") {
		t.Errorf("output %q does not show the commands it runs", out)
	}
	// A later start of a long-lived sandbox runs postStartCommand only.
	if err := os.Remove(filepath.Join(dir, "order")); err != nil {
		t.Fatal(err)
	}
	out, code = runScript(t, dir, steps, false, "cat", "order")
	if code != 0 || out != "aileron: running postStartCommand: sh -c echo \"$0\" >> order it's quoted\nit's quoted\n" {
		t.Errorf("createTime=false: exit %d, output %q", code, out)
	}
	// A failing command stops with its status before the agent.
	failing := []devcontainer.LifecycleStep{{Key: "postCreateCommand", Commands: []devcontainer.LifecycleCommand{{Name: "ok", Shell: "true"}, {Name: "bad", Shell: "exit 3"}}}}
	out, code = runScript(t, dir, failing, true, "sh", "-c", "echo AGENT RAN")
	if code != 3 || strings.Contains(out, "AGENT RAN") || !strings.Contains(out, "aileron: postCreateCommand failed (bad: exit 3) with exit status 3; the agent was not started") {
		t.Errorf("failing step: exit %d, output %q; want 3, the failure named and no agent", code, out)
	}
}

func TestRunInitializeCommand(t *testing.T) {
	dir := writeProject(t, map[string]string{devcontainer.Path: `{"image": "x", "initializeCommand": {"w": "echo ${localWorkspaceFolderBasename} > from-host"}}`})
	p, err := NewPlan(dir, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := RunInitializeCommand(context.Background(), p, nil, &out); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "from-host")); err != nil || string(b) != "My Project\n" {
		t.Errorf("initializeCommand wrote %q, %v; want the project's basename", b, err)
	}
	p.InitializeCommand.Commands[0].Shell = "exit 4"
	if err := RunInitializeCommand(context.Background(), p, nil, &out); err == nil || !strings.Contains(err.Error(), "exit status 4") {
		t.Errorf("failing initializeCommand = %v, want exit status 4", err)
	}
}

// TestAgentCommandKeepsCommandsOutOfArgv: lifecycle commands (which may
// hold resolved ${localEnv:...} values) travel in the environment, not in
// the runtime's argv, and the agent does not inherit the script.
func TestAgentCommandKeepsCommandsOutOfArgv(t *testing.T) {
	steps := []devcontainer.LifecycleStep{{Key: "postCreateCommand", Commands: []devcontainer.LifecycleCommand{{Shell: "echo s3cr3t-from-localenv > lifecycle.out\nprintf '%s\\n' 'back\\slash \\c \\n' >> lifecycle.out"}}}}
	entry, cmd, env := agentCommand([]string{"sh", "-c", `echo "agent sees [$` + lifecycleScriptEnv + `]"`}, steps)
	if strings.Contains(entry+strings.Join(cmd, " "), "s3cr3t") {
		t.Fatalf("argv %s %q holds the lifecycle command", entry, cmd)
	}
	if _, err := newFakeRuntime(t, runtime.Docker, &fakeExec{}).Run(context.Background(), runtime.RunRequest{Image: "img", Env: env}); err != nil {
		t.Fatalf("the runtime's env file cannot carry the script: %v", err)
	}
	dir := t.TempDir()
	c := exec.Command(entry, cmd...)
	c.Dir = dir
	c.Env = append(os.Environ(), lifecycleScriptEnv+"="+env[lifecycleScriptEnv])
	out, err := c.CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "agent sees []\n") {
		t.Errorf("run = %q, %v; want the agent without the script in its environment", out, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "lifecycle.out")); string(b) != "s3cr3t-from-localenv\nback\\slash \\c \\n\n" {
		t.Errorf("the lifecycle command did not run: %q", b)
	}
	if e, c2, env2 := agentCommand([]string{"claude", "-p"}, nil); e != "claude" || len(c2) != 1 || env2 != nil {
		t.Errorf("without lifecycle commands = %q %q %v, want the agent as entrypoint", e, c2, env2)
	}
}
