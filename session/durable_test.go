package session

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/aileron-dev/aileron-proxy/internal/testkit/specs"
	"github.com/aileron-dev/aileron-proxy/policy"
	"github.com/aileron-dev/aileron-proxy/state"
	"github.com/aileron-dev/aileron-proxy/state/memstore"
)

// replica is one registry on a shared store, with its OnEnd calls.
type replica struct {
	*Registry
	mu   sync.Mutex
	ends []Ending
}

func newReplica(t *testing.T, st state.Store, snap *policy.Snapshot, now func() time.Time, log *zap.Logger) *replica {
	t.Helper()
	rp := &replica{}
	rp.Registry = NewRegistry(RegistryConfig{
		Now: now, Store: st, Logger: log,
		Policy: func() *policy.Snapshot { return snap },
		OnEnd: func(_ *Session, e Ending) {
			rp.mu.Lock()
			rp.ends = append(rp.ends, e)
			rp.mu.Unlock()
		},
	})
	return rp
}

func (rp *replica) endings() []Ending {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return slices.Clone(rp.ends)
}

// A restarted registry restores live and recently ended sessions from the
// store: same credentials, same CA root, the ended one refused as ended.
func TestRestoreAfterRestart(t *testing.T) {
	clk := &clock{t: time.Now()}
	snap := specs.Compile(t, specA, specB)
	st := memstore.New()
	before := newReplica(t, st, snap, clk.Now, nil)
	s, sec, err := before.Create(CreateOptions{Snapshot: snap, Agent: "claude", Project: "/p", Learn: []string{"*.learn.example"}})
	if err != nil {
		t.Fatal(err)
	}
	gone, _, err := before.Create(CreateOptions{Snapshot: snap, Connectors: []string{"github://acme/conn-b"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := before.EndWithExitCode(gone.ID, 3); err != nil {
		t.Fatal(err)
	}
	rec, err := st.Session(context.Background(), gone.ID)
	if err != nil || rec.EndedAt == nil || rec.EndReason != "ended" || rec.ExitCode == nil || *rec.ExitCode != 3 {
		t.Fatalf("stored ended session = %+v, %v; want ended with exit code 3", rec, err)
	}
	rec, err = st.Session(context.Background(), s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.ProxyDigest != digest(sec.ProxySecret) || rec.APIDigest != digest(sec.APIToken) ||
		bytes.Contains(rec.CAKey, []byte(sec.ProxySecret)) || rec.Agent != "claude" || !slices.Equal(rec.Learn, []string{"*.learn.example"}) {
		t.Fatalf("stored session lacks its digests or labels: %+v", rec)
	}

	after := newReplica(t, st, snap, clk.Now, nil)
	n, err := after.Restore(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("Restore = %d, %v; want 1 live session", n, err)
	}
	got, err := after.AuthenticateProxy(s.ID, sec.ProxySecret)
	if err != nil {
		t.Fatalf("AuthenticateProxy after restore: %v", err)
	}
	if !bytes.Equal(got.CAPEM, s.CAPEM) {
		t.Error("the restored session's CA is not the original root")
	}
	if _, err := got.CA.Leaf("x.learn.example"); err != nil {
		t.Errorf("the restored CA refuses a learn host: %v", err)
	}
	if !slices.Equal(got.Connectors, s.Connectors) || got.Agent != "claude" || !got.ExpiresAt.Equal(s.ExpiresAt) || !got.IsLearning() {
		t.Errorf("restored session = %+v, want the original's fields", got)
	}
	if _, err := after.AuthenticateAPI(sec.APIToken); err != nil {
		t.Errorf("AuthenticateAPI after restore: %v", err)
	}
	if _, err := after.AuthenticateProxy(s.ID, "wrong"); !errors.Is(err, ErrBadCredential) {
		t.Errorf("wrong secret after restore: %v, want ErrBadCredential", err)
	}
	if _, err := after.Lookup(gone.ID); !errors.Is(err, ErrSessionEnded) {
		t.Errorf("Lookup(ended) after restore = %v, want ErrSessionEnded", err)
	}
	if len(after.List()) != 1 || len(after.endings()) != 0 {
		t.Errorf("after restore: List = %d sessions, OnEnd calls %v; want 1 and none", len(after.List()), after.endings())
	}
}

// A session whose connector is no longer installed is restored with what
// remains, and the loss is logged.
func TestRestoreWithVanishedConnector(t *testing.T) {
	st := memstore.New()
	both := specs.Compile(t, specA, specB)
	before := newReplica(t, st, both, time.Now, nil)
	s, sec, err := before.Create(CreateOptions{Snapshot: both})
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	after := newReplica(t, st, specs.Compile(t, specA), time.Now, zap.New(core))
	if n, err := after.Restore(context.Background()); err != nil || n != 1 {
		t.Fatalf("Restore = %d, %v", n, err)
	}
	got, err := after.AuthenticateProxy(s.ID, sec.ProxySecret)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"github://acme/conn-a"}; !slices.Equal(got.Connectors, want) || !slices.Equal(got.Scope.FQNs(), want) {
		t.Errorf("restored connectors = %v, scope %v; want %v", got.Connectors, got.Scope.FQNs(), want)
	}
	if logs.FilterField(zap.Strings("missing", []string{"github://acme/conn-b"})).Len() != 1 {
		t.Errorf("no log line names the vanished connector; got %v", logs.All())
	}
}

// A replica that never saw a session asks the store once, then answers
// from memory; a known session never reaches the store.
func TestLookupFallsBackToStoreOnce(t *testing.T) {
	clk := &clock{t: time.Now()}
	snap := specs.Compile(t, specA)
	st := memstore.New()
	a := newReplica(t, st, snap, clk.Now, nil)
	b := newReplica(t, st.Shared(), snap, clk.Now, nil)
	s, sec, err := a.Create(CreateOptions{Snapshot: snap})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if _, err := a.AuthenticateProxy(s.ID, sec.ProxySecret); err != nil {
			t.Fatal(err)
		}
		if _, err := a.AuthenticateAPI(sec.APIToken); err != nil {
			t.Fatal(err)
		}
	}
	if n := st.Calls("Session") + st.Calls("SessionByAPIDigest"); n != 0 {
		t.Fatalf("the creating replica asked the store %d times for a session it holds", n)
	}
	for i := 0; i < 10; i++ {
		if _, err := b.AuthenticateProxy(s.ID, sec.ProxySecret); err != nil {
			t.Fatalf("replica B: AuthenticateProxy(a's session) = %v", err)
		}
	}
	if n := st.Calls("Session"); n != 1 {
		t.Errorf("replica B asked the store %d times, want once", n)
	}
	if _, err := b.AuthenticateAPI(sec.APIToken); err != nil || st.Calls("SessionByAPIDigest") != 0 {
		t.Errorf("AuthenticateAPI on B = %v after %d store queries; want the cached session", err, st.Calls("SessionByAPIDigest"))
	}

	// Unknown credentials: one query, then refused from memory until the
	// miss ages out.
	unknown := "ses_0123456789abcdef01234567"
	for i := 0; i < 50; i++ {
		if _, err := b.AuthenticateProxy(unknown, "x"); !errors.Is(err, ErrUnknownSession) {
			t.Fatalf("unknown session: %v", err)
		}
		if _, err := b.AuthenticateAPI("not-a-token"); !errors.Is(err, ErrBadCredential) {
			t.Fatalf("unknown token: %v", err)
		}
	}
	if got := [2]int{st.Calls("Session"), st.Calls("SessionByAPIDigest")}; got != [2]int{2, 1} {
		t.Errorf("50 unknown lookups made %v store queries (by ID, by digest), want [2 1]", got)
	}
	clk.Add(negativeTTL)
	_, _ = b.AuthenticateProxy(unknown, "x")
	if n := st.Calls("Session"); n != 3 {
		t.Errorf("after the miss aged out, store queries by ID = %d, want 3", n)
	}
	// A malformed ID never reaches the store.
	_, _ = b.AuthenticateProxy("not-an-id", "x")
	if n := st.Calls("Session"); n != 3 {
		t.Errorf("a malformed ID reached the store (%d queries)", n)
	}
}

// Misses beyond the table's bound are refused without a query.
func TestNegativeCacheIsBounded(t *testing.T) {
	st := memstore.New()
	clk := &clock{t: time.Now()} // still: no miss ages out during the loop
	r := newReplica(t, st, specs.Compile(t, specA), clk.Now, nil)
	for i := 0; i < maxNegative+100; i++ {
		tok := string(rune('a'+i%26)) + time.Duration(i).String()
		_, _ = r.AuthenticateAPI(tok)
	}
	if n := st.Calls("SessionByAPIDigest"); n != maxNegative {
		t.Errorf("%d unknown tokens made %d queries, want %d (the bound)", maxNegative+100, n, maxNegative)
	}
}

// A session ended through one replica is refused on another within a
// second, and only the ending replica's OnEnd is a real end.
func TestEndedElsewhereIsRefusedHere(t *testing.T) {
	snap := specs.Compile(t, specA)
	st := memstore.New()
	a := newReplica(t, st, snap, time.Now, nil)
	b := newReplica(t, st.Shared(), snap, time.Now, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.Follow(ctx)
	go b.Follow(ctx)
	time.Sleep(50 * time.Millisecond) // both watching
	s, sec, err := a.Create(CreateOptions{Snapshot: snap})
	if err != nil {
		t.Fatal(err)
	}
	// B loads it from the change, before any lookup.
	waitFor(t, time.Second, func() bool { b.Registry.mu.Lock(); defer b.Registry.mu.Unlock(); _, ok := b.byID[s.ID]; return ok })
	if _, err := b.AuthenticateProxy(s.ID, sec.ProxySecret); err != nil {
		t.Fatal(err)
	}
	if err := b.End(s.ID); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitFor(t, time.Second, func() bool {
		_, err := a.AuthenticateProxy(s.ID, sec.ProxySecret)
		return errors.Is(err, ErrSessionEnded)
	})
	t.Logf("ended on B, refused on A after %s", time.Since(start))
	if got := a.endings(); len(got) != 1 || !got[0].Elsewhere || got[0].Reason != EndReasonEnded {
		t.Errorf("A's OnEnd calls = %+v, want one with Elsewhere", got)
	}
	if got := b.endings(); len(got) != 1 || got[0].Elsewhere {
		t.Errorf("B's OnEnd calls = %+v, want one, not Elsewhere", got)
	}
	if err := a.End(s.ID); !errors.Is(err, ErrSessionEnded) {
		t.Errorf("End on A after B ended it = %v, want ErrSessionEnded", err)
	}
}

// Without the store, nothing is created: a session that would not survive
// a restart is refused.
func TestCreateFailsWhenTheStoreDoes(t *testing.T) {
	st := memstore.New()
	snap := specs.Compile(t, specA)
	r := newReplica(t, st, snap, time.Now, nil)
	st.FailWrites(errors.New("disk full"))
	_, sec, err := r.Create(CreateOptions{Snapshot: snap})
	if err == nil || sec.APIToken != "" {
		t.Fatalf("Create with a failing store = %v, want an error and no secrets", err)
	}
	if len(r.List()) != 0 {
		t.Error("a session whose store write failed is listed")
	}
}

// An expiry noticed at use is written through in the background.
func TestExpiryIsWrittenThrough(t *testing.T) {
	clk := &clock{t: time.Now()}
	st := memstore.New()
	snap := specs.Compile(t, specA)
	r := newReplica(t, st, snap, clk.Now, nil)
	s, _, err := r.Create(CreateOptions{Snapshot: snap, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Minute)
	if _, err := r.Lookup(s.ID); !errors.Is(err, ErrSessionExpired) {
		t.Fatalf("Lookup = %v, want ErrSessionExpired", err)
	}
	waitFor(t, time.Second, func() bool {
		rec, err := st.Session(context.Background(), s.ID)
		return err == nil && rec.EndedAt != nil && rec.EndReason == "expired"
	})
	// A restart within RetainEnded refuses it as expired, without a
	// second session.ended.
	after := newReplica(t, st, snap, clk.Now, nil)
	if n, err := after.Restore(context.Background()); err != nil || n != 0 {
		t.Fatalf("Restore = %d, %v; want 0 live", n, err)
	}
	if _, err := after.Lookup(s.ID); !errors.Is(err, ErrSessionExpired) || len(after.endings()) != 0 {
		t.Errorf("Lookup after restore = %v (OnEnd %v), want ErrSessionExpired and no OnEnd", err, after.endings())
	}
}

func waitFor(t *testing.T, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The control API reaches the proxy as a restored session with the
// registry's internal secret; another process's internal secret is refused.
func TestInternalProxySecret(t *testing.T) {
	st := memstore.New()
	snap := specs.Compile(t, specA)
	before := newReplica(t, st, snap, time.Now, nil)
	s, _, err := before.Create(CreateOptions{Snapshot: snap})
	if err != nil {
		t.Fatal(err)
	}
	after := newReplica(t, st, snap, time.Now, nil)
	if _, err := after.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := after.AuthenticateProxy(s.ID, after.InternalProxySecret(s.ID)); err != nil {
		t.Errorf("internal secret refused: %v", err)
	}
	if _, err := after.AuthenticateProxy(s.ID, before.InternalProxySecret(s.ID)); !errors.Is(err, ErrBadCredential) {
		t.Errorf("another process's internal secret = %v, want ErrBadCredential", err)
	}
	other, _, _ := after.Create(CreateOptions{Snapshot: snap})
	if _, err := after.AuthenticateProxy(other.ID, after.InternalProxySecret(s.ID)); !errors.Is(err, ErrBadCredential) {
		t.Errorf("one session's internal secret for another = %v, want ErrBadCredential", err)
	}
}

// A watcher that fell behind gets a resync: ends it missed apply.
func TestResyncEndsMissedEnds(t *testing.T) {
	snap := specs.Compile(t, specA)
	st := memstore.New()
	a := newReplica(t, st, snap, time.Now, nil)
	b := newReplica(t, st.Shared(), snap, time.Now, nil)
	s, sec, err := a.Create(CreateOptions{Snapshot: snap})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.AuthenticateProxy(s.ID, sec.ProxySecret); err != nil {
		t.Fatal(err)
	}
	if err := a.End(s.ID); err != nil { // B is not following: it misses the change
		t.Fatal(err)
	}
	if _, err := b.AuthenticateProxy(s.ID, sec.ProxySecret); err != nil {
		t.Fatalf("before the resync B still holds the session live: %v", err)
	}
	b.apply(state.Change{Kind: state.ChangeResync})
	if _, err := b.AuthenticateProxy(s.ID, sec.ProxySecret); !errors.Is(err, ErrSessionEnded) {
		t.Errorf("after the resync = %v, want ErrSessionEnded", err)
	}
	if e := b.endings(); len(e) != 1 || !e[0].Elsewhere {
		t.Errorf("B's OnEnd = %+v", e)
	}
}
