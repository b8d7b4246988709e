package approval

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/preview"
	"github.com/aileron-dev/aileron-proxy/state"
)

// DefaultHistory is how many decided approvals List keeps when
// BrokerConfig.History is zero.
const DefaultHistory = 256

// Audit reasons of approval.decided events.
const (
	ReasonApproved   = "approved"
	ReasonDenied     = "denied"
	ReasonTimeout    = "timeout"
	ReasonCanceled   = "canceled"
	ReasonRemembered = "remembered"
	// ReasonAbandoned: the request was pending when its replica stopped;
	// its connection died with the process.
	ReasonAbandoned = "abandoned"
)

// Keys of approval audit events' Fields: the approval ID, the digest and
// size of the body forwarded once approved, and the names (never the
// values) of the fields its preview showed, comma separated.
const (
	FieldApprovalID    = "approval_id"
	FieldBodySHA256    = "body_sha256"
	FieldBodySize      = "body_size"
	FieldPreviewFields = "preview_fields"
)

// BrokerConfig configures a Broker.
type BrokerConfig struct {
	// Timeout is how long Await waits for a decision; zero means
	// DefaultTimeout.
	Timeout time.Duration
	// Audit receives approval.requested and approval.decided events; nil
	// records nothing.
	Audit audit.Recorder
	// Now returns the current time for timestamps; nil means time.Now.
	Now func() time.Time
	// OnRequested, when set, is called (without the broker's lock held) each
	// time a request starts waiting, so a surface can announce it.
	OnRequested func(Pending)
	// History is how many decided approvals List remembers; zero means
	// DefaultHistory.
	History int
	// Store, when set, is where approvals outlive the process and are
	// shared by replicas: Await records each held request, its decision
	// and remembered decisions; Restore loads them at start; Decide of an
	// approval held on another replica decides it in the store, and
	// Follow releases this replica's waiters decided elsewhere. Nil keeps
	// approvals in memory only.
	Store state.Store
	// Replica names this process among those sharing Store (the holder
	// of its waiting requests); empty means "default".
	Replica string
	// Logger receives what the store path notices; nil logs nothing.
	Logger *zap.Logger
}

// grantKey identifies what a remembered decision covers.
type grantKey struct {
	session, connector, tool, operation string
}

func keyOf(r Request) grantKey {
	return grantKey{r.SessionID, r.ConnectorFQN, r.Tool, r.Operation}
}

// waiter is one held request.
type waiter struct {
	key  grantKey
	view Pending
	// previewFields are the names of the previewed fields, for the audit
	// events (the preview itself leaves view once decided).
	previewFields []string
	done          chan struct{}
	// outcome is set once, under Broker.mu, before done is closed.
	outcome Outcome
	// deciding is set, under Broker.mu, while Decide records a person's
	// decision of this waiter in the store: the store's report of that
	// same decision (Follow) leaves the waiter to Decide.
	deciding bool
}

// Broker holds requests awaiting approval. It is safe for concurrent use.
type Broker struct {
	timeout     time.Duration
	audit       audit.Recorder
	now         func() time.Time
	onRequested func(Pending)
	history     int

	mu         sync.Mutex
	pending    map[string]*waiter
	decided    []Pending // oldest first, at most history
	remembered map[grantKey]Decision
	// remote are the approvals pending on other replicas (Store only).
	remote map[string]Pending

	store   state.Store
	replica string
	log     *zap.Logger
}

// NewBroker returns a broker with no pending approvals.
func NewBroker(cfg BrokerConfig) *Broker {
	b := &Broker{
		timeout:     cfg.Timeout,
		audit:       cfg.Audit,
		now:         cfg.Now,
		onRequested: cfg.OnRequested,
		history:     cfg.History,
		pending:     map[string]*waiter{},
		remembered:  map[grantKey]Decision{},
		remote:      map[string]Pending{},
		store:       cfg.Store,
		replica:     cfg.Replica,
		log:         cfg.Logger,
	}
	if b.replica == "" {
		b.replica = "default"
	}
	if b.log == nil {
		b.log = zap.NewNop()
	}
	if b.timeout <= 0 {
		b.timeout = DefaultTimeout
	}
	if b.now == nil {
		b.now = time.Now
	}
	if b.history <= 0 {
		b.history = DefaultHistory
	}
	return b
}

// Timeout returns how long Await waits for a decision.
func (b *Broker) Timeout() time.Duration { return b.timeout }

func (b *Broker) record(e audit.Event) {
	if b.audit != nil {
		b.audit.Record(e)
	}
}

func eventFor(name string, r Pending, previewFields []string) audit.Event {
	fields := maps.Clone(r.Fields)
	if fields == nil {
		fields = map[string]string{}
	}
	fields[FieldApprovalID] = r.ID
	if r.BodySHA256 != "" {
		fields[FieldBodySHA256] = r.BodySHA256
		fields[FieldBodySize] = strconv.FormatInt(r.BodySize, 10)
	}
	if len(previewFields) > 0 {
		fields[FieldPreviewFields] = strings.Join(previewFields, ",")
	}
	return audit.Event{
		Event:        name,
		SessionID:    r.SessionID,
		ConnectorFQN: r.ConnectorFQN,
		Tool:         r.Tool,
		Operation:    r.Operation,
		Method:       r.Method,
		Host:         r.Host,
		Path:         r.Path,
		Fields:       fields,
	}
}

// outcomeOf maps a person's decision to an Await outcome.
func outcomeOf(d Decision) Outcome {
	if d == DecisionApprove {
		return OutcomeApproved
	}
	return OutcomeDenied
}

// Remembers reports whether a decision remembered for r's session and
// operation would answer r at once, so the caller can skip work (a preview
// fetch) only a person would look at.
func (b *Broker) Remembers(r Request) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.remembered[keyOf(r)]
	return ok
}

// Await holds r until a person decides it, the broker's timeout passes or
// ctx ends, and returns the outcome. Only OutcomeApproved lets the request
// proceed. A decision remembered for r's session and operation answers at
// once.
func (b *Broker) Await(ctx context.Context, r Request) Outcome {
	now := b.now()
	view := Pending{
		ID:           newID(),
		SessionID:    r.SessionID,
		ConnectorFQN: r.ConnectorFQN,
		Tool:         r.Tool,
		Operation:    r.Operation,
		Method:       r.Method,
		Host:         r.Host,
		Path:         r.Path,
		Fields:       maps.Clone(r.Fields),
		Preview:      r.Preview.Clone(),
		RequestedAt:  now,
		State:        StatePending,
	}
	if r.Preview != nil && r.Preview.Body != nil && r.Preview.Body.Kind != preview.KindNone {
		view.BodySHA256, view.BodySize = r.Preview.Body.SHA256, r.Preview.Body.Size
	}
	w := &waiter{key: keyOf(r), view: view, done: make(chan struct{}), previewFields: r.Preview.FieldNames()}

	b.mu.Lock()
	if d, ok := b.remembered[w.key]; ok {
		out := outcomeOf(d)
		b.settleLocked(w, out, ReasonRemembered)
		b.mu.Unlock()
		b.audited(w, out, ReasonRemembered)
		return out
	}
	b.pending[view.ID] = w
	b.mu.Unlock()

	b.storePut(view)
	b.record(eventFor(audit.EventApprovalRequested, view, w.previewFields))
	if b.onRequested != nil {
		b.onRequested(view.clone())
	}

	timer := time.NewTimer(b.timeout)
	defer timer.Stop()
	select {
	case <-w.done:
	case <-timer.C:
		b.finish(w, OutcomeTimeout, ReasonTimeout)
	case <-ctx.Done():
		b.finish(w, OutcomeCanceled, ReasonCanceled)
	}
	// Whoever finished first set the outcome before closing done, so
	// receiving from done orders this read after that write.
	<-w.done
	return w.outcome
}

// finish decides w if it is still pending.
func (b *Broker) finish(w *waiter, out Outcome, reason string) {
	b.mu.Lock()
	ok := b.finishLocked(w, out, reason)
	b.mu.Unlock()
	if ok {
		b.storeSettle(w, "", out, reason, "")
		b.audited(w, out, reason)
		close(w.done)
	}
}

// finishLocked marks w decided if it is still pending and reports whether it
// did; the caller then audits and closes w.done outside the lock.
func (b *Broker) finishLocked(w *waiter, out Outcome, reason string) bool {
	if _, ok := b.pending[w.view.ID]; !ok {
		return false
	}
	delete(b.pending, w.view.ID)
	b.settleLocked(w, out, reason)
	return true
}

// settleLocked sets w's outcome, marks its view decided, drops its preview
// (a decided approval keeps only the digest) and adds it to the history.
func (b *Broker) settleLocked(w *waiter, out Outcome, reason string) {
	now := b.now()
	w.outcome = out
	w.view.State = StateDecided
	w.view.Decision = out.String()
	w.view.Reason = reason
	w.view.DecidedAt = &now
	w.view.Preview = nil
	b.appendHistoryLocked(w.view)
}

// audited records the approval.decided event of a finished waiter. The
// event's Decision is approved or denied; Reason says why.
func (b *Broker) audited(w *waiter, out Outcome, reason string) {
	view := w.view
	e := eventFor(audit.EventApprovalDecided, view, w.previewFields)
	e.Decision = OutcomeDenied.String()
	if out.IsApproved() {
		e.Decision = OutcomeApproved.String()
	}
	e.Reason = reason
	e.DurationMS = b.now().Sub(view.RequestedAt).Milliseconds()
	b.record(e)
}

func (b *Broker) appendHistoryLocked(p Pending) {
	b.decided = append(b.decided, p)
	if over := len(b.decided) - b.history; over > 0 {
		b.decided = slices.Delete(b.decided, 0, over)
	}
}

// Decide answers pending approval id. With RememberSession the decision also
// answers later (and currently pending) requests for the same session,
// connector, tool and operation.
func (b *Broker) Decide(id string, d Decision, remember Remember) error {
	if _, err := ParseDecision(string(d)); err != nil {
		return fmt.Errorf("deciding approval %q: %w", id, err)
	}
	if _, err := ParseRemember(string(remember)); err != nil {
		return fmt.Errorf("deciding approval %q: %w", id, err)
	}
	out := outcomeOf(d)
	reason := ReasonDenied
	if out.IsApproved() {
		reason = ReasonApproved
	}

	b.mu.Lock()
	w, ok := b.pending[id]
	if !ok {
		err := ErrUnknownApproval
		for _, p := range b.decided {
			if p.ID == id {
				err = ErrAlreadyDecided
				break
			}
		}
		b.mu.Unlock()
		if errors.Is(err, ErrUnknownApproval) && b.store != nil {
			// Held on another replica (or decided there): the store
			// settles it, and the holder's Follow releases the request.
			err = b.decideElsewhere(id, d, remember, out, reason)
		}
		if err != nil {
			return fmt.Errorf("deciding approval %q: %w", id, err)
		}
		return nil
	}
	if w.deciding {
		b.mu.Unlock()
		return fmt.Errorf("deciding approval %q: %w", id, ErrAlreadyDecided)
	}
	w.deciding = true
	b.mu.Unlock()
	// The store is the referee between replicas deciding the same
	// approval: only the one whose write wins releases the request.
	if err := b.storeDecide(id, d, out, reason, remember); err != nil {
		b.mu.Lock()
		w.deciding = false
		b.mu.Unlock()
		// Another replica's decision won: apply it here.
		b.decidedElsewhere(id)
		return fmt.Errorf("deciding approval %q: %w", id, err)
	}
	b.mu.Lock()
	w.deciding = false
	if !b.finishLocked(w, out, reason) {
		b.mu.Unlock()
		return fmt.Errorf("deciding approval %q: %w", id, ErrAlreadyDecided)
	}
	finished := []*waiter{w}
	if remember == RememberSession {
		b.remembered[w.key] = d
		finished = append(finished, b.finishKeyLocked(w.key, out, reason)...)
	}
	b.mu.Unlock()
	b.release(finished[:1], "", out, reason)
	b.release(finished[1:], d, out, reason)
	if remember == RememberSession {
		b.storeGrant(w.key, d)
	}
	return nil
}

// finishKeyLocked finishes every pending waiter for key with out and
// returns them.
func (b *Broker) finishKeyLocked(key grantKey, out Outcome, reason string) []*waiter {
	var finished []*waiter
	for _, other := range b.pending { // finishLocked deletes from b.pending, which range allows
		if other.key == key && !other.deciding && b.finishLocked(other, out, reason) {
			finished = append(finished, other)
		}
	}
	return finished
}

// release audits finished waiters and wakes them. approval.decided is
// recorded before the waiter wakes, so it always precedes the proxy's
// event for the same request. With a decision d, each is also settled in
// the store (they were answered by a remembered decision made for another
// approval).
func (b *Broker) release(finished []*waiter, d Decision, out Outcome, reason string) {
	for _, f := range finished {
		if d != "" {
			b.storeSettle(f, d, out, reason, "")
		}
		b.audited(f, out, reason)
		close(f.done)
	}
}

// List returns approvals in state "pending", "decided" or "all", oldest
// first. An unknown state returns nil.
func (b *Broker) List(state string) []Pending {
	if !IsValidState(state) {
		return nil
	}
	b.mu.Lock()
	var out []Pending
	if state == StateDecided || state == StateAll {
		for _, p := range b.decided {
			out = append(out, p.clone())
		}
	}
	if state == StatePending || state == StateAll {
		for _, w := range b.pending {
			out = append(out, w.view.clone())
		}
		for _, p := range b.remote {
			out = append(out, p.clone())
		}
	}
	b.mu.Unlock()
	slices.SortStableFunc(out, func(a, c Pending) int { return a.RequestedAt.Compare(c.RequestedAt) })
	return out
}

// ForgetSession drops the decisions remembered for session id; the daemon
// calls it when a session ends.
func (b *Broker) ForgetSession(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.remembered {
		if k.session == id {
			delete(b.remembered, k)
		}
	}
	for k, p := range b.remote {
		if p.SessionID == id {
			delete(b.remote, k)
		}
	}
}
