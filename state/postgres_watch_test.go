package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/pgtest"
	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

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
	var lat []time.Duration
	for i := range 10 {
		id := fmt.Sprintf("s%d", i)
		start := time.Now()
		if err := a.PutSession(ctx, testSession(id)); err != nil {
			t.Fatal(err)
		}
		waitChange(t, wb, Change{ChangeSessionCreated, id}, time.Second)
		lat = append(lat, time.Since(start))
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
		lat = append(lat, time.Since(start))
		if err := a.EndSession(ctx, id, time.Now(), "ended", nil); !errors.Is(err, ErrConflict) {
			t.Fatalf("replica a ending a session b ended = %v, want ErrConflict", err)
		}
	}
	slices.Sort(lat)
	t.Logf("cross-replica change latency (a write's start to the other replica's Watch), of %d: median %v, worst %v", len(lat), lat[len(lat)/2], lat[len(lat)-1])
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
