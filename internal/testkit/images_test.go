package testkit

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestSweepImages builds a one-file image under a test repository and one
// under a kept repository, and checks the sweep removes only the first.
func TestSweepImages(t *testing.T) {
	for _, rt := range []string{"docker", "podman"} {
		t.Run(rt, func(t *testing.T) {
			bin := RequireTool(t, rt)
			if err := exec.Command(bin, "info").Run(); err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("%s is installed but not running: %v", rt, err)
				}
				t.Skipf("%s is not running", rt)
			}
			const swept, kept = "aileron-sweeptest/built:1", "aileron-sweeptest-keep/built:1"
			t.Cleanup(func() { _ = exec.Command(bin, "rmi", "--force", swept, kept).Run() })
			sweep := SweepImages("aileron-sweeptest", "aileron-sweeptest-keep/built")
			for _, tag := range []string{swept, kept} {
				// Different contents, so the two tags are two images.
				dir := t.TempDir()
				if err := os.WriteFile(filepath.Join(dir, "f"), []byte(tag+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM scratch\nCOPY f /f\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				if out, err := exec.Command(bin, "build", "-q", "-t", tag, dir).CombinedOutput(); err != nil {
					t.Fatalf("%s build: %v\n%s", rt, err, out)
				}
			}
			sweep()
			if exec.Command(bin, "image", "inspect", swept).Run() == nil {
				t.Errorf("%s still has %s after the sweep", rt, swept)
			}
			if err := exec.Command(bin, "image", "inspect", kept).Run(); err != nil {
				t.Errorf("the sweep removed the kept image %s: %v", kept, err)
			}
		})
	}
}
