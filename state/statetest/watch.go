package statetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/state"
)

// waitFor reads ch until it sees want (skipping other changes, as another
// replica's may interleave) or a few seconds pass.
func waitFor(t *testing.T, ch <-chan state.Change, want state.Change) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case c, ok := <-ch:
			if !ok {
				t.Fatalf("Watch closed before delivering %+v", want)
			}
			if c == want {
				return
			}
		case <-deadline:
			t.Fatalf("Watch did not deliver %+v within 5s", want)
		}
	}
}

func testWatch(t *testing.T, st state.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := st.Watch(ctx)
	if err != nil {
		t.Fatalf("Watch = %v", err)
	}
	ch2, err := st.Watch(ctx)
	if err != nil {
		t.Fatalf("second Watch = %v", err)
	}
	now := base()
	steps := []struct {
		write func() error
		want  state.Change
	}{
		{func() error { return st.PutSession(ctx, NewSession("s1")) }, state.Change{Kind: state.ChangeSessionCreated, ID: "s1"}},
		{func() error { return st.PutApproval(ctx, newApproval("a1", "s1", "r1")) }, state.Change{Kind: state.ChangeApprovalCreated, ID: "a1"}},
		{func() error {
			_, err := st.DecideApproval(ctx, "a1", now, "approve", "approved", "", "session")
			return err
		}, state.Change{Kind: state.ChangeApprovalDecided, ID: "a1"}},
		{func() error { return st.PutApproval(ctx, newApproval("a2", "s1", "r9")) }, state.Change{Kind: state.ChangeApprovalCreated, ID: "a2"}},
		{func() error {
			_, err := st.AbandonApprovals(ctx, "r9", now)
			return err
		}, state.Change{Kind: state.ChangeApprovalDecided, ID: "a2"}},
		{func() error {
			return st.PutGrant(ctx, state.Grant{SessionID: "s1", Connector: "c", Decision: "approve", CreatedAt: now})
		}, state.Change{Kind: state.ChangeGrantCreated, ID: "s1"}},
		{func() error { return st.PutSandbox(ctx, newSandbox("sb1", "s1")) }, state.Change{Kind: state.ChangeSandboxChanged, ID: "sb1"}},
		{func() error { return st.MarkSandboxGone(ctx, "sb1", now) }, state.Change{Kind: state.ChangeSandboxChanged, ID: "sb1"}},
		{func() error { return st.DeleteSandbox(ctx, "sb1") }, state.Change{Kind: state.ChangeSandboxChanged, ID: "sb1"}},
		{func() error { return st.EndSession(ctx, "s1", now, "ended", nil) }, state.Change{Kind: state.ChangeSessionEnded, ID: "s1"}},
	}
	for _, s := range steps {
		if err := s.write(); err != nil {
			t.Fatalf("write for %+v: %v", s.want, err)
		}
		waitFor(t, ch, s.want)
		waitFor(t, ch2, s.want)
	}
	// A refused write publishes nothing: the next change seen is the
	// session created after it.
	if err := st.PutSession(ctx, NewSession("s1")); !errors.Is(err, state.ErrConflict) {
		t.Fatalf("duplicate PutSession = %v", err)
	}
	if err := st.PutSession(ctx, NewSession("s2")); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-ch:
		if c != (state.Change{Kind: state.ChangeSessionCreated, ID: "s2"}) {
			t.Errorf("after a refused write and PutSession(s2), Watch delivered %+v first", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not deliver s2")
	}
	cancel()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("Watch's channel stayed open after its context ended")
		}
	}
}

// testWatchSlow: a watcher that never reads does not slow writers down;
// when it reads again it gets every change or a ChangeResync.
func testWatchSlow(t *testing.T, st state.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := st.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 1500
	done := make(chan error, 1)
	go func() {
		for i := range n {
			if err := st.PutSession(ctx, NewSession(fmt.Sprintf("s%04d", i))); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("writers are blocked by a watcher that does not read")
	}
	seen := map[string]bool{}
	resync := false
	deadline := time.After(10 * time.Second)
	for !resync && len(seen) < n {
		select {
		case c := <-ch:
			if c.Kind == state.ChangeResync {
				resync = true
			} else {
				seen[c.ID] = true
			}
		case <-deadline:
			t.Fatalf("a slow watcher got %d of %d changes and no resync", len(seen), n)
		}
	}
	// Once caught up, the watcher hears new changes again: the change
	// itself, or one more resync if the writes overran it a second time
	// after the first resync was queued.
	if err := st.PutSession(ctx, NewSession("after")); err != nil {
		t.Fatal(err)
	}
	for after := false; !after; {
		select {
		case c, ok := <-ch:
			if !ok {
				t.Fatal("Watch closed")
			}
			after = c == state.Change{Kind: state.ChangeSessionCreated, ID: "after"} || c.Kind == state.ChangeResync
		case <-time.After(5 * time.Second):
			t.Fatal("after catching up, Watch delivered neither the next change nor a resync")
		}
	}
	if err := st.PutSession(ctx, NewSession("final")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ch, state.Change{Kind: state.ChangeSessionCreated, ID: "final"})
}

// testConcurrentDecide: of many concurrent decisions on one approval,
// exactly one wins and the rest get ErrConflict.
func testConcurrentDecide(t *testing.T, st state.Store) {
	ctx := context.Background()
	mustPut(t, st, NewSession("s1"))
	const approvals, deciders = 5, 8
	for i := range approvals {
		if err := st.PutApproval(ctx, newApproval(fmt.Sprintf("a%d", i), "s1", "r1")); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var wins [approvals]atomic.Int32
	errs := make(chan error, approvals*deciders)
	for i := range approvals {
		for d := range deciders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				reason := fmt.Sprintf("decider %d", d)
				a, err := st.DecideApproval(ctx, fmt.Sprintf("a%d", i), base(), "approve", "approved", reason, "once")
				switch {
				case err == nil:
					wins[i].Add(1)
					if a.Reason != reason {
						errs <- fmt.Errorf("decider %d won a%d but got back reason %q", d, i, a.Reason)
					}
				case !errors.Is(err, state.ErrConflict):
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range approvals {
		if n := wins[i].Load(); n != 1 {
			t.Errorf("approval a%d was decided by %d concurrent callers, want exactly 1", i, n)
		}
	}
}

// testConcurrentWrites: writers and readers of every kind at once, each
// session's records consistent afterwards (run it with -race).
func testConcurrentWrites(t *testing.T, st state.Store) {
	ctx := context.Background()
	const workers, each = 6, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers*each*4)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := fmt.Sprintf("w%d-s%d", w, i)
				if err := st.PutSession(ctx, NewSession(id)); err != nil {
					errs <- err
					return
				}
				if err := st.PutApproval(ctx, newApproval(id+"-a", id, "r1")); err != nil {
					errs <- err
				}
				if err := st.PutGrant(ctx, state.Grant{SessionID: id, Connector: "c", Decision: "approve", CreatedAt: base()}); err != nil {
					errs <- err
				}
				if _, err := st.Sessions(ctx, base(), base()); err != nil {
					errs <- err
				}
				if _, err := st.Approvals(ctx, 10); err != nil {
					errs <- err
				}
				if i%2 == 0 {
					if err := st.EndSession(ctx, id, base(), "ended", nil); err != nil {
						errs <- err
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	all, err := st.Sessions(ctx, base(), base().Add(-time.Hour))
	if err != nil || len(all) != workers*each {
		t.Fatalf("Sessions = %d, %v; want %d", len(all), err, workers*each)
	}
	ended := 0
	for _, s := range all {
		if s.EndedAt != nil {
			ended++
		}
	}
	if ended != workers*each/2 {
		t.Errorf("%d sessions ended, want %d", ended, workers*each/2)
	}
	gs, err := st.Grants(ctx)
	if err != nil || len(gs) != workers*each/2 {
		t.Errorf("Grants = %d, %v; want %d (live sessions only)", len(gs), err, workers*each/2)
	}
}

// testClosed: a closed store refuses calls with an error (no panic) and
// ends its watchers.
func testClosed(t *testing.T, st state.Store) {
	ctx := context.Background()
	ch, err := st.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, st, NewSession("s1"))
	if err := st.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	deadline := time.After(5 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-ch:
		case <-deadline:
			t.Fatal("Watch's channel stayed open after Close")
		}
	}
	if err := st.PutSession(ctx, NewSession("s2")); err == nil {
		t.Error("PutSession after Close succeeded")
	}
	if _, err := st.Session(ctx, "s1"); err == nil {
		t.Error("Session after Close succeeded")
	}
	if _, err := st.Watch(ctx); err == nil {
		t.Error("Watch after Close succeeded")
	}
	if err := st.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
}
