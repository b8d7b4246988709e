package daemon

import (
	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/actions"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// reloadActions resolves the installed actions against the active
// connectors and swaps the runnable set in; the store watcher calls it
// (through reloadPolicy) when either store changes. A store it cannot read
// keeps the previous set.
func (d *Daemon) reloadActions(conns []policy.Connector) {
	entries, err := d.actionStore.List(conns)
	if err != nil {
		d.log.Error("action reload failed; keeping the last good actions", zap.Error(err))
		return
	}
	for _, e := range entries {
		if !e.IsActive() && e.Status != actions.StatusSuperseded {
			name := ""
			if e.Action != nil {
				name = e.Action.Name
			}
			d.log.Warn("skipping installed action", zap.String("action", name), zap.String("hash", e.Hash), zap.String("reason", e.Status))
		}
	}
	set := actions.Active(entries)
	prev := d.actions.Swap(&set)
	d.log.Info("actions loaded", zap.Int("actions", len(set)), zap.Bool("reload", prev != nil))
}

// activeActions returns the runnable actions by name (the API's view).
func (d *Daemon) activeActions() map[string]actions.Installed {
	if p := d.actions.Load(); p != nil {
		return *p
	}
	return nil
}
