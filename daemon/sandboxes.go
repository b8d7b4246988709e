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
// listeners, connectors and actions from its stores, the sandboxes'
// records to store as replica (nil: none, and shutdown removes them).
func (d *Daemon) newSandboxManager(store launcher.SandboxStore, replica string) (*launcher.SandboxManager, error) {
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
		GuardBinary:       func() (string, error) { return guard.Helper(os.Getenv(guard.EnvBinary)) },
		Store:             store,
		Replica:           replica,
		ShutdownSandboxes: d.cfg.ShutdownSandboxes,
	})
}

// recoverSandboxes takes up the sandboxes an earlier run of this replica
// left running. It runs once the API serves (removing a lost sandbox ends
// its session through it) and before daemon.json announces the daemon;
// a failure to read the store is logged, and serve goes on without them.
func (d *Daemon) recoverSandboxes(ctx context.Context) {
	if d.sandboxes == nil {
		return
	}
	if err := d.sandboxes.Recover(ctx); err != nil {
		d.log.Error("recovering the long-lived sandboxes failed; they stay recorded for the next start", zap.Error(err))
	}
}

// closeSandboxes leaves the sandboxes running for the next start (or,
// with ShutdownSandboxes or without a state store, removes them), before
// the API stops (removed sandboxes' sessions end through it).
func (d *Daemon) closeSandboxes(ctx context.Context) {
	if d.sandboxes == nil {
		return
	}
	d.sandboxes.Close(ctx)
	d.log.Debug("sandboxes closed", zap.Int("running", len(d.sandboxes.ListSandboxes())))
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
