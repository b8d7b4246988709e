package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/api"
)

// listedSandboxes is a SandboxManager that only lists its sandboxes.
type listedSandboxes []api.SandboxInfo

func (l listedSandboxes) CreateSandbox(context.Context, api.CreateSandboxRequest) (*api.CreatedSandbox, error) {
	return nil, api.ErrSandboxGone
}
func (l listedSandboxes) ListSandboxes() []api.SandboxInfo            { return l }
func (l listedSandboxes) RemoveSandbox(context.Context, string) error { return api.ErrSandboxNotFound }
func (l listedSandboxes) Sandbox(string) (api.Sandbox, bool)          { return nil, false }

// TestSandboxExecEnv: `sandbox exec --env` hands each value to the runtime
// CLI on its environment alone (its name on argv, the CLI process's own
// environment untouched), and refuses a name that is no variable name
// without showing the value.
func TestSandboxExecEnv(t *testing.T) {
	const name = "AILERON_TEST_EXEC_VAR"
	d := newCLIDaemon(t, func(c *api.Config) {
		c.Sandboxes = listedSandboxes{{ID: "sbx_x", Runtime: "docker", Container: "ctr", User: "u", Workdir: "/w"}}
	})
	bin := t.TempDir()
	docker := "#!/bin/sh\nprintf 'argv: %s\\n' \"$*\"\nprintf 'value: %s\\n' \"$" + name + "\"\n"
	if err := os.WriteFile(filepath.Join(bin, "docker"), []byte(docker), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Cleanup(func() { os.Unsetenv(name) })

	out, errOut, code := runCLI(t, d.home, "", nil, "sandbox", "exec", "sbx_x", "--env", name+"=hush value", "--", "true")
	if code != 0 {
		t.Fatalf("sandbox exec = %d, stderr %q", code, errOut)
	}
	if want := "argv: exec --user u --workdir /w -e " + name + " -i ctr true\n"; !strings.Contains(out, want) {
		t.Errorf("stdout %q lacks %q", out, want)
	}
	if !strings.Contains(out, "value: hush value\n") {
		t.Errorf("the runtime CLI did not get the value on its environment: %q", out)
	}
	if v, ok := os.LookupEnv(name); ok {
		t.Errorf("sandbox exec set %s=%q in its own process", name, v)
	}

	for _, tc := range []struct {
		env, want string
	}{
		{"BAD-NAME=hush", `--env: "BAD-NAME" is not an environment variable name; use letters, digits and _`},
		{"1X=hush", `--env: "1X" is not an environment variable name`},
		{"=hush", `--env: "" is not an environment variable name`},
		{"hush", `an --env value has no "="; use --env NAME=VALUE`},
	} {
		t.Run(tc.env, func(t *testing.T) {
			out, errOut, code := runCLI(t, d.home, "", nil, "sandbox", "exec", "sbx_x", "--env", tc.env, "--", "true")
			if code != exitUsage || !strings.Contains(errOut, tc.want) {
				t.Errorf("--env %q = %d, stderr %q; want %d and %q", tc.env, code, errOut, exitUsage, tc.want)
			}
			if out != "" || strings.Contains(errOut, "hush") {
				t.Errorf("--env %q ran the command or showed the value: stdout %q, stderr %q", tc.env, out, errOut)
			}
		})
	}
}
