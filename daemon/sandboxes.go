package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/api"
	"github.com/aileron-dev/aileron-proxy/console"
	"github.com/aileron-dev/aileron-proxy/launcher"
	"github.com/aileron-dev/aileron-proxy/launcher/guard"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
)

// newSandboxManager wires the launcher's sandbox manager to this daemon:
// sessions through its own API (admin token), the relays to its own
// listeners, connectors and actions from its stores.
func (d *Daemon) newSandboxManager() (*launcher.SandboxManager, error) {
	self := api.NewClientFor(api.DaemonInfo{APIURL: d.APIURL(), ProxyAddr: d.ProxyAddr(), AdminToken: d.adminToken, PID: os.Getpid()})
	log := d.log
	return launcher.NewSandboxManager(launcher.SandboxManagerConfig{
		Logger:   log,
		Sessions: self,
		Daemon:   launcher.DaemonEndpoints{ProxyAddr: d.ProxyAddr(), APIURL: d.APIURL()},
		Inputs: func() (launcher.SandboxInputs, error) {
			loaded, err := d.store.Load()
			if err != nil {
				return launcher.SandboxInputs{}, fmt.Errorf("loading the installed connectors: %w", err)
			}
			acts, err := d.actionStore.List(loaded.Active)
			if err != nil {
				return launcher.SandboxInputs{}, fmt.Errorf("loading the installed actions: %w", err)
			}
			return launcher.SandboxInputs{Connectors: loaded.Active, StoreDir: d.store.Dir(), Actions: acts}, nil
		},
		Runtime: func(ctx context.Context, kind runtime.Kind) (runtime.Runtime, error) {
			return runtime.New(ctx, runtime.Config{Kind: kind, Logger: log})
		},
		GuardBinary: func() (string, error) { return guard.Helper(os.Getenv(guard.EnvBinary)) },
	})
}

// closeSandboxes removes every sandbox, before the API stops (their
// sessions end through it).
func (d *Daemon) closeSandboxes(ctx context.Context) {
	if d.sandboxes == nil {
		return
	}
	d.sandboxes.Close(ctx)
	d.log.Debug("sandboxes removed", zap.Int("left", len(d.sandboxes.ListSandboxes())))
}

// consoleSandboxes shows the daemon's long-lived sandboxes in the web
// console. It reads d.sandboxes at each call: the manager is made after
// the console.
type consoleSandboxes struct{ d *Daemon }

var _ console.Sandboxes = consoleSandboxes{}

func (c consoleSandboxes) List() []console.Sandbox {
	if c.d.sandboxes == nil {
		return nil
	}
	var out []console.Sandbox
	for _, i := range c.d.sandboxes.ListSandboxes() {
		out = append(out, console.Sandbox{ID: i.ID, SessionID: i.SessionID, Runtime: i.Runtime, Image: i.Image, User: i.User})
	}
	return out
}

func (c consoleSandboxes) Remove(ctx context.Context, id string) error {
	if c.d.sandboxes == nil {
		return console.ErrSandboxNotFound
	}
	err := c.d.sandboxes.RemoveSandbox(ctx, id)
	if errors.Is(err, api.ErrSandboxNotFound) {
		return console.ErrSandboxNotFound
	}
	return err
}
