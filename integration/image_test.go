package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// TestServerImage builds the top-level Dockerfile (the aileron-proxy server
// image) from a static binary and runs it.
func TestServerImage(t *testing.T) {
	if testing.Short() {
		t.Skip("image build skipped with -short")
	}
	docker := testkit.RequireTool(t, "docker")
	if err := exec.Command(docker, "info").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("docker engine not answering under CI=true (run .ci/setup): %v", err)
		}
		t.Skipf("no docker engine: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ctxDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ctxDir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(ctxDir, "bin", "aileron-proxy"), "../cmd/aileron-proxy")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("static build: %v\n%s", err, out)
	}
	df, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), df, 0o644); err != nil {
		t.Fatal(err)
	}
	tag := "aileron/aileron-proxy:integration-test"
	if out, err := exec.CommandContext(ctx, docker, "build", "-q", "-t", tag, ctxDir).CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command(docker, "rmi", "-f", "--no-prune", tag).Run() })
	out, err := exec.CommandContext(ctx, docker, "run", "--rm", "--network", "none", tag, "connector", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("docker run %s connector list: %v\n%s", tag, err, out)
	}
	out, err = exec.CommandContext(ctx, docker, "run", "--rm", "--network", "none", "--entrypoint", "id", tag, "-u").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) == "0" {
		t.Errorf("the server image runs as uid %q (%v), want a non-root user", strings.TrimSpace(string(out)), err)
	}
}
