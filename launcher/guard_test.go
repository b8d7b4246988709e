//go:build linux

package launcher

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/launcher/guard"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
)

// TestLaunchGuardFailsClosed: when the guard cannot be installed, launch
// stops with the reason and the fix, the agent never runs, and the holder
// is removed.
func TestLaunchGuardFailsClosed(t *testing.T) {
	d := fakeDaemon(t)
	sessions := &fakeSessions{proxyAddr: d.ProxyAddr}
	conn, store := testConnector(t, "testapi")
	agentRan := false
	respond := respondLikeDocker(func(runtime.Command) error { agentRan = true; return nil })
	f := &fakeExec{respond: func(c runtime.Command) (string, string, error) {
		if c.Args[0] == "exec" {
			return "", "installing the egress guard: the kernel refused the nftables ruleset: operation not permitted", &runtime.ExitError{Code: 1}
		}
		return respond(c)
	}}
	cfg := launchTestConfig(t, newFakeRuntime(t, runtime.Docker, f), sessions, d, conn, store)
	_, err := Launch(context.Background(), cfg)
	for _, want := range []string{"installing the egress guard in aileron-" + launchTestID + "-guard", "operation not permitted", "the agent was not started", "CAP_NET_ADMIN", "docs/launcher.md"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Launch err = %v, want it to contain %q", err, want)
		}
	}
	if agentRan {
		t.Error("the agent ran without its guard")
	}
	if !strings.Contains(allArgv(f), "rm --force aileron-"+launchTestID+"-guard") {
		t.Errorf("the holder was not removed; calls:\n%s", allArgv(f))
	}
}

func TestIsStaticELF(t *testing.T) {
	notELF := filepath.Join(t.TempDir(), "x")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := guard.IsStaticELF(notELF); err == nil {
		t.Error("IsStaticELF(shell script) = nil")
	}
	// /bin/sh is dynamically linked on every distribution CI uses.
	if err := guard.IsStaticELF("/bin/sh"); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("IsStaticELF(/bin/sh) = %v, want the rebuild fix", err)
	}
}
