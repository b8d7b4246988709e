// Package memstore is an in-memory state.Store for tests of the packages
// that write through to a store (the session registry, the approval broker,
// the daemon). Several values made by New share nothing; Shared gives
// replicas of one test the same data, with Watch delivering every change to
// every replica at once, as a shared database would. It never touches a
// disk and seals nothing: it is not a backend.
//
// It keeps the semantics the registry and the broker rely on (conditional
// end and decide, abandoning a replica's approvals, grants, changes to
// every watcher) but not the backends' record checks: it accepts records
// a backend refuses as invalid, and approvals of sessions it does not
// hold. The backends are held to those by state/statetest.
package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aileron-dev/aileron-proxy/state"
)

// Store is an in-memory state.Store. The zero value is not usable; use New.
type Store struct {
	d *data
}

var _ state.Store = (*Store)(nil)

// data is what replicas of one Store share.
type data struct {
	mu        sync.Mutex
	sessions  map[string]state.Session
	approvals map[string]state.Approval
	order     []string // approval IDs in insertion order
	grants    map[[4]string]state.Grant
	sandboxes map[string]state.Sandbox
	watchers  map[chan state.Change]struct{}
	closed    bool
	// Calls counts method calls by name, for tests that check the store
	// is not on a hot path.
	calls map[string]int
	// fail, when set, is returned by every write.
	fail error
}

// New returns an empty store.
func New() *Store {
	return &Store{d: &data{
		sessions:  map[string]state.Session{},
		approvals: map[string]state.Approval{},
		grants:    map[[4]string]state.Grant{},
		sandboxes: map[string]state.Sandbox{},
		watchers:  map[chan state.Change]struct{}{},
		calls:     map[string]int{},
	}}
}

// Shared returns another handle on s's data, as a second replica's
// connection to the same database.
func (s *Store) Shared() *Store { return &Store{d: s.d} }

// Calls returns how many times method was called on any handle.
func (s *Store) Calls(method string) int {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return s.d.calls[method]
}

// FailWrites makes every later write return err (nil restores them).
func (s *Store) FailWrites(err error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.d.fail = err
}

// lock takes the lock and counts the call.
func (s *Store) lock(method string) *data {
	s.d.mu.Lock()
	s.d.calls[method]++
	return s.d
}

// notifyLocked sends c to every watcher without blocking (a full watcher
// misses it, as a lagging LISTEN connection would until its poll).
func (d *data) notifyLocked(c state.Change) {
	for w := range d.watchers {
		select {
		case w <- c:
		default:
		}
	}
}

func cloneSession(x state.Session) state.Session {
	x.CACert = slices.Clone(x.CACert)
	x.CAKey = slices.Clone(x.CAKey)
	x.Connectors = slices.Clone(x.Connectors)
	x.Hosts = slices.Clone(x.Hosts)
	x.Learn = slices.Clone(x.Learn)
	if x.EndedAt != nil {
		t := *x.EndedAt
		x.EndedAt = &t
	}
	if x.ExitCode != nil {
		c := *x.ExitCode
		x.ExitCode = &c
	}
	return x
}

func cloneApproval(a state.Approval) state.Approval {
	a.View = slices.Clone(a.View)
	if a.DecidedAt != nil {
		t := *a.DecidedAt
		a.DecidedAt = &t
	}
	return a
}

// PutSession inserts a new session.
func (s *Store) PutSession(_ context.Context, x state.Session) error {
	d := s.lock("PutSession")
	defer d.mu.Unlock()
	if d.fail != nil {
		return d.fail
	}
	if _, ok := d.sessions[x.ID]; ok {
		return fmt.Errorf("memstore: session %s: %w", x.ID, state.ErrConflict)
	}
	for _, o := range d.sessions {
		if o.APIDigest == x.APIDigest {
			return fmt.Errorf("memstore: session %s: API digest: %w", x.ID, state.ErrConflict)
		}
	}
	d.sessions[x.ID] = cloneSession(x)
	d.notifyLocked(state.Change{Kind: state.ChangeSessionCreated, ID: x.ID})
	return nil
}

// EndSession marks a live session ended.
func (s *Store) EndSession(_ context.Context, id string, at time.Time, reason string, exitCode *int) error {
	d := s.lock("EndSession")
	defer d.mu.Unlock()
	if d.fail != nil {
		return d.fail
	}
	x, ok := d.sessions[id]
	if !ok {
		return fmt.Errorf("memstore: session %s: %w", id, state.ErrNotFound)
	}
	if x.EndedAt != nil {
		return fmt.Errorf("memstore: session %s: %w", id, state.ErrConflict)
	}
	x.EndedAt, x.EndReason, x.ExitCode = &at, reason, exitCode
	d.sessions[id] = cloneSession(x)
	d.notifyLocked(state.Change{Kind: state.ChangeSessionEnded, ID: id})
	return nil
}

// Session returns one session.
func (s *Store) Session(_ context.Context, id string) (state.Session, error) {
	d := s.lock("Session")
	defer d.mu.Unlock()
	x, ok := d.sessions[id]
	if !ok {
		return state.Session{}, fmt.Errorf("memstore: session %s: %w", id, state.ErrNotFound)
	}
	return cloneSession(x), nil
}

// SessionByAPIDigest returns the session whose API token has digest dg.
func (s *Store) SessionByAPIDigest(_ context.Context, dg [32]byte) (state.Session, error) {
	d := s.lock("SessionByAPIDigest")
	defer d.mu.Unlock()
	for _, x := range d.sessions {
		if x.APIDigest == dg {
			return cloneSession(x), nil
		}
	}
	return state.Session{}, fmt.Errorf("memstore: session by API digest: %w", state.ErrNotFound)
}

// Sessions returns the live sessions and those ended or expired after since.
func (s *Store) Sessions(_ context.Context, now, since time.Time) ([]state.Session, error) {
	d := s.lock("Sessions")
	defer d.mu.Unlock()
	var out []state.Session
	for _, x := range d.sessions {
		end := x.ExpiresAt
		if x.EndedAt != nil && x.EndedAt.Before(end) {
			end = *x.EndedAt
		}
		if (x.EndedAt == nil && x.ExpiresAt.After(now)) || end.After(since) {
			out = append(out, cloneSession(x))
		}
	}
	slices.SortFunc(out, func(a, b state.Session) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// PruneSessions deletes sessions that ended or expired before t.
func (s *Store) PruneSessions(_ context.Context, before time.Time) (int, error) {
	d := s.lock("PruneSessions")
	defer d.mu.Unlock()
	if d.fail != nil {
		return 0, d.fail
	}
	n := 0
	for id, x := range d.sessions {
		end := x.ExpiresAt
		if x.EndedAt != nil && x.EndedAt.Before(end) {
			end = *x.EndedAt
		}
		if end.Before(before) {
			delete(d.sessions, id)
			for aid, a := range d.approvals {
				if a.SessionID == id {
					delete(d.approvals, aid)
				}
			}
			for k := range d.grants {
				if k[0] == id {
					delete(d.grants, k)
				}
			}
			for k, sb := range d.sandboxes {
				if sb.SessionID == id {
					delete(d.sandboxes, k)
				}
			}
			n++
		}
	}
	return n, nil
}

// PutApproval inserts a pending approval.
func (s *Store) PutApproval(_ context.Context, a state.Approval) error {
	d := s.lock("PutApproval")
	defer d.mu.Unlock()
	if d.fail != nil {
		return d.fail
	}
	if _, ok := d.approvals[a.ID]; ok {
		return fmt.Errorf("memstore: approval %s: %w", a.ID, state.ErrConflict)
	}
	d.approvals[a.ID] = cloneApproval(a)
	d.order = append(d.order, a.ID)
	d.notifyLocked(state.Change{Kind: state.ChangeApprovalCreated, ID: a.ID})
	return nil
}

// DecideApproval settles a pending approval.
func (s *Store) DecideApproval(_ context.Context, id string, at time.Time, decision, outcome, reason, remember string) (state.Approval, error) {
	d := s.lock("DecideApproval")
	defer d.mu.Unlock()
	if d.fail != nil {
		return state.Approval{}, d.fail
	}
	a, ok := d.approvals[id]
	if !ok {
		return state.Approval{}, fmt.Errorf("memstore: approval %s: %w", id, state.ErrNotFound)
	}
	if a.DecidedAt != nil {
		return state.Approval{}, fmt.Errorf("memstore: approval %s: %w", id, state.ErrConflict)
	}
	a.DecidedAt, a.Decision, a.Outcome, a.Reason, a.Remember = &at, decision, outcome, reason, remember
	d.approvals[id] = cloneApproval(a)
	d.notifyLocked(state.Change{Kind: state.ChangeApprovalDecided, ID: id})
	return cloneApproval(a), nil
}

// Approval returns one approval.
func (s *Store) Approval(_ context.Context, id string) (state.Approval, error) {
	d := s.lock("Approval")
	defer d.mu.Unlock()
	a, ok := d.approvals[id]
	if !ok {
		return state.Approval{}, fmt.Errorf("memstore: approval %s: %w", id, state.ErrNotFound)
	}
	return cloneApproval(a), nil
}

// Approvals returns the pending approvals and the last decidedLimit decided.
func (s *Store) Approvals(_ context.Context, decidedLimit int) ([]state.Approval, error) {
	d := s.lock("Approvals")
	defer d.mu.Unlock()
	var pending, decided []state.Approval
	for _, id := range d.order {
		a, ok := d.approvals[id]
		switch {
		case !ok:
		case a.DecidedAt == nil:
			pending = append(pending, cloneApproval(a))
		default:
			decided = append(decided, cloneApproval(a))
		}
	}
	if over := len(decided) - max(decidedLimit, 0); over > 0 {
		decided = decided[over:]
	}
	out := append(decided, pending...)
	slices.SortStableFunc(out, func(a, b state.Approval) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// AbandonApprovals settles replica's pending approvals as abandoned.
func (s *Store) AbandonApprovals(_ context.Context, replica string, at time.Time) ([]state.Approval, error) {
	d := s.lock("AbandonApprovals")
	defer d.mu.Unlock()
	if d.fail != nil {
		return nil, d.fail
	}
	var out []state.Approval
	for _, id := range d.order {
		a, ok := d.approvals[id]
		if !ok || a.DecidedAt != nil || a.Replica != replica {
			continue
		}
		a.DecidedAt, a.Outcome = &at, "abandoned"
		d.approvals[id] = cloneApproval(a)
		out = append(out, cloneApproval(a))
		d.notifyLocked(state.Change{Kind: state.ChangeApprovalDecided, ID: id})
	}
	return out, nil
}

// AbandonStaleApprovals settles as abandoned the approvals pending since
// before on another replica than except, oldest first.
func (s *Store) AbandonStaleApprovals(_ context.Context, before, at time.Time, except string) ([]state.Approval, error) {
	d := s.lock("AbandonStaleApprovals")
	defer d.mu.Unlock()
	if d.fail != nil {
		return nil, d.fail
	}
	var out []state.Approval
	for _, id := range d.order {
		a, ok := d.approvals[id]
		if !ok || a.DecidedAt != nil || a.Replica == except || !a.CreatedAt.Before(before) {
			continue
		}
		a.DecidedAt, a.Outcome = &at, "abandoned"
		d.approvals[id] = cloneApproval(a)
		out = append(out, cloneApproval(a))
	}
	slices.SortFunc(out, func(x, y state.Approval) int {
		if c := x.CreatedAt.Compare(y.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(x.ID, y.ID)
	})
	for _, a := range out {
		d.notifyLocked(state.Change{Kind: state.ChangeApprovalDecided, ID: a.ID})
	}
	return out, nil
}

// PutGrant remembers a decision.
func (s *Store) PutGrant(_ context.Context, g state.Grant) error {
	d := s.lock("PutGrant")
	defer d.mu.Unlock()
	if d.fail != nil {
		return d.fail
	}
	d.grants[[4]string{g.SessionID, g.Connector, g.Tool, g.Operation}] = g
	d.notifyLocked(state.Change{Kind: state.ChangeGrantCreated, ID: g.SessionID})
	return nil
}

// Grants returns the remembered decisions of live sessions.
func (s *Store) Grants(_ context.Context) ([]state.Grant, error) {
	d := s.lock("Grants")
	defer d.mu.Unlock()
	var out []state.Grant
	for _, g := range d.grants {
		if x, ok := d.sessions[g.SessionID]; ok && x.EndedAt != nil {
			continue
		}
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b state.Grant) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// PutSandbox inserts or replaces a sandbox record.
func (s *Store) PutSandbox(_ context.Context, x state.Sandbox) error {
	d := s.lock("PutSandbox")
	defer d.mu.Unlock()
	if d.fail != nil {
		return d.fail
	}
	x.Spec = slices.Clone(x.Spec)
	d.sandboxes[x.ID] = x
	d.notifyLocked(state.Change{Kind: state.ChangeSandboxChanged, ID: x.ID})
	return nil
}

// MarkSandboxGone sets GoneAt.
func (s *Store) MarkSandboxGone(_ context.Context, id string, at time.Time) error {
	d := s.lock("MarkSandboxGone")
	defer d.mu.Unlock()
	x, ok := d.sandboxes[id]
	if !ok {
		return fmt.Errorf("memstore: sandbox %s: %w", id, state.ErrNotFound)
	}
	x.GoneAt = &at
	d.sandboxes[id] = x
	d.notifyLocked(state.Change{Kind: state.ChangeSandboxChanged, ID: id})
	return nil
}

// DeleteSandbox forgets a sandbox.
func (s *Store) DeleteSandbox(_ context.Context, id string) error {
	d := s.lock("DeleteSandbox")
	defer d.mu.Unlock()
	delete(d.sandboxes, id)
	d.notifyLocked(state.Change{Kind: state.ChangeSandboxChanged, ID: id})
	return nil
}

// Sandboxes returns every sandbox record.
func (s *Store) Sandboxes(_ context.Context) ([]state.Sandbox, error) {
	d := s.lock("Sandboxes")
	defer d.mu.Unlock()
	var out []state.Sandbox
	for _, x := range d.sandboxes {
		x.Spec = slices.Clone(x.Spec)
		out = append(out, x)
	}
	return out, nil
}

// Watch delivers every change made through any handle until ctx ends.
func (s *Store) Watch(ctx context.Context) (<-chan state.Change, error) {
	d := s.lock("Watch")
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("memstore: watching: store closed")
	}
	ch := make(chan state.Change, 256)
	d.watchers[ch] = struct{}{}
	go func() {
		<-ctx.Done()
		d.mu.Lock()
		delete(d.watchers, ch)
		close(ch)
		d.mu.Unlock()
	}()
	return ch, nil
}

// Close marks the store closed for later Watch calls.
func (s *Store) Close() error {
	d := s.lock("Close")
	defer d.mu.Unlock()
	d.closed = true
	return nil
}
