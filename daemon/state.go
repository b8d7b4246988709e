package daemon

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/learn"
	"github.com/aileron-dev/aileron-proxy/state"
)

// stateOpenTimeout bounds opening the state store (a migration included).
const stateOpenTimeout = time.Minute

// openState opens the state store cfg names: the embedded SQLite database
// under Home unless StateURL says otherwise.
func openState(cfg Config, log *zap.Logger) (state.Store, error) {
	if cfg.Store != nil {
		return borrowed{cfg.Store}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), stateOpenTimeout)
	defer cancel()
	st, err := state.Open(ctx, state.Config{
		Home:    cfg.Home,
		URL:     cfg.StateURL,
		KeyFile: cfg.StateKeyFile,
		Replica: cfg.Replica,
		Logger:  log.Named("state"),
	})
	if err != nil {
		return nil, fmt.Errorf("opening the state store: %w", err)
	}
	return st, nil
}

// restoreState loads what the store kept from before this start: the
// sessions (with their CAs), remembered decisions and other replicas'
// pending approvals; approvals this replica held when it stopped are
// recorded as abandoned.
func (d *Daemon) restoreState() error {
	ctx, cancel := context.WithTimeout(context.Background(), stateOpenTimeout)
	defer cancel()
	sessions, err := d.sessions.Restore(ctx)
	if err != nil {
		return err
	}
	// A learn session's record is a file of this home: take it up again.
	for _, s := range d.sessions.List() {
		if !s.IsLearning() {
			continue
		}
		if err := d.learn.Resume(learn.Header{SessionID: s.ID, Hosts: s.Learn, CreatedAt: s.CreatedAt.UTC(), Agent: s.Agent, Project: s.Project}); err != nil {
			d.log.Warn("reopening a learn session's record failed; its learned requests go unrecorded", zap.String("session_id", s.ID), zap.Error(err))
		}
	}
	abandoned, err := d.broker.Restore(ctx)
	if err != nil {
		return err
	}
	d.log.Info("state restored", zap.String("replica", d.cfg.Replica), zap.Int("sessions", sessions), zap.Int("abandoned_approvals", abandoned))
	return nil
}

// borrowed is Config.Store: the daemon uses it but leaves closing it to
// its owner.
type borrowed struct{ state.Store }

func (borrowed) Close() error { return nil }
