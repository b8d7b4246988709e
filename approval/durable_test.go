package approval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/preview"
	"github.com/aileron-dev/aileron-proxy/internal/testkit"
	"github.com/aileron-dev/aileron-proxy/state"
	"github.com/aileron-dev/aileron-proxy/state/memstore"
)

func storeBroker(st state.Store, replica string, rec *testkit.Recorder) *Broker {
	return NewBroker(BrokerConfig{Store: st, Replica: replica, Audit: rec, Timeout: 10 * time.Second})
}

// follow runs b.Follow until the test ends and gives it time to subscribe.
func follow(t *testing.T, b *Broker) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go b.Follow(ctx)
	time.Sleep(20 * time.Millisecond)
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 1s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Await, Decide and a remembered decision write through to the store.
func TestBrokerWritesThrough(t *testing.T) {
	st := memstore.New()
	rec := testkit.NewRecorder()
	b := storeBroker(st, "r1", rec)
	r := req("ses_1", "create")
	r.Preview = &preview.Preview{Method: "POST", Host: "api.example.com:443", Path: "/x", Query: []preview.Field{{Name: "title", Value: "hello"}}}
	out, id := awaitAsync(t, context.Background(), b, rec, r)
	a, err := st.Approval(context.Background(), id)
	if err != nil {
		t.Fatalf("the pending approval is not in the store: %v", err)
	}
	var view Pending
	if err := json.Unmarshal(a.View, &view); err != nil || a.Replica != "r1" || a.SessionID != "ses_1" || view.Tool != "gh" || view.Preview == nil {
		t.Fatalf("stored approval = %+v (view %+v, %v); want replica r1 and the pending view with its preview", a, view, err)
	}
	if err := b.Decide(id, DecisionApprove, RememberSession); err != nil {
		t.Fatal(err)
	}
	if o := result(t, out); o != OutcomeApproved {
		t.Fatalf("Await = %v", o)
	}
	a, _ = st.Approval(context.Background(), id)
	if a.DecidedAt == nil || a.Decision != "approve" || a.Outcome != "approved" || a.Remember != "session" {
		t.Errorf("stored decision = %+v", a)
	}
	grants, _ := st.Grants(context.Background())
	if len(grants) != 1 || grants[0].Operation != "create" || grants[0].Decision != "approve" {
		t.Errorf("stored grants = %+v, want the remembered approve", grants)
	}
	// A timeout is settled in the store too.
	short := NewBroker(BrokerConfig{Store: st, Replica: "r1", Audit: rec, Timeout: 20 * time.Millisecond})
	if o := short.Await(context.Background(), req("ses_1", "delete")); o != OutcomeTimeout {
		t.Fatalf("Await = %v, want timeout", o)
	}
	all, _ := st.Approvals(context.Background(), 10)
	if last := all[len(all)-1]; last.Outcome != "timeout" || last.DecidedAt == nil {
		t.Errorf("timed-out approval in the store = %+v", last)
	}
}

// After a restart, what was pending is abandoned and audited; a remembered
// decision still answers at once; List shows the abandoned approval.
func TestBrokerRestart(t *testing.T) {
	st := memstore.New()
	rec := testkit.NewRecorder()
	before := storeBroker(st, "r1", rec)
	// Remembered before the restart.
	out, id := awaitAsync(t, context.Background(), before, rec, req("ses_1", "create"))
	if err := before.Decide(id, DecisionApprove, RememberSession); err != nil {
		t.Fatal(err)
	}
	result(t, out)
	rec.Next(t) // its approval.decided
	// Pending when the process dies (its Await is never answered).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, pendingID := awaitAsync(t, ctx, before, rec, req("ses_1", "delete"))
	// Another replica's pending approval is not abandoned.
	other := storeBroker(st.Shared(), "r2", testkit.NewRecorder())
	otherCtx, otherCancel := context.WithCancel(context.Background())
	defer otherCancel()
	go other.Await(otherCtx, req("ses_2", "delete"))
	eventually(t, "r2's approval stored", func() bool { all, _ := st.Approvals(context.Background(), 0); return len(all) == 2 })

	after := storeBroker(st, "r1", testkit.NewRecorder())
	n, err := after.Restore(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("Restore = %d, %v; want 1 abandoned", n, err)
	}
	e := after.audit.(*testkit.Recorder).WaitFor(t, "abandoned", func(e audit.Event) bool { return e.Event == audit.EventApprovalDecided })
	if e.Reason != ReasonAbandoned || e.Decision != "denied" || e.Fields[FieldApprovalID] != pendingID || e.SessionID != "ses_1" || e.Operation != "delete" {
		t.Errorf("abandoned audit event = %+v", e)
	}
	var found bool
	for _, p := range after.List(StateDecided) {
		if p.ID == pendingID {
			found = p.Decision == "abandoned" && p.Reason == ReasonAbandoned && p.Preview == nil
		}
	}
	if !found {
		t.Errorf("List(decided) after restart = %+v, want %s abandoned", after.List(StateDecided), pendingID)
	}
	if p := after.List(StatePending); len(p) != 1 || p[0].SessionID != "ses_2" {
		t.Errorf("List(pending) after restart = %+v, want r2's approval only", p)
	}
	if err := after.Decide(pendingID, DecisionApprove, RememberOnce); !errors.Is(err, ErrAlreadyDecided) {
		t.Errorf("Decide(abandoned) = %v, want ErrAlreadyDecided", err)
	}
	// The remembered decision answers without a person.
	done := make(chan Outcome, 1)
	go func() { done <- after.Await(context.Background(), req("ses_1", "create")) }()
	select {
	case o := <-done:
		if o != OutcomeApproved {
			t.Errorf("remembered Await after restart = %v", o)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a remembered decision did not answer after the restart")
	}
}

// An approval held on A is listed on B and decided through B; A's request
// is released with B's decision within a second.
func TestBrokerDecidedOnAnotherReplica(t *testing.T) {
	st := memstore.New()
	recA := testkit.NewRecorder()
	a := storeBroker(st, "a", recA)
	b := storeBroker(st.Shared(), "b", testkit.NewRecorder())
	follow(t, a)
	follow(t, b)
	out, id := awaitAsync(t, context.Background(), a, recA, req("ses_1", "create"))
	eventually(t, "B lists A's approval", func() bool {
		p := b.List(StatePending)
		return len(p) == 1 && p[0].ID == id && p[0].Tool == "gh"
	})
	// A second request of the same operation, also held on A.
	out2, id2 := awaitAsync(t, context.Background(), a, recA, req("ses_1", "create"))
	start := time.Now()
	if err := b.Decide(id, DecisionApprove, RememberOnce); err != nil {
		t.Fatalf("Decide on B: %v", err)
	}
	if o := result(t, out); o != OutcomeApproved {
		t.Fatalf("A's request = %v, want approved", o)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("A's request released after %s, want < 1s", d)
	}
	if a.Remembers(req("ses_1", "create")) {
		t.Fatal("a decision made once is remembered")
	}
	e := recA.WaitFor(t, "decided", func(e audit.Event) bool {
		return e.Event == audit.EventApprovalDecided && e.Fields[FieldApprovalID] == id
	})
	if e.Decision != "approved" || e.Reason != ReasonApproved {
		t.Errorf("A's audit of B's decision = %+v", e)
	}
	if err := a.Decide(id, DecisionDeny, RememberOnce); !errors.Is(err, ErrAlreadyDecided) {
		t.Errorf("Decide on A after B = %v, want ErrAlreadyDecided", err)
	}
	if err := b.Decide(id, DecisionDeny, RememberOnce); !errors.Is(err, ErrAlreadyDecided) {
		t.Errorf("Decide on B again = %v, want ErrAlreadyDecided", err)
	}
	// The second one, denied for the rest of the session through B.
	if err := b.Decide(id2, DecisionDeny, RememberSession); err != nil {
		t.Fatal(err)
	}
	if o := result(t, out2); o != OutcomeDenied {
		t.Errorf("A's second request = %v, want denied", o)
	}
	if err := b.Decide("apr_000000000000000000000000", DecisionDeny, RememberOnce); !errors.Is(err, ErrUnknownApproval) {
		t.Errorf("Decide(unknown) on B = %v, want ErrUnknownApproval", err)
	}
	eventually(t, "B's pending list empties", func() bool { return len(b.List(StatePending)) == 0 })
	// Remembered on both: a later request is answered at once on either.
	eventually(t, "remembered on A", func() bool { return a.Remembers(req("ses_1", "create")) })
	if !b.Remembers(req("ses_1", "create")) {
		t.Error("the decision remembered through B does not apply on B")
	}
	if o := a.Await(context.Background(), req("ses_1", "create")); o != OutcomeDenied {
		t.Errorf("a later request on A = %v, want the remembered deny", o)
	}
	// Stored views never hold more than the pending view: no secret field.
	all, _ := st.Approvals(context.Background(), 10)
	for _, x := range all {
		if bytes.Contains(x.View, []byte("Authorization")) {
			t.Errorf("stored view holds a header: %s", x.View)
		}
	}
}

// Without a store, Decide of an approval held elsewhere is unknown, as
// before.
func TestBrokerWithoutStore(t *testing.T) {
	b := NewBroker(BrokerConfig{})
	if n, err := b.Restore(context.Background()); n != 0 || err != nil {
		t.Errorf("Restore without a store = %d, %v", n, err)
	}
	if err := b.Decide("apr_000000000000000000000000", DecisionApprove, RememberOnce); !errors.Is(err, ErrUnknownApproval) {
		t.Errorf("Decide = %v", err)
	}
}

// The store reports a replica's own decisions back to it; Decide still
// answers the person with success and releases the request once.
func TestBrokerDecideWhileFollowing(t *testing.T) {
	st := slowDecide{memstore.New()}
	rec := testkit.NewRecorder()
	b := storeBroker(st, "a", rec)
	follow(t, b)
	for i := 0; i < 10; i++ {
		out, id := awaitAsync(t, context.Background(), b, rec, req("ses_1", "create"))
		if err := b.Decide(id, DecisionApprove, RememberOnce); err != nil {
			t.Fatalf("Decide #%d = %v, want success", i, err)
		}
		if o := result(t, out); o != OutcomeApproved {
			t.Fatalf("Await #%d = %v", i, o)
		}
		if e := rec.Next(t); e.Event != audit.EventApprovalDecided || e.Fields[FieldApprovalID] != id {
			t.Fatalf("event after Decide #%d = %+v", i, e)
		}
	}
}

// slowDecide returns from DecideApproval late, after its change was
// delivered, as a database round trip does.
type slowDecide struct{ *memstore.Store }

func (s slowDecide) DecideApproval(ctx context.Context, id string, at time.Time, decision, outcome, reason, remember string) (state.Approval, error) {
	a, err := s.Store.DecideApproval(ctx, id, at, decision, outcome, reason, remember)
	time.Sleep(20 * time.Millisecond)
	return a, err
}

// Abandon refuses what is held, records it abandoned in the store and
// audits it.
func TestBrokerAbandon(t *testing.T) {
	st := memstore.New()
	rec := testkit.NewRecorder()
	b := storeBroker(st, "a", rec)
	out, id := awaitAsync(t, context.Background(), b, rec, req("ses_1", "create"))
	if n := b.Abandon(); n != 1 {
		t.Fatalf("Abandon = %d, want 1", n)
	}
	if o := result(t, out); o.IsApproved() || o != OutcomeAbandoned {
		t.Errorf("Await = %v, want abandoned (refused)", o)
	}
	if e := rec.Next(t); e.Event != audit.EventApprovalDecided || e.Reason != ReasonAbandoned || e.Decision != "denied" {
		t.Errorf("audit = %+v", e)
	}
	if a, _ := st.Approval(context.Background(), id); a.Outcome != "abandoned" || a.DecidedAt == nil {
		t.Errorf("stored = %+v", a)
	}
	if p := b.List(StateDecided); len(p) != 1 || p[0].Decision != "abandoned" {
		t.Errorf("List(decided) = %+v", p)
	}
}

// A watcher that fell behind gets a resync: a decision of a request held
// here, and another replica's pending approval, apply.
func TestBrokerResync(t *testing.T) {
	st := memstore.New()
	recA := testkit.NewRecorder()
	a := storeBroker(st, "a", recA)
	b := storeBroker(st.Shared(), "b", testkit.NewRecorder())
	out, id := awaitAsync(t, context.Background(), a, recA, req("ses_1", "create"))
	b.apply(state.Change{Kind: state.ChangeResync})
	if p := b.List(StatePending); len(p) != 1 || p[0].ID != id {
		t.Fatalf("B's pending after a resync = %+v", p)
	}
	if err := b.Decide(id, DecisionDeny, RememberOnce); err != nil {
		t.Fatal(err)
	}
	a.apply(state.Change{Kind: state.ChangeResync}) // A missed the change
	if o := result(t, out); o != OutcomeDenied {
		t.Errorf("A's request after the resync = %v, want denied", o)
	}
}
