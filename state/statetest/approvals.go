package statetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/state"
)

func testApprovalLifecycle(t *testing.T, st state.Store) {
	ctx := context.Background()
	mustPut(t, st, NewSession("s1"))
	a := newApproval("a1", "s1", "r1")
	if err := st.PutApproval(ctx, a); err != nil {
		t.Fatalf("PutApproval = %v", err)
	}
	got, err := st.Approval(ctx, "a1")
	if err != nil || !same(got, a) {
		t.Errorf("Approval(a1) = %+v, %v; want %+v", got, err, a)
	}
	if err := st.PutApproval(ctx, a); !errors.Is(err, state.ErrConflict) {
		t.Errorf("PutApproval(duplicate) = %v, want ErrConflict", err)
	}
	if err := st.PutApproval(ctx, newApproval("a2", "no-such-session", "r1")); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("PutApproval(unknown session) = %v, want ErrNotFound", err)
	}
	if _, err := st.Approval(ctx, "a2"); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("a refused PutApproval stored it: Approval(a2) = %v", err)
	}

	at := base().Add(time.Minute)
	dec, err := st.DecideApproval(ctx, "a1", at, "approve", "approved", "approved by alice", "session")
	if err != nil {
		t.Fatalf("DecideApproval = %v", err)
	}
	want := a
	want.DecidedAt, want.Decision, want.Outcome, want.Reason, want.Remember = &at, "approve", "approved", "approved by alice", "session"
	if !same(dec, want) {
		t.Errorf("DecideApproval returned\n%+v\nwant\n%+v", dec, want)
	}
	if got, _ := st.Approval(ctx, "a1"); !same(got, want) {
		t.Errorf("Approval after deciding = %+v, want %+v", got, want)
	}
	if _, err := st.DecideApproval(ctx, "a1", at, "deny", "denied", "", ""); !errors.Is(err, state.ErrConflict) {
		t.Errorf("DecideApproval twice = %v, want ErrConflict", err)
	}
	if got, _ := st.Approval(ctx, "a1"); !same(got, want) {
		t.Errorf("a refused DecideApproval changed the record to %+v", got)
	}
	if _, err := st.DecideApproval(ctx, "nope", at, "deny", "denied", "", ""); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("DecideApproval(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := st.Approval(ctx, "nope"); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("Approval(unknown) = %v, want ErrNotFound", err)
	}
	// A timeout has no person's decision.
	if err := st.PutApproval(ctx, newApproval("a3", "s1", "r1")); err != nil {
		t.Fatal(err)
	}
	if got, err := st.DecideApproval(ctx, "a3", at, "", "timeout", "timeout", ""); err != nil || got.Outcome != "timeout" || got.Decision != "" {
		t.Errorf("DecideApproval(timeout) = %+v, %v", got, err)
	}
}

func testApprovalInvalid(t *testing.T, st state.Store) {
	ctx := context.Background()
	mustPut(t, st, NewSession("s1"))
	now := base()
	for _, tc := range []struct {
		name string
		edit func(*state.Approval)
	}{
		{"empty ID", func(a *state.Approval) { a.ID = "" }},
		{"empty session", func(a *state.Approval) { a.SessionID = "" }},
		{"no created_at", func(a *state.Approval) { a.CreatedAt = time.Time{} }},
		{"already decided", func(a *state.Approval) { a.DecidedAt = &now; a.Outcome = "approved" }},
	} {
		a := newApproval("a-invalid", "s1", "r1")
		tc.edit(&a)
		if err := st.PutApproval(ctx, a); !errors.Is(err, state.ErrInvalid) {
			t.Errorf("PutApproval(%s) = %v, want ErrInvalid", tc.name, err)
		}
	}
	if err := st.PutApproval(ctx, newApproval("a1", "s1", "r1")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, decision, outcome, remember string }{
		{"unknown decision", "maybe", "approved", ""},
		{"no outcome", "approve", "", ""},
		{"unknown outcome", "approve", "fine", ""},
		{"unknown remember", "approve", "approved", "forever"},
	} {
		if _, err := st.DecideApproval(ctx, "a1", now, tc.decision, tc.outcome, "", tc.remember); !errors.Is(err, state.ErrInvalid) {
			t.Errorf("DecideApproval(%s) = %v, want ErrInvalid", tc.name, err)
		}
	}
	if _, err := st.DecideApproval(ctx, "a1", time.Time{}, "approve", "approved", "", ""); !errors.Is(err, state.ErrInvalid) {
		t.Errorf("DecideApproval(no time) = %v, want ErrInvalid", err)
	}
	if got, err := st.Approval(ctx, "a1"); err != nil || got.DecidedAt != nil {
		t.Errorf("refused decisions settled the approval: %+v, %v", got, err)
	}
}

func testApprovalsList(t *testing.T, st state.Store) {
	ctx := context.Background()
	mustPut(t, st, NewSession("s1"))
	t0 := base()
	// a0..a5 created a second apart; a0, a1, a2, a4 decided in the order
	// a2, a0, a4, a1.
	for i, id := range []string{"a0", "a1", "a2", "a3", "a4", "a5"} {
		a := newApproval(id, "s1", "r1")
		a.CreatedAt = t0.Add(time.Duration(i) * time.Second)
		if err := st.PutApproval(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	for i, id := range []string{"a2", "a0", "a4", "a1"} {
		if _, err := st.DecideApproval(ctx, id, t0.Add(time.Minute+time.Duration(i)*time.Second), "deny", "denied", "", "once"); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		limit int
		want  []string
	}{
		{0, []string{"a3", "a5"}},
		{-1, []string{"a3", "a5"}},
		{2, []string{"a1", "a3", "a4", "a5"}},
		{3, []string{"a0", "a1", "a3", "a4", "a5"}},
		{100, []string{"a0", "a1", "a2", "a3", "a4", "a5"}},
	} {
		got, err := st.Approvals(ctx, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(approvalIDs(got), tc.want) {
			t.Errorf("Approvals(%d) = %v, want %v", tc.limit, approvalIDs(got), tc.want)
		}
	}
}

func testAbandon(t *testing.T, st state.Store) {
	ctx := context.Background()
	mustPut(t, st, NewSession("s1"))
	t0 := base()
	for i, a := range []state.Approval{
		newApproval("mine-2", "s1", "r1"),
		newApproval("mine-1", "s1", "r1"),
		newApproval("mine-decided", "s1", "r1"),
		newApproval("theirs", "s1", "r2"),
	} {
		a.CreatedAt = t0.Add(-time.Duration(i) * time.Second)
		if err := st.PutApproval(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.DecideApproval(ctx, "mine-decided", t0, "approve", "approved", "", "once"); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(time.Minute)
	got, err := st.AbandonApprovals(ctx, "r1", at)
	if err != nil {
		t.Fatalf("AbandonApprovals = %v", err)
	}
	if !reflect.DeepEqual(approvalIDs(got), []string{"mine-1", "mine-2"}) {
		t.Fatalf("AbandonApprovals(r1) = %v, want [mine-1 mine-2] (oldest first, pending only)", approvalIDs(got))
	}
	for _, a := range got {
		if a.Outcome != "abandoned" || a.DecidedAt == nil || !a.DecidedAt.Equal(at) || a.Decision != "" {
			t.Errorf("abandoned %s: outcome %q decided %v decision %q", a.ID, a.Outcome, a.DecidedAt, a.Decision)
		}
		if stored, _ := st.Approval(ctx, a.ID); !same(stored, a) {
			t.Errorf("stored %s = %+v, want what AbandonApprovals returned %+v", a.ID, stored, a)
		}
	}
	if a, _ := st.Approval(ctx, "mine-decided"); a.Outcome != "approved" {
		t.Errorf("AbandonApprovals changed an approval decided before: outcome %q", a.Outcome)
	}
	if a, _ := st.Approval(ctx, "theirs"); a.DecidedAt != nil {
		t.Errorf("AbandonApprovals(r1) settled replica r2's approval")
	}
	if again, err := st.AbandonApprovals(ctx, "r1", at); err != nil || len(again) != 0 {
		t.Errorf("AbandonApprovals twice = %v, %v; want none", approvalIDs(again), err)
	}
}

// testAbandonStale: approvals pending since before the cutoff are settled
// whichever replica holds them, except the sweeping replica's own; newer
// ones and decided ones are left alone; a second sweep finds nothing.
func testAbandonStale(t *testing.T, st state.Store) {
	ctx := context.Background()
	mustPut(t, st, NewSession("s1"))
	t0 := base()
	cutoff := t0.Add(-time.Minute)
	for _, c := range []struct {
		id, replica string
		age         time.Duration
	}{
		{"gone-new", "gone", 2 * time.Minute},
		{"gone-old", "gone", time.Hour},
		{"other-old", "other", 3 * time.Minute},
		{"gone-at-cutoff", "gone", time.Minute},
		{"gone-fresh", "gone", time.Second},
		{"mine-old", "me", time.Hour},
		{"gone-decided", "gone", time.Hour},
	} {
		a := newApproval(c.id, "s1", c.replica)
		a.CreatedAt = t0.Add(-c.age)
		if err := st.PutApproval(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.DecideApproval(ctx, "gone-decided", t0, "deny", "denied", "", "once"); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(time.Second)
	got, err := st.AbandonStaleApprovals(ctx, cutoff, at, "me")
	if err != nil {
		t.Fatalf("AbandonStaleApprovals = %v", err)
	}
	if want := []string{"gone-old", "other-old", "gone-new"}; !reflect.DeepEqual(approvalIDs(got), want) {
		t.Fatalf("AbandonStaleApprovals = %v, want %v (pending, older than the cutoff, not mine; oldest first)", approvalIDs(got), want)
	}
	for _, a := range got {
		if a.Outcome != "abandoned" || a.DecidedAt == nil || !a.DecidedAt.Equal(at) || a.Decision != "" || a.Reason != "" {
			t.Errorf("abandoned %s: outcome %q decided %v decision %q reason %q", a.ID, a.Outcome, a.DecidedAt, a.Decision, a.Reason)
		}
		if stored, _ := st.Approval(ctx, a.ID); !same(stored, a) {
			t.Errorf("stored %s = %+v, want what AbandonStaleApprovals returned %+v", a.ID, stored, a)
		}
	}
	for _, id := range []string{"gone-at-cutoff", "gone-fresh", "mine-old"} {
		if a, _ := st.Approval(ctx, id); a.DecidedAt != nil {
			t.Errorf("AbandonStaleApprovals settled %s (outcome %q)", id, a.Outcome)
		}
	}
	if a, _ := st.Approval(ctx, "gone-decided"); a.Outcome != "denied" {
		t.Errorf("AbandonStaleApprovals changed an approval decided before: outcome %q", a.Outcome)
	}
	if again, err := st.AbandonStaleApprovals(ctx, cutoff, at, "me"); err != nil || len(again) != 0 {
		t.Errorf("AbandonStaleApprovals twice = %v, %v; want none", approvalIDs(again), err)
	}
	if _, err := st.AbandonStaleApprovals(ctx, time.Time{}, at, "me"); !errors.Is(err, state.ErrInvalid) {
		t.Errorf("AbandonStaleApprovals with no cutoff = %v, want ErrInvalid", err)
	}
}

// testAbandonStaleRace: replicas sweeping at once, while people decide
// some of the same approvals, settle each approval once: every stale
// approval is returned by exactly one sweep, and none a decider won.
func testAbandonStaleRace(t *testing.T, st state.Store) {
	ctx := context.Background()
	mustPut(t, st, NewSession("s1"))
	const approvals, sweepers, rounds = 40, 4, 5
	old := base().Add(-time.Hour)
	for i := range approvals {
		a := newApproval(fmt.Sprintf("stale-%02d", i), "s1", fmt.Sprintf("gone-%d", i%3))
		a.CreatedAt = old.Add(time.Duration(i) * time.Millisecond)
		if err := st.PutApproval(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu      sync.Mutex
		swept   = map[string]int{}
		decided = map[string]bool{}
		wg      sync.WaitGroup
	)
	errs := make(chan error, sweepers*rounds+approvals)
	for r := range sweepers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				got, err := st.AbandonStaleApprovals(ctx, base().Add(-time.Minute), base(), fmt.Sprintf("live-%d", r))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, a := range got {
					swept[a.ID]++
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < approvals; i += 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("stale-%02d", i)
			_, err := st.DecideApproval(ctx, id, base(), "approve", "approved", "", "once")
			switch {
			case err == nil:
				mu.Lock()
				decided[id] = true
				mu.Unlock()
			case !errors.Is(err, state.ErrConflict):
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range approvals {
		id := fmt.Sprintf("stale-%02d", i)
		n, won := swept[id], decided[id]
		a, err := st.Approval(ctx, id)
		switch {
		case err != nil:
			t.Errorf("Approval(%s) = %v", id, err)
		case won && (n != 0 || a.Outcome != "approved"):
			t.Errorf("%s: a decider won, yet %d sweeps returned it (stored outcome %q)", id, n, a.Outcome)
		case !won && (n != 1 || a.Outcome != "abandoned"):
			t.Errorf("%s: returned by %d sweeps, stored outcome %q; want exactly 1 and abandoned", id, n, a.Outcome)
		}
	}
}

func testGrants(t *testing.T, st state.Store) {
	ctx := context.Background()
	mustPut(t, st, NewSession("s1"))
	mustPut(t, st, NewSession("s-ended"))
	expired := NewSession("s-expired")
	expired.ExpiresAt = time.Now().Add(-time.Minute)
	mustPut(t, st, expired)
	t0 := base()
	g := state.Grant{SessionID: "s1", Connector: "github", Tool: "issues", Operation: "create", Decision: "approve", CreatedAt: t0}
	for _, sid := range []string{"s1", "s-ended", "s-expired"} {
		g2 := g
		g2.SessionID = sid
		if err := st.PutGrant(ctx, g2); err != nil {
			t.Fatalf("PutGrant(%s) = %v", sid, err)
		}
	}
	if err := st.EndSession(ctx, "s-ended", t0, "ended", nil); err != nil {
		t.Fatal(err)
	}
	other := state.Grant{SessionID: "s1", Connector: "github", Tool: "issues", Operation: "delete", Decision: "deny", CreatedAt: t0.Add(time.Second)}
	if err := st.PutGrant(ctx, other); err != nil {
		t.Fatal(err)
	}
	// The same key again replaces the decision.
	replaced := g
	replaced.Decision, replaced.CreatedAt = "deny", t0.Add(2*time.Second)
	if err := st.PutGrant(ctx, replaced); err != nil {
		t.Fatal(err)
	}
	got, err := st.Grants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !same(got[0], other) || !same(got[1], replaced) {
		t.Errorf("Grants = %+v\nwant [%+v %+v]", got, other, replaced)
	}
	if err := st.PutGrant(ctx, state.Grant{SessionID: "nope", Connector: "c", Decision: "approve", CreatedAt: t0}); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("PutGrant(unknown session) = %v, want ErrNotFound", err)
	}
	for _, bad := range []state.Grant{
		{SessionID: "", Connector: "c", Decision: "approve", CreatedAt: t0},
		{SessionID: "s1", Connector: "", Decision: "approve", CreatedAt: t0},
		{SessionID: "s1", Connector: "c", Decision: "maybe", CreatedAt: t0},
		{SessionID: "s1", Connector: "c", Decision: "approve"},
	} {
		if err := st.PutGrant(ctx, bad); !errors.Is(err, state.ErrInvalid) {
			t.Errorf("PutGrant(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
}

func testSandboxes(t *testing.T, st state.Store) {
	ctx := context.Background()
	mustPut(t, st, NewSession("s1"))
	sb := newSandbox("sb1", "s1")
	if err := st.PutSandbox(ctx, sb); err != nil {
		t.Fatalf("PutSandbox = %v", err)
	}
	sb2 := newSandbox("sb2", "s1")
	sb2.CreatedAt = sb.CreatedAt.Add(time.Second)
	sb2.Spec = nil
	if err := st.PutSandbox(ctx, sb2); err != nil {
		t.Fatal(err)
	}
	// Replacing sb1.
	sb.Spec, sb.Replica = []byte(`{"container":"moved"}`), "r2"
	if err := st.PutSandbox(ctx, sb); err != nil {
		t.Fatalf("PutSandbox(replace) = %v", err)
	}
	got, err := st.Sandboxes(ctx)
	if err != nil || len(got) != 2 || !same(got[0], sb) || !same(got[1], sb2) {
		t.Fatalf("Sandboxes = %+v, %v; want [%+v %+v]", got, err, sb, sb2)
	}
	gone := base().Add(time.Minute)
	if err := st.MarkSandboxGone(ctx, "sb1", gone); err != nil {
		t.Fatalf("MarkSandboxGone = %v", err)
	}
	got, _ = st.Sandboxes(ctx)
	if got[0].GoneAt == nil || !got[0].GoneAt.Equal(gone) {
		t.Errorf("after MarkSandboxGone, GoneAt = %v, want %v", got[0].GoneAt, gone)
	}
	if err := st.MarkSandboxGone(ctx, "nope", gone); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("MarkSandboxGone(unknown) = %v, want ErrNotFound", err)
	}
	if err := st.DeleteSandbox(ctx, "sb1"); err != nil {
		t.Fatalf("DeleteSandbox = %v", err)
	}
	if err := st.DeleteSandbox(ctx, "sb1"); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("DeleteSandbox twice = %v, want ErrNotFound", err)
	}
	got, _ = st.Sandboxes(ctx)
	if len(got) != 1 || got[0].ID != "sb2" {
		t.Errorf("after DeleteSandbox(sb1), Sandboxes = %+v", got)
	}
	if err := st.PutSandbox(ctx, newSandbox("sb3", "nope")); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("PutSandbox(unknown session) = %v, want ErrNotFound", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*state.Sandbox)
	}{
		{"empty ID", func(s *state.Sandbox) { s.ID = "" }},
		{"empty session", func(s *state.Sandbox) { s.SessionID = "" }},
		{"no token digest", func(s *state.Sandbox) { s.TokenDigest = [32]byte{} }},
		{"no created_at", func(s *state.Sandbox) { s.CreatedAt = time.Time{} }},
		{"no expires_at", func(s *state.Sandbox) { s.ExpiresAt = time.Time{} }},
	} {
		bad := newSandbox("sb-bad", "s1")
		tc.edit(&bad)
		if err := st.PutSandbox(ctx, bad); !errors.Is(err, state.ErrInvalid) {
			t.Errorf("PutSandbox(%s) = %v, want ErrInvalid", tc.name, err)
		}
	}
}
