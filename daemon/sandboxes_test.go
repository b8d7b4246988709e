package daemon

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/api"
	"github.com/aileron-dev/aileron-proxy/console"
	"github.com/aileron-dev/aileron-proxy/launcher"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
)

// TestConsoleSandboxesRemoveUnknown: the console's Remove reports an
// unknown sandbox as console.ErrSandboxNotFound, which the console maps
// to 404, with and without a sandbox manager.
func TestConsoleSandboxesRemoveUnknown(t *testing.T) {
	fail := errors.New("not used")
	m, err := launcher.NewSandboxManager(launcher.SandboxManagerConfig{
		Logger:      zap.NewNop(),
		Sessions:    api.NewClientFor(api.DaemonInfo{APIURL: "http://127.0.0.1:1", ProxyAddr: "127.0.0.1:1", AdminToken: "t"}),
		Daemon:      launcher.DaemonEndpoints{APIURL: "http://127.0.0.1:1", ProxyAddr: "127.0.0.1:1"},
		Inputs:      func() (launcher.SandboxInputs, error) { return launcher.SandboxInputs{}, fail },
		Runtime:     func(context.Context, runtime.Kind) (runtime.Runtime, error) { return nil, fail },
		GuardBinary: func() (string, error) { return "", fail },
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range map[string]*Daemon{"no manager": {}, "unknown id": {sandboxes: m}} {
		if err := (consoleSandboxes{d}).Remove(t.Context(), "sbx_nope"); !errors.Is(err, console.ErrSandboxNotFound) {
			t.Errorf("%s: Remove(%q) = %v, want console.ErrSandboxNotFound", name, "sbx_nope", err)
		}
	}
}
