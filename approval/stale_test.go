package approval

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/testkit"
	"github.com/aileron-dev/aileron-proxy/state"
	"github.com/aileron-dev/aileron-proxy/state/memstore"
)

// fakeClock is a settable Now for brokers.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// putHeld stores a pending approval as replica would while holding its
// request, requested at at.
func putHeld(t *testing.T, st state.Store, id, replica string, at time.Time) {
	t.Helper()
	r := req("ses_1", "op-"+id)
	view := Pending{ID: id, SessionID: r.SessionID, ConnectorFQN: r.ConnectorFQN, Tool: r.Tool, Operation: r.Operation,
		Method: r.Method, Host: r.Host, Path: r.Path, Fields: r.Fields, RequestedAt: at, State: StatePending}
	raw, err := json.Marshal(view)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutApproval(context.Background(), state.Approval{ID: id, SessionID: r.SessionID, Replica: replica, View: raw, CreatedAt: at}); err != nil {
		t.Fatal(err)
	}
}

func abandonedEvents(rec *testkit.Recorder, id string) []audit.Event {
	var out []audit.Event
	for _, e := range rec.All() {
		if e.Event == audit.EventApprovalDecided && e.Fields[FieldApprovalID] == id {
			out = append(out, e)
		}
	}
	return out
}

func storedOutcome(t *testing.T, st state.Store, id string) string {
	t.Helper()
	a, err := st.Approval(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if a.DecidedAt == nil {
		return "pending"
	}
	return a.Outcome
}

// A replica that is gone for good leaves approvals pending: a live replica
// settles each as abandoned once it is older than the Timeout plus the
// grace (at start, then by its periodic sweep), audits it once, and leaves
// alone the approvals it holds itself and those not yet stale.
func TestBrokerSettlesStaleApprovals(t *testing.T) {
	const timeout = 10 * time.Second
	clock := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	st := memstore.New()
	stale := timeout + staleGrace
	putHeld(t, st, "gone-old", "gone", clock.Now().Add(-stale-time.Second))
	putHeld(t, st, "gone-fresh", "gone", clock.Now().Add(-timeout))
	putHeld(t, st, "mine-old", "r1", clock.Now().Add(-time.Hour))

	rec1, rec2 := testkit.NewRecorder(), testkit.NewRecorder()
	b1 := NewBroker(BrokerConfig{Store: st, Replica: "r1", Audit: rec1, Timeout: timeout, Now: clock.Now})
	b2 := NewBroker(BrokerConfig{Store: st.Shared(), Replica: "r2", Audit: rec2, Timeout: timeout, Now: clock.Now})

	// At start: r1's own approval is abandoned by Restore's own-replica
	// path; gone-old by the stale sweep.
	n, err := b1.Restore(context.Background())
	if err != nil || n != 2 {
		t.Fatalf("Restore = %d, %v; want 2 abandoned (its own and the gone replica's stale one)", n, err)
	}
	if got := storedOutcome(t, st, "gone-old"); got != "abandoned" {
		t.Fatalf("gone-old after Restore = %s, want abandoned", got)
	}
	if got := storedOutcome(t, st, "gone-fresh"); got != "pending" {
		t.Fatalf("gone-fresh after Restore = %s, want still pending (not older than Timeout+grace)", got)
	}
	es := abandonedEvents(rec1, "gone-old")
	if len(es) != 1 || es[0].Reason != ReasonAbandoned || es[0].Decision != "denied" || es[0].SessionID != "ses_1" || es[0].Operation != "op-gone-old" {
		t.Fatalf("audit of gone-old = %+v, want one approval.decided denied/abandoned with its session and operation", es)
	}
	if p := b1.List(StatePending); len(p) != 1 || p[0].ID != "gone-fresh" {
		t.Errorf("List(pending) = %+v, want gone-fresh only", p)
	}
	if _, err := b2.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Time passes: gone-fresh becomes stale; both replicas sweep at once
	// and it is settled and audited exactly once.
	clock.Add(stale)
	putHeld(t, st, "r2-held", "r2", clock.Now().Add(-time.Hour)) // r2 holds it: r2 leaves it alone
	var wg sync.WaitGroup
	counts := make([]int, 2)
	for i, b := range []*Broker{b1, b2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			counts[i] = b.sweepStale()
		}()
	}
	wg.Wait()
	if counts[0]+counts[1] != 2 {
		t.Errorf("sweeps settled %v approvals, want 2 in all (gone-fresh, and r2-held by r1)", counts)
	}
	if got := len(abandonedEvents(rec1, "gone-fresh")) + len(abandonedEvents(rec2, "gone-fresh")); got != 1 {
		t.Errorf("gone-fresh audited %d times across the replicas, want once", got)
	}
	if got := len(abandonedEvents(rec2, "r2-held")); got != 0 {
		t.Errorf("r2 audited its own held approval %d times", got)
	}
	for _, id := range []string{"gone-fresh", "r2-held"} {
		if got := storedOutcome(t, st, id); got != "abandoned" {
			t.Errorf("%s = %s, want abandoned", id, got)
		}
	}
	// Whichever replica lost the race learns of the decision from the
	// store (as Follow would deliver it).
	for _, b := range []*Broker{b1, b2} {
		b.apply(state.Change{Kind: state.ChangeResync})
		if p := b.List(StatePending); len(p) != 0 {
			t.Errorf("%s's List(pending) = %+v, want none", b.replica, p)
		}
	}
	if again := b1.sweepStale() + b2.sweepStale(); again != 0 {
		t.Errorf("a second sweep settled %d, want 0", again)
	}
}

// A replica's own held approvals are never swept by it, even past the
// grace: its waiter settles them.
func TestBrokerSweepLeavesItsOwnWaiters(t *testing.T) {
	clock := &fakeClock{t: time.Now()}
	st := memstore.New()
	rec := testkit.NewRecorder()
	b := NewBroker(BrokerConfig{Store: st, Replica: "r1", Audit: rec, Timeout: time.Hour, Now: clock.Now})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, id := awaitAsync(t, ctx, b, rec, req("ses_1", "create"))
	clock.Add(2 * time.Hour)
	if n := b.sweepStale(); n != 0 {
		t.Fatalf("sweepStale = %d, want 0 (the approval is held here)", n)
	}
	if got := storedOutcome(t, st, id); got != "pending" {
		t.Errorf("own held approval = %s, want pending", got)
	}
	cancel()
	if o := result(t, out); o != OutcomeCanceled {
		t.Errorf("Await = %v, want canceled", o)
	}
}

// Follow sweeps periodically; another replica following the store sees the
// settled approval leave its pending list; Follow returns once ctx ends.
func TestBrokerFollowSweepsStaleApprovals(t *testing.T) {
	st := memstore.New()
	rec1, rec2 := testkit.NewRecorder(), testkit.NewRecorder()
	b1 := NewBroker(BrokerConfig{Store: st, Replica: "r1", Audit: rec1, Timeout: time.Second})
	b2 := NewBroker(BrokerConfig{Store: st.Shared(), Replica: "r2", Audit: rec2, Timeout: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { b1.Follow(ctx); close(done) }()
	follow(t, b2) // r2's Timeout is long: r2 does not sweep it within the test
	putHeld(t, st, "gone-1", "gone", time.Now().Add(-time.Second-staleGrace-time.Millisecond))
	eventuallyWithin(t, 3*staleSweepEvery(time.Second), "r2 lists gone-1", func() bool { return len(b2.List(StatePending)) == 1 })
	eventuallyWithin(t, 3*staleSweepEvery(time.Second), "r1's periodic sweep settles gone-1", func() bool {
		return storedOutcome(t, st, "gone-1") == "abandoned"
	})
	eventuallyWithin(t, time.Second, "r2 sees gone-1 decided", func() bool { return len(b2.List(StatePending)) == 0 })
	if n := len(abandonedEvents(rec1, "gone-1")); n != 1 {
		t.Errorf("r1 audited gone-1 %d times, want once", n)
	}
	if n := len(abandonedEvents(rec2, "gone-1")); n != 0 {
		t.Errorf("r2 audited gone-1 %d times, want 0 (r1 settled it)", n)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Follow (with its sweep) did not return after its context ended")
	}
}

func TestStaleSweepEvery(t *testing.T) {
	for _, tc := range []struct{ timeout, want time.Duration }{
		{time.Second, time.Second},
		{DefaultTimeout, 30 * time.Second},
		{time.Hour, time.Minute},
	} {
		if got := staleSweepEvery(tc.timeout); got != tc.want {
			t.Errorf("staleSweepEvery(%v) = %v, want %v", tc.timeout, got, tc.want)
		}
	}
}

func eventuallyWithin(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
