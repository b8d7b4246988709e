package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/launcher"
)

func TestSandboxInitAndPlan(t *testing.T) {
	dir := t.TempDir()
	out, errOut, code := runCLI(t, t.TempDir(), "", nil, "sandbox", "init", "--project", dir)
	if code != exitOK || !strings.Contains(out, "wrote "+filepath.Join(dir, ".devcontainer", "devcontainer.json")) || !strings.Contains(out, "wrote "+filepath.Join(dir, ".devcontainer", "Dockerfile")) {
		t.Fatalf("sandbox init = %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	_, errOut, code = runCLI(t, t.TempDir(), "", nil, "sandbox", "init", "--project", dir)
	if code != exitFailure || !strings.Contains(errOut, "already exists; pass --force to overwrite") {
		t.Errorf("second sandbox init = %d, stderr %q; want a refusal naming --force", code, errOut)
	}
	if _, errOut, code = runCLI(t, t.TempDir(), "", nil, "sandbox", "init", "--project", dir, "--force"); code != exitOK {
		t.Errorf("sandbox init --force = %d, stderr %q", code, errOut)
	}

	out, errOut, code = runCLI(t, t.TempDir(), "", nil, "sandbox", "plan", "--project", dir, "--json", "--runtime", "podman")
	if code != exitOK {
		t.Fatalf("sandbox plan --json = %d, stderr %q", code, errOut)
	}
	var plan struct {
		Tier     int    `json:"tier"`
		TierName string `json:"tier_name"`
		Image    string `json:"image"`
		Build    struct {
			Dockerfile  string `json:"dockerfile"`
			ExtendsBase bool   `json:"extends_base"`
		} `json:"build"`
		Runtime *struct {
			Kind      string `json:"kind"`
			Selection string `json:"selection"`
		} `json:"runtime"`
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatalf("plan JSON: %v\n%s", err, out)
	}
	if plan.Tier != 1 || plan.TierName != "devcontainer" || !plan.Build.ExtendsBase || plan.Build.Dockerfile != filepath.Join(dir, ".devcontainer", "Dockerfile") {
		t.Errorf("plan = %+v, want tier 1 building the starter Dockerfile", plan)
	}
	if plan.Runtime == nil || (plan.Runtime.Kind != "podman" && !strings.Contains(plan.Runtime.Selection, "finding podman")) {
		t.Errorf("plan runtime = %+v, want podman or why it is unusable", plan.Runtime)
	}

	out, _, code = runCLI(t, t.TempDir(), "", nil, "sandbox", "plan", "--project", t.TempDir(), "--runtime", "docker")
	if code != exitOK || !strings.Contains(out, "tier:             0 (base)\n") || !strings.Contains(out, "image:            "+launcher.BaseImage("")+"\n") || !strings.Contains(out, "runtime:") {
		t.Errorf("sandbox plan (tier 0) = %d\n%s", code, out)
	}
}

func TestSandboxUsageAndConfigErrors(t *testing.T) {
	bad := t.TempDir()
	if err := os.MkdirAll(filepath.Join(bad, ".devcontainer"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad, ".devcontainer", "devcontainer.json"), []byte("{\n  // comment\n  \"customizations\": {\"aileron\": {\"approval_surface\": \"web\",},},\n}"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown runtime", []string{"sandbox", "plan", "--runtime", "lxc"}, exitUsage, `unknown container runtime "lxc"`},
		{"check needs --agent", []string{"sandbox", "check"}, exitUsage, "--agent is required"},
		{"bad build policy", []string{"sandbox", "check", "--agent=x", "--sandbox-build", "sometimes"}, exitUsage, `unknown build policy "sometimes"`},
		{"stray argument", []string{"sandbox", "plan", "extra"}, exitUsage, "unknown command"},
		{"unknown agent recipe", []string{"sandbox", "init", "--agent", "aider", "--project", bad}, exitUsage, `--agent: unknown agent "aider": use one of claude, codex, gemini, opencode`},
		{"unknown subcommand", []string{"sandbox", "bogus"}, exitUsage, `unknown command "bogus" for "aileron-proxy sandbox"`},
		{"bad devcontainer value", []string{"sandbox", "plan", "--project", bad, "--runtime", "docker"}, exitFailure,
			filepath.Join(bad, ".devcontainer", "devcontainer.json") + `:3:54: customizations.aileron.approval_surface: unsupported value "web"; use one of "api", "cli", "both"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := runCLI(t, t.TempDir(), "", nil, tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Errorf("%v = %d, stderr %q; want %d and %q", tc.args, code, errOut, tc.code, tc.want)
			}
		})
	}
}

// TestSandboxCheckRealDocker runs `sandbox check` against a real Docker for
// an agent the tier 0 image lacks (skipped without Docker unless CI=true).
func TestSandboxCheckRealDocker(t *testing.T) {
	if err := exec.Command("docker", "info").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("docker info: %v (CI=true: .ci/containers.sh should have started dockerd)", err)
		}
		t.Skipf("docker info: %v", err)
	}
	out, errOut, code := runCLI(t, t.TempDir(), "", nil, "sandbox", "check", "--agent=aileron-no-such-agent", "--runtime", "docker", "--project", t.TempDir())
	if code != exitFailure {
		t.Fatalf("sandbox check = %d, want %d\nstdout: %s\nstderr: %s", code, exitFailure, out, errOut)
	}
	for _, want := range []string{"ok    shell", "ok    workspace", "FAIL  agent", "ok    wget"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, `agent command "aileron-no-such-agent" is not on PATH`) || !strings.Contains(errOut, "install \"aileron-no-such-agent\" in .devcontainer/Dockerfile") {
		t.Errorf("stderr lacks the failure and its fix:\n%s", errOut)
	}
}
