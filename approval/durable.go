package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/state"
)

const (
	// storeTimeout bounds one store call.
	storeTimeout = 10 * time.Second
	// watchRetry is the pause before watching the store again after its
	// change stream ended.
	watchRetry = time.Second
	// staleGrace is how much longer than the broker's Timeout an approval
	// may stay pending in the store before any replica settles it as
	// abandoned. Its holder answers the request itself after Timeout, so
	// an approval still pending later than that was held by a replica
	// that died and did not come back under its name (a scaled-down
	// replica, a replaced pod, a renamed host). The grace covers the
	// holder's own write of the timeout, a store slow to answer and
	// clocks of replicas that differ by a few seconds.
	staleGrace = 30 * time.Second
	// minStaleSweep and maxStaleSweep bound how often a replica looks for
	// stale approvals (a quarter of the Timeout otherwise): often enough
	// that a dead replica's approvals leave every list soon after they
	// became stale, rarely enough to cost the store nothing.
	minStaleSweep = time.Second
	maxStaleSweep = time.Minute
)

// staleSweepEvery is how often a broker with timeout looks for stale
// approvals.
func staleSweepEvery(timeout time.Duration) time.Duration {
	return min(max(timeout/4, minStaleSweep), maxStaleSweep)
}

func storeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), storeTimeout)
}

// storePut records a pending approval. The request waits here whatever the
// store says; a failed write only hides it from other replicas.
func (b *Broker) storePut(view Pending) {
	if b.store == nil {
		return
	}
	raw, err := json.Marshal(view)
	if err == nil {
		ctx, cancel := storeCtx()
		err = b.store.PutApproval(ctx, state.Approval{ID: view.ID, SessionID: view.SessionID, Replica: b.replica, View: raw, CreatedAt: view.RequestedAt})
		cancel()
	}
	if err != nil {
		b.log.Warn("recording a pending approval in the state store failed; other replicas do not see it",
			zap.String("approval_id", view.ID), zap.Error(err))
	}
}

// storeDecide records a person's decision of an approval held here before
// the request is released. It returns ErrAlreadyDecided when another
// replica decided it first; a store that cannot answer does not stop the
// decision from answering the request held here.
func (b *Broker) storeDecide(id string, d Decision, out Outcome, reason string, remember Remember) error {
	if b.store == nil {
		return nil
	}
	ctx, cancel := storeCtx()
	defer cancel()
	_, err := b.store.DecideApproval(ctx, id, b.now(), d.String(), out.String(), reason, remember.String())
	switch {
	case err == nil:
		return nil
	case errors.Is(err, state.ErrConflict):
		return ErrAlreadyDecided
	}
	b.log.Warn("recording an approval's decision in the state store failed; deciding it here", zap.String("approval_id", id), zap.Error(err))
	return nil
}

// storeSettle records the outcome of a waiter that ended here without a
// person's decision of its own (timeout, canceled, or a remembered
// decision d made for another approval).
func (b *Broker) storeSettle(w *waiter, d Decision, out Outcome, reason, remember string) {
	if b.store == nil {
		return
	}
	ctx, cancel := storeCtx()
	defer cancel()
	_, err := b.store.DecideApproval(ctx, w.view.ID, b.now(), d.String(), out.String(), reason, remember)
	if err != nil && !errors.Is(err, state.ErrConflict) && !errors.Is(err, state.ErrNotFound) {
		b.log.Warn("recording an approval's outcome in the state store failed", zap.String("approval_id", w.view.ID), zap.Error(err))
	}
}

// storeGrant records a decision remembered for the rest of a session.
func (b *Broker) storeGrant(k grantKey, d Decision) {
	if b.store == nil {
		return
	}
	ctx, cancel := storeCtx()
	defer cancel()
	err := b.store.PutGrant(ctx, state.Grant{SessionID: k.session, Connector: k.connector, Tool: k.tool, Operation: k.operation, Decision: d.String(), CreatedAt: b.now()})
	if err != nil {
		b.log.Warn("recording a remembered decision in the state store failed; other replicas and a restart ask again",
			zap.String("session_id", k.session), zap.Error(err))
	}
}

// decideElsewhere decides, in the store, an approval not held here. The
// replica holding it releases the request when Follow reports the decision.
func (b *Broker) decideElsewhere(id string, d Decision, remember Remember, out Outcome, reason string) error {
	ctx, cancel := storeCtx()
	defer cancel()
	rec, err := b.store.DecideApproval(ctx, id, b.now(), d.String(), out.String(), reason, remember.String())
	switch {
	case errors.Is(err, state.ErrNotFound):
		return ErrUnknownApproval
	case errors.Is(err, state.ErrConflict):
		return ErrAlreadyDecided
	case err != nil:
		return fmt.Errorf("recording the decision in the state store: %w", err)
	}
	view, err := viewOf(rec)
	if err != nil {
		b.log.Warn("a decided approval's stored view is unreadable", zap.String("approval_id", id), zap.Error(err))
		return nil
	}
	b.mu.Lock()
	delete(b.remote, id)
	if !b.inHistoryLocked(id) {
		b.appendHistoryLocked(view)
	}
	if remember == RememberSession {
		b.remembered[keyOfView(view)] = d
	}
	b.mu.Unlock()
	if remember == RememberSession {
		b.storeGrant(keyOfView(view), d)
	}
	return nil
}

func keyOfView(p Pending) grantKey {
	return grantKey{p.SessionID, p.ConnectorFQN, p.Tool, p.Operation}
}

// viewOf reads an approval record's view, decided when the record is.
func viewOf(a state.Approval) (Pending, error) {
	var p Pending
	if err := json.Unmarshal(a.View, &p); err != nil {
		return Pending{}, fmt.Errorf("reading the stored view of approval %s: %w", a.ID, err)
	}
	p.ID, p.SessionID = a.ID, a.SessionID
	if a.DecidedAt != nil {
		t := *a.DecidedAt
		reason := a.Reason
		if reason == "" {
			reason = a.Outcome // abandoned: the store records no reason
		}
		p.State, p.Decision, p.Reason, p.DecidedAt, p.Preview = StateDecided, a.Outcome, reason, &t, nil
	} else {
		p.State = StatePending
	}
	return p, nil
}

func (b *Broker) inHistoryLocked(id string) bool {
	for _, p := range b.decided {
		if p.ID == id {
			return true
		}
	}
	return false
}

// Restore settles this replica's approvals that were pending when it last
// stopped as abandoned (audited as approval.decided with reason
// "abandoned"), settles likewise the approvals any replica left pending
// for longer than the Timeout plus staleGrace (see sweepStale), and loads
// the remembered decisions, the approvals pending on other replicas and
// the recent decided ones. It returns how many it abandoned. Without a
// Store it does nothing.
func (b *Broker) Restore(ctx context.Context) (int, error) {
	if b.store == nil {
		return 0, nil
	}
	abandoned, err := b.store.AbandonApprovals(ctx, b.replica, b.now())
	if err != nil {
		return 0, fmt.Errorf("abandoning the approvals replica %q held when it stopped: %w", b.replica, err)
	}
	for _, a := range abandoned {
		b.auditAbandoned(a)
	}
	stale := b.sweepStale()
	all, err := b.store.Approvals(ctx, b.history)
	if err != nil {
		return 0, fmt.Errorf("loading approvals: %w", err)
	}
	grants, err := b.store.Grants(ctx)
	if err != nil {
		return 0, fmt.Errorf("loading remembered decisions: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, a := range all {
		view, err := viewOf(a)
		switch {
		case err != nil:
			b.log.Warn("skipping a stored approval", zap.Error(err))
		case a.DecidedAt != nil:
			if !b.inHistoryLocked(a.ID) {
				b.appendHistoryLocked(view)
			}
		case a.Replica != b.replica:
			b.remote[a.ID] = view
		}
	}
	for _, g := range grants {
		b.remembered[grantKey{g.SessionID, g.Connector, g.Tool, g.Operation}] = Decision(g.Decision)
	}
	return len(abandoned) + stale, nil
}

// auditAbandoned records approval.decided with reason "abandoned" for an
// approval the store settled as abandoned through this replica.
func (b *Broker) auditAbandoned(a state.Approval) {
	var p Pending
	if err := json.Unmarshal(a.View, &p); err != nil {
		b.log.Warn("an abandoned approval's stored view is unreadable", zap.String("approval_id", a.ID), zap.Error(err))
		p = Pending{SessionID: a.SessionID, RequestedAt: a.CreatedAt}
	}
	p.ID = a.ID
	e := eventFor(audit.EventApprovalDecided, p, p.Preview.FieldNames())
	e.Decision = OutcomeDenied.String()
	e.Reason = ReasonAbandoned
	e.DurationMS = b.now().Sub(p.RequestedAt).Milliseconds()
	b.record(e)
}

// sweepStale settles as abandoned, in the store, every approval pending
// for longer than the Timeout plus staleGrace on another replica (this
// replica's own waiters settle themselves), audits those this replica
// settled (a replica sweeping at the same time gets the others) and moves
// them to the history. It returns how many it settled.
func (b *Broker) sweepStale() int {
	now := b.now()
	ctx, cancel := storeCtx()
	stale, err := b.store.AbandonStaleApprovals(ctx, now.Add(-(b.timeout + staleGrace)), now, b.replica)
	cancel()
	if err != nil {
		b.log.Warn("settling approvals pending on a replica that is gone failed; retrying later", zap.Error(err))
		return 0
	}
	if len(stale) == 0 {
		return 0
	}
	for _, a := range stale {
		b.auditAbandoned(a)
	}
	b.mu.Lock()
	for _, a := range stale {
		delete(b.remote, a.ID)
		view, err := viewOf(a)
		if err == nil && !b.inHistoryLocked(a.ID) {
			b.appendHistoryLocked(view)
		}
	}
	b.mu.Unlock()
	b.log.Info("settled approvals left pending by a replica that is gone as abandoned", zap.Int("approvals", len(stale)))
	return len(stale)
}

// sweepStaleEvery runs sweepStale every interval until ctx ends.
func (b *Broker) sweepStaleEvery(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			b.sweepStale()
		}
	}
}

// Follow applies the changes other replicas make to the Store until ctx
// ends: their pending approvals appear in List, a decision of a request
// held here releases it, and their remembered decisions apply here. Every
// quarter of the Timeout (at least a second, at most a minute) it also
// settles as abandoned the approvals left pending by replicas that are
// gone (see staleGrace). Without a Store it returns at once.
func (b *Broker) Follow(ctx context.Context) {
	if b.store == nil {
		return
	}
	var sweeping sync.WaitGroup
	sweeping.Add(1)
	go func() {
		defer sweeping.Done()
		b.sweepStaleEvery(ctx, staleSweepEvery(b.timeout))
	}()
	defer sweeping.Wait()
	for ctx.Err() == nil {
		changes, err := b.store.Watch(ctx)
		if err != nil {
			b.log.Warn("watching the state store for approvals failed; retrying", zap.Error(err))
		} else {
			// What changed before this subscription (since Restore, or
			// while a dropped stream was re-opened) is read once.
			b.resync()
			for c := range changes {
				b.apply(c)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(watchRetry):
		}
	}
}

func (b *Broker) apply(c state.Change) {
	switch c.Kind {
	case state.ChangeApprovalCreated:
		b.mu.Lock()
		_, local := b.pending[c.ID]
		_, known := b.remote[c.ID]
		done := b.inHistoryLocked(c.ID)
		b.mu.Unlock()
		if local || known || done {
			return
		}
		a, ok := b.fetch(c.ID)
		if !ok || a.Replica == b.replica || a.DecidedAt != nil {
			return
		}
		view, err := viewOf(a)
		if err != nil {
			b.log.Warn("skipping a stored approval", zap.Error(err))
			return
		}
		b.mu.Lock()
		if !b.inHistoryLocked(c.ID) {
			b.remote[c.ID] = view
		}
		b.mu.Unlock()
	case state.ChangeApprovalDecided:
		b.decidedElsewhere(c.ID)
	case state.ChangeGrantCreated:
		b.grantsOf(c.ID)
	case state.ChangeResync:
		b.resync()
	}
}

// resync re-reads the store after the change stream lost changes: other
// replicas' pending approvals, decisions of requests held here, grants.
func (b *Broker) resync() {
	ctx, cancel := storeCtx()
	all, err := b.store.Approvals(ctx, b.history)
	cancel()
	if err != nil {
		b.log.Warn("re-reading approvals from the state store failed", zap.Error(err))
		return
	}
	remote := map[string]Pending{}
	var decidedHere []string
	b.mu.Lock()
	for _, a := range all {
		view, err := viewOf(a)
		switch {
		case err != nil:
		case a.DecidedAt != nil:
			if _, local := b.pending[a.ID]; local {
				decidedHere = append(decidedHere, a.ID)
			} else if !b.inHistoryLocked(a.ID) {
				b.appendHistoryLocked(view)
			}
		case a.Replica != b.replica:
			remote[a.ID] = view
		}
	}
	b.remote = remote
	sessions := map[string]bool{}
	for _, w := range b.pending {
		sessions[w.key.session] = true
	}
	b.mu.Unlock()
	for _, id := range decidedHere {
		b.decidedElsewhere(id)
	}
	for s := range sessions {
		b.grantsOf(s)
	}
}

func (b *Broker) fetch(id string) (state.Approval, bool) {
	ctx, cancel := storeCtx()
	defer cancel()
	a, err := b.store.Approval(ctx, id)
	if err != nil {
		if !errors.Is(err, state.ErrNotFound) {
			b.log.Warn("reading an approval from the state store failed", zap.String("approval_id", id), zap.Error(err))
		}
		return state.Approval{}, false
	}
	return a, true
}

// decidedElsewhere applies the decision of approval id made through the
// store: a request held here is released with it; another replica's
// approval moves to the history.
func (b *Broker) decidedElsewhere(id string) {
	b.mu.Lock()
	w, local := b.pending[id]
	done := b.inHistoryLocked(id)
	deciding := local && w.deciding
	b.mu.Unlock()
	if (!local && done) || deciding {
		return // decided here, or being decided here (Decide releases it)
	}
	a, ok := b.fetch(id)
	if !ok || a.DecidedAt == nil {
		return
	}
	if !local {
		view, err := viewOf(a)
		if err != nil {
			b.log.Warn("skipping a stored approval", zap.Error(err))
			return
		}
		b.mu.Lock()
		delete(b.remote, id)
		if !b.inHistoryLocked(id) {
			b.appendHistoryLocked(view)
		}
		b.mu.Unlock()
		return
	}
	out := OutcomeDenied
	switch Outcome(a.Outcome) {
	case OutcomeApproved:
		out = OutcomeApproved
	case OutcomeAbandoned:
		// Another replica took this request for one of a replica that
		// is gone (a Timeout longer here than there, or clocks far
		// apart): it is refused as abandoned.
		out = OutcomeAbandoned
	}
	reason := a.Reason
	if reason == "" {
		reason = out.String()
	}
	d := Decision(a.Decision)
	b.mu.Lock()
	if w.deciding || !b.finishLocked(w, out, reason) {
		b.mu.Unlock()
		return
	}
	var others []*waiter
	if Remember(a.Remember) == RememberSession && (d == DecisionApprove || d == DecisionDeny) {
		b.remembered[w.key] = d
		others = b.finishKeyLocked(w.key, out, reason)
	}
	b.mu.Unlock()
	b.release([]*waiter{w}, "", out, reason)
	b.release(others, d, out, reason)
}

// grantsOf applies the remembered decisions of session id: they answer
// this replica's requests of that session and operation held now and later.
func (b *Broker) grantsOf(session string) {
	ctx, cancel := storeCtx()
	grants, err := b.store.Grants(ctx)
	cancel()
	if err != nil {
		b.log.Warn("reading remembered decisions from the state store failed", zap.String("session_id", session), zap.Error(err))
		return
	}
	for _, g := range grants {
		if g.SessionID != session {
			continue
		}
		d := Decision(g.Decision)
		if _, err := ParseDecision(g.Decision); err != nil {
			continue
		}
		k := grantKey{g.SessionID, g.Connector, g.Tool, g.Operation}
		out := outcomeOf(d)
		reason := ReasonDenied
		if out.IsApproved() {
			reason = ReasonApproved
		}
		b.mu.Lock()
		b.remembered[k] = d
		finished := b.finishKeyLocked(k, out, reason)
		b.mu.Unlock()
		b.release(finished, d, out, reason)
	}
}

// Abandon answers every request held here with OutcomeAbandoned (the
// request is refused), records each as abandoned, in the store too, and
// audits it with reason "abandoned": serve calls it when it stops, so
// held requests do not wait out the drain for a decision nobody can
// deliver to them. It returns how many it abandoned.
func (b *Broker) Abandon() int {
	b.mu.Lock()
	var finished []*waiter
	for _, w := range b.pending {
		if !w.deciding && b.finishLocked(w, OutcomeAbandoned, ReasonAbandoned) {
			finished = append(finished, w)
		}
	}
	b.mu.Unlock()
	for _, w := range finished {
		b.storeSettle(w, "", OutcomeAbandoned, ReasonAbandoned, "")
	}
	b.release(finished, "", OutcomeAbandoned, ReasonAbandoned)
	return len(finished)
}
