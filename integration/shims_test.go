package integration

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// shell is one /bin/sh + wget pair a sandbox image may have.
type shell struct {
	name string
	sh   []string // the shell command
	path string   // PATH, whose wget is the one under test
}

func shells(t *testing.T) []shell {
	t.Helper()
	var out []shell
	bb := testkit.RequireTool(t, "busybox")
	dir := t.TempDir()
	for _, app := range []string{"sh", "wget", "cat", "rm", "mktemp", "printf", "tr", "sed", "grep", "head", "cut"} {
		if err := os.Symlink(bb, filepath.Join(dir, app)); err != nil {
			t.Fatal(err)
		}
	}
	out = append(out, shell{"busybox", []string{bb, "sh"}, dir})
	dash := testkit.RequireTool(t, "dash")
	testkit.RequireTool(t, "wget")
	out = append(out, shell{"dash+gnu-wget", []string{dash}, "/usr/local/bin:/usr/bin:/bin"})
	return out
}

func (e *env) renderShims(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tools")
	mustCLI(t, e.home, "", "tools", "render", "--out", dir, "--agent", "claude")
	tools, err := os.ReadFile(filepath.Join(dir, "tools.txt"))
	if err != nil || !strings.HasPrefix(string(tools), "testapi local://test/echo -- Aileron connector operations: ") {
		t.Fatalf("tools.txt = %q, %v", tools, err)
	}
	return filepath.Join(dir, "bin", "testapi")
}

func runShim(t *testing.T, sh shell, shim string, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sh.sh[0], append(append(sh.sh[1:], shim), args...)...)
	cmd.Env = append([]string{"PATH=" + sh.path, "HOME=" + t.TempDir()}, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	code := exitCode(t, cmd.Run(), cmd.Args)
	return out.String(), errb.String(), code
}

func TestShimsAgainstServe(t *testing.T) {
	e := newEnv(t, "--approval-timeout", "1s")
	shim := e.renderShims(t)
	sandboxEnv := []string{
		"AILERON_API_URL=" + e.d.APIURL + "/v1/",
		"AILERON_TOKEN=" + e.s.APIToken,
		"AILERON_SESSION_ID=" + e.s.ID,
	}
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + dead.Addr().String() + "/v1"
	dead.Close()

	for _, sh := range shells(t) {
		t.Run(sh.name, func(t *testing.T) {
			out, errOut, code := runShim(t, sh, shim, nil, "--help")
			if code != 0 || !strings.Contains(out, "local://test/echo") || !strings.Contains(out, "items.list") {
				t.Errorf("--help without a daemon = %d\n%s\n%s", code, out, errOut)
			}

			awkward := `{"name":"quote \" back \\ nl \n uni \u00e9 ☃ $HOME ` + "`id`" + ` '"}`
			out, errOut, code = runShim(t, sh, shim, sandboxEnv, "items.create", "--args", awkward)
			if code != 0 || !strings.Contains(out, `"items"`) {
				t.Fatalf("items.create = %d\nstdout %s\nstderr %s", code, out, errOut)
			}
			if got := string(e.up.last(t).Body); !strings.Contains(got, `"name":"quote \" back \\ nl \n uni`) || !strings.Contains(got, "$HOME `id` '") {
				t.Errorf("upstream body %q lost the awkward characters", got)
			}

			out, _, code = runShim(t, sh, shim, sandboxEnv, "items.get", "--args", `{"id":"404"}`)
			if code != 1 || !strings.Contains(out, `"id":"404"`) {
				t.Errorf("upstream 404 = exit %d, stdout %q; want 1 with the body", code, out)
			}
			out, _, code = runShim(t, sh, shim, sandboxEnv, "items.get", "--args", `{"id":"9"}`, "--json")
			if code != 0 || !strings.Contains(out, `"status":"proxied"`) && !strings.Contains(out, `"status": "proxied"`) {
				t.Errorf("--json = exit %d, %q; want the envelope", code, out)
			}
			for _, bad := range [][]string{{"nope"}, {"items.list", "--args", "[1]"}, {"items.list", "--bogus"}, {"items.create", "--args", "{}"}} {
				if _, errOut, code := runShim(t, sh, shim, sandboxEnv, bad...); code != 64 || errOut == "" {
					t.Errorf("%v = exit %d (stderr %q), want 64 with a message", bad, code, errOut)
				}
			}
			if _, errOut, code := runShim(t, sh, shim, sandboxEnv, "items.send", "--args", `{"to":"x"}`); code != 77 || errOut == "" {
				t.Errorf("approval timeout = exit %d (%q), want 77", code, errOut)
			}
			if _, errOut, code := runShim(t, sh, shim, []string{"AILERON_API_URL=" + deadURL, "AILERON_TOKEN=x"}, "items.list"); code != 69 || errOut == "" {
				t.Errorf("unreachable daemon = exit %d (%q), want 69", code, errOut)
			}
			if _, _, code := runShim(t, sh, shim, nil, "items.list"); code != 69 {
				t.Errorf("AILERON_API_URL unset = exit %d, want 69", code)
			}
		})
	}
}
