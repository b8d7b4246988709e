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

func pgxPool(dsn string) (*pgxpool.Pool, error) { return pgxpool.New(context.Background(), dsn) }
