package session

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/testkit/specs"
)

func TestDueHeapOrder(t *testing.T) {
	base := time.Unix(2e9, 0)
	rng := rand.New(rand.NewPCG(1, 2))
	var h dueHeap
	var all []*entry
	for i := range 500 {
		e := &entry{sess: &Session{ID: fmt.Sprint(i)}, due: base.Add(time.Duration(rng.IntN(1000)) * time.Second)}
		heap.Push(&h, e)
		all = append(all, e)
	}
	// Move some entries, as End does, and check every index stays true.
	for _, e := range all[:100] {
		e.due = base.Add(time.Duration(rng.IntN(1000)) * time.Second)
		heap.Fix(&h, e.index)
	}
	for i, e := range h {
		if e.index != i {
			t.Fatalf("entry %s has index %d at position %d", e.sess.ID, e.index, i)
		}
	}
	var got []time.Time
	for h.Len() > 0 {
		e := heap.Pop(&h).(*entry)
		if e.index != -1 {
			t.Errorf("popped entry %s keeps index %d, want -1", e.sess.ID, e.index)
		}
		got = append(got, e.due)
	}
	if len(got) != len(all) {
		t.Fatalf("popped %d entries, want %d", len(got), len(all))
	}
	if !slices.IsSortedFunc(got, time.Time.Compare) {
		t.Error("entries did not pop in due order")
	}
}

// fleetRegistry returns a registry holding n sessions created at base+i ms
// and expiring at expires, with their secrets, without generating n CAs
// (the registry never reads a session's CA).
func fleetRegistry(t testing.TB, n int, clk *clock, expires time.Time, onEnd func(*Session, Ending)) (*Registry, []*Session, []Secrets) {
	t.Helper()
	r := NewRegistry(RegistryConfig{Now: clk.Now, OnEnd: onEnd, RetainEnded: time.Hour})
	sessions := make([]*Session, n)
	secrets := make([]Secrets, n)
	base := clk.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range n {
		id, err := newID()
		if err != nil {
			t.Fatal(err)
		}
		s := &Session{ID: id, CreatedAt: base.Add(time.Duration(i) * time.Millisecond), ExpiresAt: expires}
		sec := Secrets{ProxySecret: fmt.Sprintf("proxy-%d", i), APIToken: fmt.Sprintf("api-%d", i)}
		r.addLocked(&entry{sess: s, proxyHash: digest(sec.ProxySecret), apiHash: digest(sec.APIToken)})
		sessions[i], secrets[i] = s, sec
	}
	return r, sessions, secrets
}

// countingEnds counts OnEnd calls per session and reason.
type countingEnds struct {
	mu sync.Mutex
	n  map[string]int // id + " " + reason -> calls
}

func (c *countingEnds) onEnd(s *Session, e Ending) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[s.ID+" "+e.Reason.String()]++
}

func (c *countingEnds) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// TestTenThousandSessions checks that a registry of 10,000 sessions behaves
// as one of 1: every lookup, End, expiry notified exactly once (by
// concurrent sweeps and lookups), List in creation order, and pruning after
// RetainEnded that leaves nothing behind.
func TestTenThousandSessions(t *testing.T) {
	const n = 10000
	clk := &clock{t: time.Unix(2e9, 0)}
	ends := &countingEnds{}
	expires := clk.Now().Add(time.Hour)
	r, sessions, secrets := fleetRegistry(t, n, clk, expires, ends.onEnd)

	for i, s := range sessions {
		if got, err := r.AuthenticateProxy(s.ID, secrets[i].ProxySecret); err != nil || got != s {
			t.Fatalf("AuthenticateProxy(session %d) = %v, %v", i, got, err)
		}
		if got, err := r.AuthenticateAPI(secrets[i].APIToken); err != nil || got != s {
			t.Fatalf("AuthenticateAPI(session %d) = %v, %v", i, got, err)
		}
		if _, err := r.AuthenticateProxy(s.ID, secrets[(i+1)%n].ProxySecret); !errors.Is(err, ErrBadCredential) {
			t.Fatalf("AuthenticateProxy(session %d, another's secret) = %v, want ErrBadCredential", i, err)
		}
	}
	list := r.List()
	if len(list) != n || !slices.Equal(list, sessions) {
		t.Fatalf("List has %d sessions (in creation order: %v), want all %d in order", len(list), slices.Equal(list, sessions), n)
	}

	// End every tenth session half an hour in; the others expire.
	clk.Add(30 * time.Minute)
	for i := 0; i < n; i += 10 {
		if err := r.End(sessions[i].ID); err != nil {
			t.Fatalf("End(session %d): %v", i, err)
		}
	}
	if got := len(r.List()); got != n-n/10 {
		t.Fatalf("List after ending %d: %d sessions, want %d", n/10, got, n-n/10)
	}
	clk.Add(30 * time.Minute)
	if got := r.List(); len(got) != 0 {
		t.Fatalf("List after expiry: %d sessions, want none", len(got))
	}
	// Sweeps in small batches race lookups that observe expiry at use.
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for r.Sweep(97) > 0 {
			}
		})
		wg.Go(func() {
			for i := w; i < n; i += 4 {
				_, err := r.AuthenticateProxy(sessions[i].ID, secrets[i].ProxySecret)
				want := ErrSessionExpired
				if i%10 == 0 {
					want = ErrSessionEnded
				}
				if !errors.Is(err, want) {
					t.Errorf("session %d: %v, want %v", i, err, want)
				}
			}
		})
	}
	wg.Wait()
	got := ends.snapshot()
	if len(got) != n {
		t.Errorf("OnEnd was called for %d sessions, want %d", len(got), n)
	}
	for i, s := range sessions {
		key := s.ID + " expired"
		if i%10 == 0 {
			key = s.ID + " ended"
		}
		if got[key] != 1 {
			t.Fatalf("OnEnd(%s) called %d times, want once", key, got[key])
		}
	}
	if _, err := r.Lookup(sessions[1].ID); !errors.Is(err, ErrSessionExpired) {
		t.Errorf("Lookup within RetainEnded: %v, want ErrSessionExpired", err)
	}

	clk.Add(time.Hour)
	r.Sweep(0)
	for _, s := range sessions[:100] {
		if _, err := r.Lookup(s.ID); !errors.Is(err, ErrUnknownSession) {
			t.Fatalf("Lookup after RetainEnded: %v, want ErrUnknownSession", err)
		}
	}
	r.mu.Lock()
	left, queued, apis := len(r.byID), len(r.due), len(r.byAPI)
	r.mu.Unlock()
	if left != 0 || queued != 0 || apis != 0 {
		t.Errorf("after pruning: %d by ID, %d by token, %d queued; want none", left, apis, queued)
	}
	if again := ends.snapshot(); len(again) != n {
		t.Errorf("pruning notified again: %d sessions, want %d", len(again), n)
	}
}

// TestMassExpiryIsSpread checks that neither Create nor List notifies a
// whole fleet's expiry at once: Create handles at most createSweep due
// sessions, List none, and Sweep at most its batch.
func TestMassExpiryIsSpread(t *testing.T) {
	const n = 2000
	clk := &clock{t: time.Unix(2e9, 0)}
	ends := &countingEnds{}
	r, _, _ := fleetRegistry(t, n, clk, clk.Now().Add(time.Minute), ends.onEnd)
	clk.Add(time.Minute)
	if got := r.List(); len(got) != 0 {
		t.Fatalf("List after expiry: %d sessions", len(got))
	}
	if got := len(ends.snapshot()); got != 0 {
		t.Fatalf("List notified %d expiries, want none (left to Sweep)", got)
	}
	if _, _, err := r.Create(CreateOptions{Snapshot: specs.Compile(t, specB), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if got := len(ends.snapshot()); got != createSweep {
		t.Fatalf("Create notified %d expiries, want %d", got, createSweep)
	}
	if got := r.Sweep(500); got != 500 {
		t.Fatalf("Sweep(500) handled %d, want 500", got)
	}
	if got := len(ends.snapshot()); got != createSweep+500 {
		t.Fatalf("after Sweep(500): %d notified, want %d", got, createSweep+500)
	}
	for r.Sweep(500) > 0 {
	}
	if got := len(ends.snapshot()); got != n {
		t.Fatalf("after sweeping: %d notified, want %d", got, n)
	}
	if got := len(r.List()); got != 1 {
		t.Errorf("List = %d sessions, want the new one", got)
	}
}

// TestCreatePrunesWithoutSweep checks that without Run, Create alone still
// forgets sessions past RetainEnded, a bounded number per call.
func TestCreatePrunesWithoutSweep(t *testing.T) {
	const n = 3 * createSweep
	clk := &clock{t: time.Unix(2e9, 0)}
	r, sessions, _ := fleetRegistry(t, n, clk, clk.Now().Add(time.Minute), nil)
	snap := specs.Compile(t, specB)
	clk.Add(time.Minute + time.Hour) // expired and past retention
	// Each Create handles createSweep due entries: expired ones are first
	// re-queued for retention, which has passed, so they go in the same call.
	for range 3 {
		if _, _, err := r.Create(CreateOptions{Snapshot: snap, TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range sessions {
		if _, err := r.Lookup(s.ID); !errors.Is(err, ErrUnknownSession) {
			t.Fatalf("Lookup(%s) after 3 Creates: %v, want ErrUnknownSession", s.ID, err)
		}
	}
}

func TestRunNotifiesExpiry(t *testing.T) {
	ends := make(chan string, 4)
	r := NewRegistry(RegistryConfig{OnEnd: func(s *Session, e Ending) { ends <- s.ID + " " + e.Reason.String() }})
	s, _, err := r.Create(CreateOptions{Snapshot: specs.Compile(t, specB), TTL: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx, 10*time.Millisecond); close(done) }()
	select {
	case got := <-ends:
		if want := s.ID + " expired"; got != want {
			t.Errorf("OnEnd = %q, want %q", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not notify the expiry within 10s")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	select {
	case got := <-ends:
		t.Errorf("a second OnEnd: %q", got)
	default:
	}
}

// TestEndedForgottenAfterRetention checks that an ended session is forgotten
// RetainEnded after End even though its TTL has hours to run: End moves it
// in the heap.
func TestEndedForgottenAfterRetention(t *testing.T) {
	clk := &clock{t: time.Unix(2e9, 0)}
	r, sessions, _ := fleetRegistry(t, 100, clk, clk.Now().Add(8*time.Hour), nil)
	for _, s := range sessions[:50] {
		if err := r.End(s.ID); err != nil {
			t.Fatal(err)
		}
	}
	clk.Add(time.Hour)
	r.Sweep(0)
	for i, s := range sessions {
		_, err := r.Lookup(s.ID)
		want := error(nil)
		if i < 50 {
			want = ErrUnknownSession
		}
		if !errors.Is(err, want) {
			t.Fatalf("Lookup(session %d) an hour after ending half: %v, want %v", i, err, want)
		}
	}
}

// TestRunSpreadsMassExpiry checks that Run keeps to its time budget: with
// an OnEnd of 1 ms and a 100 ms interval it notifies one chunk per sweep
// (about 160 a second), not every expired session at once.
func TestRunSpreadsMassExpiry(t *testing.T) {
	const n = 2000
	clk := &clock{t: time.Unix(2e9, 0)}
	ends := &countingEnds{}
	slow := func(s *Session, e Ending) { time.Sleep(time.Millisecond); ends.onEnd(s, e) }
	r, _, _ := fleetRegistry(t, n, clk, clk.Now().Add(time.Minute), slow)
	clk.Add(time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx, 100*time.Millisecond); close(done) }()
	time.Sleep(time.Second)
	cancel()
	<-done
	got := len(ends.snapshot())
	if got == 0 || got > 400 {
		t.Errorf("Run notified %d of %d expiries in 1s, want some and at most 400 (one chunk of %d per 100ms sweep)", got, n, sweepChunk)
	}
}

// TestCreateIssuesNoLeaf: a session's CA issues its leaves at first use, so
// an idle session of a fleet holds none.
func TestCreateIssuesNoLeaf(t *testing.T) {
	r := NewRegistry(RegistryConfig{})
	s, _, err := r.Create(CreateOptions{Snapshot: specs.Compile(t, specA)})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CA.Stats().Issued; got != 0 {
		t.Errorf("Create issued %d leaves, want none before the first connection", got)
	}
}
