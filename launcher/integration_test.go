package launcher

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"go.uber.org/zap/zaptest"
)

// realRuntime returns a Runtime for kind when its engine answers. It skips
// otherwise, except under CI=true, where .ci/containers.sh has set both up
// and a missing runtime is a failure.
func realRuntime(t *testing.T, kind runtime.Kind) runtime.Runtime {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, string(kind), "info")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := string(kind) + " info failed: " + err.Error() + ": " + runtime.LastLines(out.String(), 2)
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (CI=true: .ci/containers.sh should have set %s up)", msg, kind)
		}
		t.Skip(msg)
	}
	rt, err := runtime.New(context.Background(), runtime.Config{Kind: kind, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// TestSandboxRealRuntimes builds every tier with real Docker and Podman and
// runs the checks in real containers. The base layer (debian:bookworm-slim)
// must be local or pullable: in CI, .ci/containers.sh imports it.
func TestSandboxRealRuntimes(t *testing.T) {
	for _, kind := range []runtime.Kind{runtime.Docker, runtime.Podman} {
		t.Run(string(kind), func(t *testing.T) {
			rt := realRuntime(t, kind)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			var log bytes.Buffer
			prepare := func(p *Plan, policy BuildPolicy) PrepareResult {
				t.Helper()
				log.Reset()
				res, err := Prepare(ctx, rt, p, PrepareOptions{Policy: policy, Output: &log})
				if err != nil {
					t.Fatalf("Prepare(tier %s, %s): %v\nbuild log tail:\n%s", p.Tier, policy, err, runtime.LastLines(log.String(), 30))
				}
				return res
			}

			// Tier 0: the embedded definition, rebuilt.
			p0, err := NewPlan(t.TempDir(), PlanOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res := prepare(p0, BuildAlways); len(res.Built) != 1 || res.Built[0] != p0.BaseImage {
				t.Fatalf("tier 0 built %q, want %s", res.Built, p0.BaseImage)
			}
			if res := prepare(p0, BuildAuto); len(res.Built) != 0 {
				t.Errorf("tier 0 under auto rebuilt a present image: %q", res.Built)
			}

			// A missing agent fails with its fix; the rest of the contract holds.
			rep, err := Check(ctx, rt, CheckOptions{Image: p0.Image, Agent: "aileron-no-such-agent", Shims: true})
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			for _, r := range rep.Results {
				if r.OK != (r.Name != CheckAgent) {
					t.Errorf("tier 0 check %s ok=%v (%s), want only the agent check to fail", r.Name, r.OK, r.Detail)
				}
			}
			if len(rep.Results) != 4 {
				t.Errorf("results = %+v, want shell, workspace, agent, wget", rep.Results)
			}
			msg := ""
			if err := rep.Err(); err != nil {
				msg = err.Error()
			}
			for _, want := range []string{
				`checking image ` + p0.Image + ` for agent "aileron-no-such-agent"`,
				`agent command "aileron-no-such-agent" is not on PATH (PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)`,
				"sandbox build",
			} {
				if !strings.Contains(msg, want) {
					t.Errorf("check error =\n%s\nwant it to contain %q", msg, want)
				}
			}
			rep, err = Check(ctx, rt, CheckOptions{Image: p0.Image, Agent: "curl", Shims: true})
			if err != nil || !rep.OK() {
				t.Errorf("Check(curl) = %+v, %v; want every check to pass", rep, err)
			}
			if os.Getuid() == 0 {
				// A root-owned 0700 project cannot be written by the image's
				// uid 1000 under a rootful runtime: the check says so.
				rep, err = Check(ctx, rt, CheckOptions{Image: p0.Image, Agent: "curl", Workspace: runtime.Mount{Source: t.TempDir()}})
				if err != nil || rep.OK() || !strings.Contains(fmt.Sprint(rep.Err()), "is not writable by the image's user (uid 1000)") {
					t.Errorf("Check(root-owned workspace) = %+v, %v; want the workspace check to fail for uid 1000", rep, err)
				}
			}

			// Tier 1: the scaffolded starter plus a JSONC devcontainer with
			// comments and trailing commas and a build arg.
			dir := t.TempDir()
			if _, err := Init(dir, InitOptions{}); err != nil {
				t.Fatal(err)
			}
			dc := `// tier 1 test
{
  "build": {
    "dockerfile": "Dockerfile", // the starter
    "args": {"AILERON_TEST_ARG": "from-devcontainer",},
  },
  "containerEnv": {"EDITOR": "vi",},
}
`
			if err := os.WriteFile(filepath.Join(dir, ".devcontainer", "devcontainer.json"), []byte(dc), 0o644); err != nil {
				t.Fatal(err)
			}
			df := filepath.Join(dir, ".devcontainer", "Dockerfile")
			body, err := os.ReadFile(df)
			if err != nil {
				t.Fatal(err)
			}
			body = bytes.Replace(body, []byte("USER agent\n"), []byte("ARG AILERON_TEST_ARG\nRUN printf '#!/bin/sh\\necho %s\\n' \"$AILERON_TEST_ARG\" > /usr/local/bin/fake-agent && chmod 0755 /usr/local/bin/fake-agent\nUSER agent\n"), 1)
			if err := os.WriteFile(df, body, 0o644); err != nil {
				t.Fatal(err)
			}
			p1, err := NewPlan(dir, PlanOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = exec.Command(string(kind), "rmi", "--force", "--no-prune", p1.Image).Run() })
			if p1.Tier != TierDevcontainer || !p1.Build.ExtendsBase {
				t.Fatalf("tier 1 plan = %+v", p1)
			}
			if res := prepare(p1, BuildAuto); len(res.Built) != 1 || res.Built[0] != p1.Image {
				t.Fatalf("tier 1 built %q, want only %s (the base is present)", res.Built, p1.Image)
			}
			var out bytes.Buffer
			code, err := rt.Run(ctx, runtime.RunRequest{Image: p1.Image, Cmd: []string{"fake-agent"}, Network: "none", Stdout: &out, Stderr: &out})
			if err != nil || code != 0 || strings.TrimSpace(out.String()) != "from-devcontainer" {
				t.Errorf("tier 1 fake-agent = %d, %v, %q; want the build arg echoed", code, err, out.String())
			}
			out.Reset()
			code, err = rt.Run(ctx, runtime.RunRequest{Image: p1.Image, Cmd: []string{"id", "-un"}, Network: "none", Stdout: &out, Stderr: &out})
			if err != nil || code != 0 || strings.TrimSpace(out.String()) != "agent" {
				t.Errorf("tier 1 user = %d, %v, %q; want agent", code, err, out.String())
			}
			if rep, err := Check(ctx, rt, CheckOptions{Image: p1.Image, Agent: "fake-agent", Shims: true}); err != nil || !rep.OK() {
				t.Errorf("Check(tier 1, fake-agent) = %+v, %v", rep, err)
			}

			// Tier 2: a BYO image used as supplied (here: the base, present).
			dir2 := writeProject(t, map[string]string{devcontainer.Path: `{"customizations": {"aileron": {"image": "` + p0.BaseImage + `",},},}`})
			p2, err := NewPlan(dir2, PlanOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res := prepare(p2, BuildNever); p2.Tier != TierImage || len(res.Built)+len(res.Pulled) != 0 {
				t.Errorf("tier 2 = %s, prepared %+v; want it used as supplied", p2.Tier, res)
			}

			// The exit status of the container comes back.
			code, err = rt.Run(ctx, runtime.RunRequest{Image: p0.Image, Cmd: []string{"sh", "-c", "exit 3"}, Network: "none"})
			if err != nil || code != 3 {
				t.Errorf("Run(exit 3) = %d, %v", code, err)
			}
		})
	}
}
