package state

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/pgtest"
)

// TestPostgresReplicasSweepStaleOnce opens two Stores on one database, as
// two replicas do, and has both sweep stale approvals at once, repeatedly:
// each approval is returned by exactly one of them, and the other replica
// learns of each through its Watch.
func TestPostgresReplicasSweepStaleOnce(t *testing.T) {
	ctx := ctxT(t)
	dsn := pgtest.DB(t)
	key := newTestKey(t)
	a, b := openPG(t, dsn, key, nil), openPG(t, dsn, key, nil)
	if err := a.PutSession(ctx, testSession("s1")); err != nil {
		t.Fatal(err)
	}
	const approvals, rounds = 60, 8
	old := time.Now().UTC().Truncate(time.Microsecond).Add(-time.Hour)
	for i := range approvals {
		ap := Approval{ID: fmt.Sprintf("stale-%02d", i), SessionID: "s1", Replica: "gone", View: []byte(`{}`), CreatedAt: old.Add(time.Duration(i) * time.Millisecond)}
		if err := a.PutApproval(ctx, ap); err != nil {
			t.Fatal(err)
		}
	}
	wb, err := b.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		swept = map[string][]string{}
		wg    sync.WaitGroup
	)
	errs := make(chan error, 4*rounds)
	for _, r := range []struct {
		name string
		st   *pgStore
	}{{"a", a}, {"a", a}, {"b", b}, {"b", b}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				now := time.Now()
				got, err := r.st.AbandonStaleApprovals(ctx, now.Add(-time.Minute), now, r.name)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, ap := range got {
					swept[ap.ID] = append(swept[ap.ID], r.name)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range approvals {
		id := fmt.Sprintf("stale-%02d", i)
		if by := swept[id]; len(by) != 1 {
			t.Errorf("%s was returned by %d sweeps (%v), want exactly 1", id, len(by), by)
		}
	}
	seen := map[string]bool{}
	deadline := time.After(5 * time.Second)
	for len(seen) < approvals {
		select {
		case c := <-wb:
			if c.Kind == ChangeApprovalDecided {
				seen[c.ID] = true
			}
		case <-deadline:
			t.Fatalf("replica b's Watch saw %d of %d approvals decided", len(seen), approvals)
		}
	}
}
