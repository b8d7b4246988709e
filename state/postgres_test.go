package state

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/pgtest"
	"github.com/aileron-dev/aileron-proxy/internal/testkit"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// newTestKey is a random state key.
func newTestKey(t testing.TB) *Key {
	t.Helper()
	raw := make([]byte, KeySize)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	k, err := NewKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func openPG(t testing.TB, dsn string, key *Key, log *zap.Logger) *pgStore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := newPostgres(ctx, dsn, key, log, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestPostgresRecords covers each record's round trip and the conditional
// writes' semantics against the real server.
func TestPostgresRecords(t *testing.T) {
	ctx := ctxT(t)
	s := openPG(t, pgtest.DB(t), newTestKey(t), nil)
	a := testSession("s1")
	if err := s.PutSession(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSession(ctx, a); !errors.Is(err, ErrConflict) {
		t.Errorf("PutSession(duplicate) = %v, want ErrConflict", err)
	}
	got, err := s.Session(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.CAKey, a.CAKey) || got.APIDigest != a.APIDigest || !got.CreatedAt.Equal(a.CreatedAt) || got.Connectors[0] != "github" || got.EndedAt != nil {
		t.Errorf("Session(s1) = %+v, want %+v", got, a)
	}
	if got, err := s.SessionByAPIDigest(ctx, a.APIDigest); err != nil || got.ID != "s1" {
		t.Errorf("SessionByAPIDigest = %q, %v; want s1", got.ID, err)
	}
	if _, err := s.Session(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Session(unknown) = %v, want ErrNotFound", err)
	}
	code := 3
	end := time.Now().UTC().Truncate(time.Microsecond)
	if err := s.EndSession(ctx, "s1", end, "ended", &code); err != nil {
		t.Fatal(err)
	}
	if err := s.EndSession(ctx, "s1", end, "ended", nil); !errors.Is(err, ErrConflict) {
		t.Errorf("EndSession(ended) = %v, want ErrConflict", err)
	}
	if err := s.EndSession(ctx, "nope", end, "ended", nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("EndSession(unknown) = %v, want ErrNotFound", err)
	}
	got, _ = s.Session(ctx, "s1")
	if got.EndedAt == nil || !got.EndedAt.Equal(end) || got.ExitCode == nil || *got.ExitCode != 3 || got.EndReason != "ended" {
		t.Errorf("ended session = %+v", got)
	}

	b := testSession("s2")
	if err := s.PutSession(ctx, b); err != nil {
		t.Fatal(err)
	}
	live, err := s.Sessions(ctx, time.Now(), time.Now())
	if err != nil || len(live) != 1 || live[0].ID != "s2" {
		t.Errorf("Sessions(now, now) = %v, %v; want only s2", live, err)
	}
	all, _ := s.Sessions(ctx, time.Now(), end.Add(-time.Second))
	if len(all) != 2 {
		t.Errorf("Sessions(now, before the end) = %d sessions, want 2 (s1 ended after since)", len(all))
	}

	ap := Approval{ID: "a1", SessionID: "s2", Replica: "r1", View: []byte(`{"x":1}`), CreatedAt: time.Now().UTC()}
	if err := s.PutApproval(ctx, ap); err != nil {
		t.Fatal(err)
	}
	if err := s.PutApproval(ctx, Approval{ID: "a0", SessionID: "ghost", Replica: "r1", CreatedAt: time.Now()}); !errors.Is(err, ErrNotFound) {
		t.Errorf("PutApproval(unknown session) = %v, want ErrNotFound", err)
	}
	dec, err := s.DecideApproval(ctx, "a1", time.Now(), "approve", "approved", "ok", "session")
	if err != nil || dec.Outcome != "approved" || dec.DecidedAt == nil || string(dec.View) != `{"x":1}` {
		t.Errorf("DecideApproval = %+v, %v", dec, err)
	}
	if _, err := s.DecideApproval(ctx, "a1", time.Now(), "deny", "denied", "", "once"); !errors.Is(err, ErrConflict) {
		t.Errorf("DecideApproval(decided) = %v, want ErrConflict", err)
	}
	if _, err := s.DecideApproval(ctx, "nope", time.Now(), "deny", "denied", "", "once"); !errors.Is(err, ErrNotFound) {
		t.Errorf("DecideApproval(unknown) = %v, want ErrNotFound", err)
	}
	for i, r := range []string{"r1", "r2", "r1"} {
		if err := s.PutApproval(ctx, Approval{ID: fmt.Sprintf("p%d", i), SessionID: "s2", Replica: r, CreatedAt: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	list, err := s.Approvals(ctx, 10)
	if err != nil || len(list) != 4 || list[0].ID != "a1" {
		t.Errorf("Approvals(10) = %d approvals (%v), want 4, a1 first", len(list), err)
	}
	aband, err := s.AbandonApprovals(ctx, "r1", time.Now())
	if err != nil || len(aband) != 2 || aband[0].ID != "p0" || aband[1].Outcome != "abandoned" {
		t.Errorf("AbandonApprovals(r1) = %+v, %v; want p0, p2 abandoned", aband, err)
	}
	if p1, _ := s.Approval(ctx, "p1"); p1.DecidedAt != nil {
		t.Errorf("another replica's pending approval was settled: %+v", p1)
	}

	if err := s.PutGrant(ctx, Grant{SessionID: "s2", Connector: "c", Tool: "t", Operation: "o", Decision: "deny", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutGrant(ctx, Grant{SessionID: "s2", Connector: "c", Tool: "t", Operation: "o", Decision: "approve", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutGrant(ctx, Grant{SessionID: "s1", Connector: "c", Tool: "t", Operation: "o", Decision: "approve", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if gs, err := s.Grants(ctx); err != nil || len(gs) != 1 || gs[0].Decision != "approve" || gs[0].SessionID != "s2" {
		t.Errorf("Grants = %+v, %v; want s2's one replaced grant (s1 ended)", gs, err)
	}

	sb := Sandbox{ID: "b1", SessionID: "s2", TokenDigest: sha256.Sum256([]byte("tok")), Replica: "r1", Spec: []byte(`{}`), CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)}
	if err := s.PutSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	sb.Replica = "r2"
	if err := s.PutSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkSandboxGone(ctx, "b1", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkSandboxGone(ctx, "nope", time.Now()); !errors.Is(err, ErrNotFound) {
		t.Errorf("MarkSandboxGone(unknown) = %v, want ErrNotFound", err)
	}
	if sbs, err := s.Sandboxes(ctx); err != nil || len(sbs) != 1 || sbs[0].Replica != "r2" || sbs[0].GoneAt == nil || sbs[0].TokenDigest != sb.TokenDigest {
		t.Errorf("Sandboxes = %+v, %v", sbs, err)
	}

	// Pruning s2 (it expires within the hour) cascades to its approvals,
	// grants and sandbox; s1 ended earlier and goes too.
	n, err := s.PruneSessions(ctx, time.Now().Add(2*time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("PruneSessions = %d, %v; want 2", n, err)
	}
	var left int
	if err := s.pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM approvals) + (SELECT count(*) FROM grants) + (SELECT count(*) FROM sandboxes)").Scan(&left); err != nil || left != 0 {
		t.Errorf("after pruning every session, %d approvals, grants and sandboxes are left (%v)", left, err)
	}
	if err := s.DeleteSandbox(ctx, "b1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("DeleteSandbox(pruned) = %v, want ErrNotFound", err)
	}
}

// TestPostgresReplicasSeeEachOther opens two Stores on one database, as two
// replicas do, and measures how long a write on one takes to reach the
// other's Watch: every change must arrive within a second.
func TestPostgresReplicasSeeEachOther(t *testing.T) {
	ctx := ctxT(t)
	dsn := pgtest.DB(t)
	key := newTestKey(t)
	a, b := openPG(t, dsn, key, nil), openPG(t, dsn, key, nil)
	wa, err := a.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wb, err := b.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var worst time.Duration
	for i := range 10 {
		id := fmt.Sprintf("s%d", i)
		start := time.Now()
		if err := a.PutSession(ctx, testSession(id)); err != nil {
			t.Fatal(err)
		}
		waitChange(t, wb, Change{ChangeSessionCreated, id}, time.Second)
		worst = max(worst, time.Since(start))
		// The writer's own Watch sees it too.
		waitChange(t, wa, Change{ChangeSessionCreated, id}, time.Second)
		got, err := b.Session(ctx, id)
		if err != nil || !bytes.Equal(got.CAKey, testSession(id).CAKey) {
			t.Fatalf("replica b reading %s: %v", id, err)
		}
		start = time.Now()
		if err := b.EndSession(ctx, id, time.Now(), "ended", nil); err != nil {
			t.Fatal(err)
		}
		waitChange(t, wa, Change{ChangeSessionEnded, id}, time.Second)
		worst = max(worst, time.Since(start))
		if err := a.EndSession(ctx, id, time.Now(), "ended", nil); !errors.Is(err, ErrConflict) {
			t.Fatalf("replica a ending a session b ended = %v, want ErrConflict", err)
		}
	}
	t.Logf("cross-replica change latency (write to the other replica's Watch), worst of 20: %v", worst)
}

// waitChange reads w until it yields want or timeout passes.
func waitChange(t testing.TB, w <-chan Change, want Change, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case c, ok := <-w:
			if !ok {
				t.Fatalf("watch closed while waiting for %v", want)
			}
			if c == want {
				return
			}
		case <-deadline:
			t.Fatalf("change %v not delivered within %v", want, timeout)
		}
	}
}

// TestPostgresWatchWithoutNotifications checks the poll: a change whose
// notification never comes (a change row written without pg_notify) and
// changes written while the LISTEN connection is terminated still arrive
// within a second, and the listener reconnects.
func TestPostgresWatchWithoutNotifications(t *testing.T) {
	ctx := ctxT(t)
	dsn := pgtest.DB(t)
	core, logs := observer.New(zap.DebugLevel)
	key := newTestKey(t)
	a := openPG(t, dsn, key, zap.New(core))
	b := openPG(t, dsn, key, nil)
	w, err := a.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.PutSession(ctx, testSession("s0")); err != nil {
		t.Fatal(err)
	}
	waitChange(t, w, Change{ChangeSessionCreated, "s0"}, time.Second)

	// A lost notification: the row alone.
	start := time.Now()
	if _, err := b.pool.Exec(ctx, "INSERT INTO changes (kind, id) VALUES ('session.ended', 'silent')"); err != nil {
		t.Fatal(err)
	}
	waitChange(t, w, Change{ChangeSessionEnded, "silent"}, time.Second)
	t.Logf("a change without a notification arrived by polling after %v", time.Since(start))

	// A broken LISTEN: terminate the listener's backend, then write at once.
	pid := listenerPID(t, b, 0)
	var ok bool
	if err := b.pool.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminating the listener (pid %d): %v, %v", pid, ok, err)
	}
	start = time.Now()
	if err := b.PutSession(ctx, testSession("s1")); err != nil {
		t.Fatal(err)
	}
	waitChange(t, w, Change{ChangeSessionCreated, "s1"}, time.Second)
	t.Logf("a change written as the listener died arrived after %v", time.Since(start))

	// The listener comes back, on a new backend, and notifications flow again.
	listenerPID(t, b, pid)
	start = time.Now()
	if err := b.PutSession(ctx, testSession("s2")); err != nil {
		t.Fatal(err)
	}
	waitChange(t, w, Change{ChangeSessionCreated, "s2"}, time.Second)
	t.Logf("after reconnecting, a change arrived after %v", time.Since(start))
	if logs.FilterMessageSnippet("listener lost").Len() == 0 {
		t.Error("the lost listener was not logged")
	}
	for _, e := range logs.All() {
		if strings.Contains(fmt.Sprint(e.Message, e.ContextMap()), pgtest.Password) {
			t.Errorf("a log line holds the database password: %s %v", e.Message, e.ContextMap())
		}
	}
}

// listenerPID waits for the store's listener backend other than not.
func listenerPID(t testing.TB, s *pgStore, not int32) int32 {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var pids []int32
		rows, err := s.pool.Query(context.Background(), "SELECT pid FROM pg_stat_activity WHERE application_name = 'aileron-proxy state listener' AND datname = current_database() AND pid <> $1", not)
		if err != nil {
			t.Fatal(err)
		}
		pids, err = pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			t.Fatal(err)
		}
		if len(pids) == 1 {
			return pids[0]
		}
	}
	t.Fatalf("no single listener backend (other than %d) within 5s", not)
	return 0
}

// TestPostgresWatchResync checks that a subscriber that stops reading does
// not block writers and gets a resync once it reads again.
func TestPostgresWatchResync(t *testing.T) {
	ctx := ctxT(t)
	s := openPG(t, pgtest.DB(t), newTestKey(t), nil)
	w, err := s.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutSession(ctx, testSession("s")); err != nil {
		t.Fatal(err)
	}
	n := watchBuffer + 20
	start := time.Now()
	for i := range n {
		if err := s.PutGrant(ctx, Grant{SessionID: "s", Connector: "c", Tool: "t", Operation: fmt.Sprint(i), Decision: "approve", CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d writes with a stalled subscriber took %v", n, time.Since(start))
	// Every change reaches the hub (their notifications included) while
	// the subscriber reads nothing.
	time.Sleep(2 * pgPollInterval)
	got := 0
	for {
		select {
		case c := <-w:
			got++
			if c.Kind == ChangeResync {
				t.Logf("resync after %d changes", got-1)
				if got > watchBuffer {
					t.Errorf("resync after %d changes; a subscriber %d behind gets it in place of what it missed", got-1, watchBuffer)
				}
				return
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no resync after %d of %d changes", got, n+1)
		}
	}
}

// TestPostgresCAKeySealed reads the CA key's column as stored: it holds
// neither the key nor any 8 bytes of it, and a store given another state
// key refuses to open the database.
func TestPostgresCAKeySealed(t *testing.T) {
	ctx := ctxT(t)
	dsn := pgtest.DB(t)
	s := openPG(t, dsn, newTestKey(t), nil)
	sess := testSession("s1")
	if err := s.PutSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var raw []byte
	if err := conn.QueryRow(ctx, "SELECT ca_key_sealed FROM sessions WHERE id = 's1'").Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if len(raw) < len(sess.CAKey) {
		t.Fatalf("stored CA key is %d bytes, shorter than the key", len(raw))
	}
	for i := 0; i+8 <= len(sess.CAKey); i++ {
		if bytes.Contains(raw, sess.CAKey[i:i+8]) {
			t.Fatalf("the stored CA key column holds bytes %d..%d of the key in plaintext", i, i+8)
		}
	}
	var dump string
	if err := conn.QueryRow(ctx, "SELECT string_agg(s::text, '') FROM sessions s").Scan(&dump); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(dump, string(sess.CAKey)) || strings.Contains(dump, fmt.Sprintf("%x", sess.CAKey)) {
		t.Fatal("the sessions table holds the CA key in plaintext")
	}
	_, err = newPostgres(ctx, dsn, newTestKey(t), nil, "")
	if !errors.Is(err, ErrWrongKey) || !strings.Contains(err.Error(), "another state key") || !strings.Contains(err.Error(), "--state-key-file") {
		t.Fatalf("opening with another key: %v, want a refusal naming the state key", err)
	}
	// Even a store that got past the check cannot open the CA key.
	other := &pgStore{pool: s.pool, key: newTestKey(t), where: s.where}
	if _, err := other.Session(ctx, "s1"); !errors.Is(err, ErrWrongKey) || !strings.Contains(err.Error(), "--state-key-file") {
		t.Fatalf("reading a session with another key: %v, want an error naming the state key", err)
	}
}

// TestPostgresNewerSchemaRefused checks that a database a newer release
// migrated is refused with a clear error and left as it was.
func TestPostgresNewerSchemaRefused(t *testing.T) {
	ctx := ctxT(t)
	dsn := pgtest.DB(t)
	key := newTestKey(t)
	s := openPG(t, dsn, key, nil)
	if err := s.PutSession(ctx, testSession("s1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, "INSERT INTO schema_version (version) VALUES ($1)", pgSchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	before := snapshotDB(t, s)
	s.Close()
	_, err := newPostgres(ctx, dsn, key, nil, "")
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("schema version %d, newer than this aileron-proxy's %d", pgSchemaVersion+1, pgSchemaVersion)) || !strings.Contains(err.Error(), "upgrade") {
		t.Fatalf("opening a newer database: %v, want a refusal naming both versions and the fix", err)
	}
	if strings.Contains(err.Error(), pgtest.Password) {
		t.Errorf("the refusal holds the password: %v", err)
	}
	s2 := openPGRaw(t, dsn)
	if after := snapshotDB(t, s2); after != before {
		t.Errorf("the refused database changed:\nbefore %s\nafter  %s", before, after)
	}
}

// TestPostgresForeignDatabaseRefused checks that a database holding other
// tables is not taken over.
func TestPostgresForeignDatabaseRefused(t *testing.T) {
	ctx := ctxT(t)
	dsn := pgtest.DB(t)
	raw := openPGRaw(t, dsn)
	if _, err := raw.pool.Exec(ctx, "CREATE TABLE invoices (id int)"); err != nil {
		t.Fatal(err)
	}
	_, err := newPostgres(ctx, dsn, newTestKey(t), nil, "")
	if err == nil || !strings.Contains(err.Error(), "no aileron-proxy schema") {
		t.Fatalf("opening a foreign database: %v, want a refusal", err)
	}
	if got := snapshotDB(t, raw); !strings.HasPrefix(got, "tables=1 ") {
		t.Errorf("the foreign database changed: %s", got)
	}
}

// openPGRaw is a pool on dsn without migrating, for looking at a database.
func openPGRaw(t testing.TB, dsn string) *pgStore {
	t.Helper()
	s := &pgStore{}
	var err error
	if s.pool, err = pgxPool(dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.pool.Close)
	return s
}

// snapshotDB summarises a database's tables and rows.
func snapshotDB(t testing.TB, s *pgStore) string {
	t.Helper()
	ctx := ctxT(t)
	var n int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	out := fmt.Sprintf("tables=%d", n)
	for _, q := range []string{"SELECT string_agg(version::text, ',' ORDER BY version) FROM schema_version", "SELECT string_agg(id || coalesce(ended_at::text, ''), ',') FROM sessions", "SELECT count(*)::text FROM changes", "SELECT md5(string_agg(value::text, '')) FROM meta"} {
		var v *string
		if err := s.pool.QueryRow(ctx, q).Scan(&v); err != nil {
			if n == 1 { // a foreign database: only its own table
				break
			}
			t.Fatal(err)
		}
		if v != nil {
			out += " " + *v
		}
	}
	return out + " "
}

// TestPostgresConcurrentStart opens several stores on a fresh database at
// once, as replicas starting together do: the advisory lock makes them
// migrate one after another, so all start and the schema is applied once.
func TestPostgresConcurrentStart(t *testing.T) {
	ctx := ctxT(t)
	dsn := pgtest.DB(t)
	key := newTestKey(t)
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			s, err := newPostgres(ctx, dsn, key, nil, "")
			errs[i] = err
			if err == nil {
				s.Close()
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: %v", i, err)
		}
	}
	raw := openPGRaw(t, dsn)
	var versions int
	if err := raw.pool.QueryRow(ctx, "SELECT count(*) FROM schema_version").Scan(&versions); err != nil || versions != pgSchemaVersion {
		t.Errorf("schema_version rows = %d (%v), want %d", versions, err, pgSchemaVersion)
	}
}

// TestPostgresErrorsHoldNoPassword connects with a canary password to a
// port nothing listens on, to the real server with the wrong password, and
// through a malformed URL: no error repeats the password.
func TestPostgresErrorsHoldNoPassword(t *testing.T) {
	ctx := ctxT(t)
	dsn := pgtest.DB(t) // skips without the server
	const canary = "Canary-Pw-7f3e9b1c"
	good := strings.Replace(dsn, pgtest.Password, canary, 1)
	if good == dsn {
		t.Fatal("the test DSN holds no password to replace")
	}
	host := strings.SplitN(strings.SplitN(dsn, "@", 2)[1], "/", 2)[0]
	for _, tc := range []struct{ name, dsn, want string }{
		{"refused", strings.Replace(good, host, testkit.DeadAddr(t), 1), "connecting to the postgres state at"},
		{"wrong password", good, "password authentication failed"},
		{"password in the query", strings.Replace(dsn, ":"+pgtest.Password+"@", "@", 1) + "&password=" + canary, "password authentication failed"},
		{"malformed", "postgres://u:" + canary + "@127.0.0.1:notaport/db", "parsing the postgres state URL"},
		{"keyword form", "host=127.0.0.1 port=1 user=u password=" + canary + " connect_timeout=x", "parsing the postgres state URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newPostgres(ctx, tc.dsn, newTestKey(t), nil, "")
			if err == nil {
				t.Fatal("newPostgres succeeded")
			}
			for e := err; e != nil; e = errors.Unwrap(e) {
				if strings.Contains(e.Error(), canary) || strings.Contains(fmt.Sprintf("%+v %#v", e, e), canary) {
					t.Errorf("the error (or one it wraps) holds the password: %v", e)
				}
			}
			// pgx's own errors keep the password in exported fields.
			var ce *pgconn.ConnectError
			var pe *pgconn.ParseConfigError
			if errors.As(err, &ce) || errors.As(err, &pe) {
				t.Errorf("the error wraps a pgx error that holds the password: %#v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestParsePgNotification(t *testing.T) {
	for _, tc := range []struct {
		in   string
		seq  int64
		c    Change
		okay bool
	}{
		{"12:session.created:s1", 12, Change{ChangeSessionCreated, "s1"}, true},
		{"3:grant.created:a:b", 3, Change{ChangeGrantCreated, "a:b"}, true},
		{"3:sandbox.changed:", 3, Change{ChangeSandboxChanged, ""}, true},
		{"x:session.created:s1", 0, Change{}, false},
		{"0:session.created:s1", 0, Change{}, false},
		{"7::s1", 0, Change{}, false},
		{"7", 0, Change{}, false},
		{"", 0, Change{}, false},
	} {
		seq, c, ok := parsePgNotification(tc.in)
		if seq != tc.seq || c != tc.c || ok != tc.okay {
			t.Errorf("parsePgNotification(%q) = %d, %v, %v; want %d, %v, %v", tc.in, seq, c, ok, tc.seq, tc.c, tc.okay)
		}
	}
}

func pgxPool(dsn string) (*pgxpool.Pool, error) { return pgxpool.New(context.Background(), dsn) }

// TestPostgresListenerIdle checks that the listener's periodic check of a
// quiet connection keeps that connection: same backend, and notifications
// still arrive faster than the poll could deliver them.
func TestPostgresListenerIdle(t *testing.T) {
	ctx := ctxT(t)
	dsn, key := pgtest.DB(t), newTestKey(t)
	s := openPG(t, dsn, key, nil)
	s.listenPing = 30 * time.Millisecond
	writer := openPG(t, dsn, key, nil) // another replica: its changes come by NOTIFY
	w, err := s.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pid := listenerPID(t, s, 0)
	time.Sleep(10 * s.listenPing)
	var fastest time.Duration = time.Hour
	for i := range 5 {
		start := time.Now()
		if err := writer.PutSession(ctx, testSession(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		waitChange(t, w, Change{ChangeSessionCreated, fmt.Sprint(i)}, time.Second)
		fastest = min(fastest, time.Since(start))
		time.Sleep(3 * s.listenPing)
	}
	if fastest >= pgPollInterval/2 {
		t.Errorf("fastest change took %v; notifications seem not to arrive (only the poll)", fastest)
	}
	if again := listenerPID(t, s, -1); again != pid {
		t.Errorf("listener backend changed from %d to %d while idle; the ping must keep the connection", pid, again)
	}
}

// FuzzParsePgNotification checks that any payload parses without a panic
// and that what parses formats back to a payload that parses the same.
func FuzzParsePgNotification(f *testing.F) {
	for _, s := range []string{"12:session.created:s1", "3:grant.created:a:b", "7::s1", "x:y:z", "", "9223372036854775807:k:", "-1:k:i", "+5:k:i"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		seq, c, ok := parsePgNotification(p)
		if !ok {
			return
		}
		if seq <= 0 || c.Kind == "" {
			t.Fatalf("parsePgNotification(%q) = %d, %v: accepted a non-positive seq or an empty kind", p, seq, c)
		}
		again := fmt.Sprintf("%d:%s:%s", seq, c.Kind, c.ID)
		seq2, c2, ok2 := parsePgNotification(again)
		if !ok2 || seq2 != seq || c2 != c {
			t.Fatalf("parsePgNotification(%q) = %d, %v; its format %q parses to %d, %v, %v", p, seq, c, again, seq2, c2, ok2)
		}
	})
}

// TestPostgresWatchOnce checks that each change reaches each watcher once,
// though it may come three ways (at commit on the writing replica, by
// NOTIFY and by polling).
func TestPostgresWatchOnce(t *testing.T) {
	ctx := ctxT(t)
	dsn, key := pgtest.DB(t), newTestKey(t)
	a, b := openPG(t, dsn, key, nil), openPG(t, dsn, key, nil)
	wa, err := a.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wb, err := b.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		if err := a.PutSession(ctx, testSession(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	for name, w := range map[string]<-chan Change{"writer": wa, "other replica": wb} {
		seen := map[Change]int{}
		quiet := time.After(3 * pgPollInterval)
	collect:
		for {
			select {
			case c := <-w:
				seen[c]++
			case <-quiet:
				break collect
			}
		}
		if len(seen) != n {
			t.Errorf("%s saw %d distinct changes, want %d", name, len(seen), n)
		}
		for c, k := range seen {
			if k != 1 {
				t.Errorf("%s saw %v %d times, want once", name, c, k)
			}
		}
	}
}

// TestPostgresServerRestart restarts the database under two replicas (a
// failover, an upgrade), down for two polls: writes work again, the
// watching replica gets a ChangeResync for what it may have missed while
// the database was away, and the changes after that arrive as before.
func TestPostgresServerRestart(t *testing.T) {
	ctx := ctxT(t)
	srv := pgtest.Own(t)
	dsn, key := srv.DSN("postgres"), newTestKey(t)
	a, b := openPG(t, dsn, key, nil), openPG(t, dsn, key, nil)
	w, err := a.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.PutSession(ctx, testSession("before")); err != nil {
		t.Fatal(err)
	}
	waitChange(t, w, Change{ChangeSessionCreated, "before"}, time.Second)
	if err := srv.Restart(2 * pgPollInterval); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	// The pool's connections died with the server: a write may fail
	// once before the pool dials again.
	for {
		err := b.PutSession(ctx, testSession("after"))
		if err == nil {
			break
		}
		if time.Since(restarted) > 5*time.Second {
			t.Fatalf("writing 5s after the database restarted: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var resync, after bool
	deadline := time.After(5 * time.Second)
	for !resync || !after {
		select {
		case c := <-w:
			resync = resync || c.Kind == ChangeResync
			after = after || c == Change{ChangeSessionCreated, "after"}
		case <-deadline:
			t.Fatalf("5s after the restart: resync %v, the new session's change %v; want both", resync, after)
		}
	}
	t.Logf("after the database restarted, the write and its change took %v", time.Since(restarted))
	if got, err := a.Session(ctx, "after"); err != nil || !bytes.Equal(got.CAKey, testSession("after").CAKey) {
		t.Errorf("replica a reading the new session: %v", err)
	}
}
