package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/launcher"
	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
)

// TestLaunchWorkspaceOwner launches in real Docker and Podman containers
// with projects owned by different users (devcontainer updateRemoteUserUID):
// uid 1234 gets the image user remapped, so the agent's files belong to
// 1234:1234 on the host; a root-owned project runs the agent as uid 0 (with
// every capability dropped); "updateRemoteUserUID": false keeps the image
// user (uid 1000).
func TestLaunchWorkspaceOwner(t *testing.T) {
	if os.Getuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true runs as root: this test chowns project directories")
		}
		t.Skip("needs root to chown the project directories")
	}
	const agentScript = `id -u; id -g; echo from-agent > written; grep -E '^CapBnd:' /proc/self/status`
	for _, kind := range []string{"docker", "podman"} {
		t.Run(kind, func(t *testing.T) {
			requireRuntime(t, kind)
			home := t.TempDir()
			t.Cleanup(func() { removeSandboxes(t, kind, home) })
			ownedBy := func(uid int, config string) string {
				dir := filepath.Join(t.TempDir(), "project")
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if config != "" {
					if err := os.MkdirAll(filepath.Join(dir, ".devcontainer"), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(dir, devcontainer.Path), []byte(config), 0o644); err != nil {
						t.Fatal(err)
					}
					// The image user keeps uid 1000: let it write.
					if err := os.Chmod(dir, 0o777); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.Chown(dir, uid, uid); err != nil {
					t.Fatal(err)
				}
				return dir
			}
			for _, tc := range []struct {
				name       string
				project    string
				wantIDs    string
				wantBanner string
				wantOwner  int
			}{
				{"uid 1234 remapped", ownedBy(1234, ""), "1234\n1234\n", "user     agent remapped to uid 1234, gid 1234", 1234},
				{"root-owned project", ownedBy(0, ""), "0\n0\n", "user     root (uid 0): the project is owned by root", 0},
				{"updateRemoteUserUID false", ownedBy(1234, `{"image": "`+launcher.BaseImage("")+`", "updateRemoteUserUID": false}`), "1000\n1000\n", "(updateRemoteUserUID is false)", 1000},
			} {
				t.Run(tc.name, func(t *testing.T) {
					stdout, stderr, code := launchCLI(t, home, nil, 5*time.Minute,
						"launch", "--sandbox="+kind, "--project", tc.project, "--", "sh", "-c", agentScript)
					if code != 0 || !strings.HasPrefix(stdout, tc.wantIDs) || !strings.Contains(stdout, "CapBnd:\t0000000000000000") {
						t.Fatalf("launch = exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
					}
					if !strings.Contains(stderr, tc.wantBanner) {
						t.Errorf("banner lacks %q:\n%s", tc.wantBanner, stderr)
					}
					st, err := os.Stat(filepath.Join(tc.project, "written"))
					if err != nil {
						t.Fatalf("the agent's file: %v", err)
					}
					sys := st.Sys().(*syscall.Stat_t)
					if int(sys.Uid) != tc.wantOwner || int(sys.Gid) != tc.wantOwner {
						t.Errorf("the agent's file is owned by %d:%d on the host, want %d:%d", sys.Uid, sys.Gid, tc.wantOwner, tc.wantOwner)
					}
				})
			}
			t.Cleanup(func() {
				out, _ := runtimeOutput(kind, "images", "--format", "{{.Repository}}:{{.Tag}}", launcher.UIDImageRepository)
				for _, ref := range strings.Fields(out) {
					if strings.HasSuffix(ref, "-1234-1234") {
						_, _ = runtimeOutput(kind, "rmi", "--force", "--no-prune", ref)
					}
				}
			})
		})
	}
}

func runtimeOutput(kind string, args ...string) (string, error) {
	out, err := exec.Command(kind, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w", kind, strings.Join(args, " "), err)
	}
	return string(out), nil
}
