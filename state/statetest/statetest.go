// Package statetest is the conformance suite every state.Store backend
// passes: the semantics state.go documents, checked through the Store
// interface only, so the embedded SQLite store and the shared Postgres
// store are held to the same behaviour.
package statetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/state"
)

// Open returns a new, empty store for one test and arranges its Close
// (t.Cleanup). Each call must give a store that shares nothing with the
// stores of earlier calls.
type Open func(t *testing.T) state.Store

// Run runs every conformance test against the stores open makes.
func Run(t *testing.T, open Open) {
	tests := []struct {
		name string
		fn   func(*testing.T, state.Store)
	}{
		{"SessionRoundTrip", testSessionRoundTrip},
		{"SessionConflicts", testSessionConflicts},
		{"SessionInvalid", testSessionInvalid},
		{"EndSession", testEndSession},
		{"SessionsWindow", testSessionsWindow},
		{"PruneSessionsCascades", testPrune},
		{"ApprovalLifecycle", testApprovalLifecycle},
		{"ApprovalsList", testApprovalsList},
		{"AbandonApprovals", testAbandon},
		{"AbandonStaleApprovals", testAbandonStale},
		{"AbandonStaleApprovalsRace", testAbandonStaleRace},
		{"ApprovalInvalid", testApprovalInvalid},
		{"Grants", testGrants},
		{"Sandboxes", testSandboxes},
		{"Watch", testWatch},
		{"WatchSlowSubscriber", testWatchSlow},
		{"ConcurrentDecide", testConcurrentDecide},
		{"ConcurrentWrites", testConcurrentWrites},
		{"Closed", testClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, open(t))
		})
	}
}

// base is a time with microsecond precision in UTC, as stores keep them.
func base() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// CAKeyOf is the CA key NewSession gives session id: distinctive bytes a
// backend's own test can search its raw storage for.
func CAKeyOf(id string) []byte {
	return bytes.Repeat([]byte("PLAINTEXT-CA-KEY:"+id+";"), 6)
}

// NewSession returns a valid live session created now, expiring in an hour.
func NewSession(id string) state.Session {
	now := base()
	return state.Session{
		ID:              id,
		ProxyDigest:     sha256.Sum256([]byte("proxy secret of " + id)),
		APIDigest:       sha256.Sum256([]byte("api token of " + id)),
		CACert:          []byte("DER certificate of " + id),
		CAKey:           CAKeyOf(id),
		Connectors:      []string{"github", "stripe"},
		Hosts:           []string{"api.example.com"},
		Agent:           "claude",
		Project:         "/src/project",
		ApprovalSurface: "console",
		CreatedAt:       now,
		ExpiresAt:       now.Add(time.Hour),
	}
}

func newApproval(id, session, replica string) state.Approval {
	return state.Approval{ID: id, SessionID: session, Replica: replica, View: []byte(`{"op":"` + id + `"}`), CreatedAt: base()}
}

func newSandbox(id, session string) state.Sandbox {
	now := base()
	return state.Sandbox{ID: id, SessionID: session, TokenDigest: sha256.Sum256([]byte("sandbox token " + id)),
		Replica: "r1", Spec: []byte(`{"container":"` + id + `"}`), CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
}

func mustPut(t *testing.T, st state.Store, s state.Session) {
	t.Helper()
	if err := st.PutSession(context.Background(), s); err != nil {
		t.Fatalf("PutSession(%q) = %v", s.ID, err)
	}
}

// same reports whether two records are equal, comparing times as instants.
func same(a, b any) bool { return reflect.DeepEqual(normTimes(a), normTimes(b)) }

// normTimes returns a copy of a record with every time in UTC.
func normTimes(v any) any {
	n := func(t time.Time) time.Time { return time.UnixMicro(t.UnixMicro()).UTC() }
	np := func(t *time.Time) *time.Time {
		if t == nil {
			return nil
		}
		u := n(*t)
		return &u
	}
	switch r := v.(type) {
	case state.Session:
		r.CreatedAt, r.ExpiresAt, r.EndedAt = n(r.CreatedAt), n(r.ExpiresAt), np(r.EndedAt)
		return r
	case state.Approval:
		r.CreatedAt, r.DecidedAt = n(r.CreatedAt), np(r.DecidedAt)
		return r
	case state.Grant:
		r.CreatedAt = n(r.CreatedAt)
		return r
	case state.Sandbox:
		r.CreatedAt, r.ExpiresAt, r.GoneAt = n(r.CreatedAt), n(r.ExpiresAt), np(r.GoneAt)
		return r
	}
	return v
}

func ids[T any](rs []T, id func(T) string) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, id(r))
	}
	return out
}

func sessionIDs(ss []state.Session) []string {
	return ids(ss, func(s state.Session) string { return s.ID })
}
func approvalIDs(as []state.Approval) []string {
	return ids(as, func(a state.Approval) string { return a.ID })
}

func testSessionRoundTrip(t *testing.T, st state.Store) {
	ctx := context.Background()
	want := NewSession("s-full")
	want.Learn = []string{"learn.example.com"}
	mustPut(t, st, want)
	got, err := st.Session(ctx, want.ID)
	if err != nil {
		t.Fatalf("Session(%q) = %v", want.ID, err)
	}
	if !same(got, want) {
		t.Errorf("Session(%q) =\n%+v\nwant\n%+v", want.ID, got, want)
	}
	if got.CreatedAt.Location() != time.UTC || got.ExpiresAt.Location() != time.UTC {
		t.Errorf("Session(%q) times are in %v, want UTC", want.ID, got.CreatedAt.Location())
	}
	byDigest, err := st.SessionByAPIDigest(ctx, want.APIDigest)
	if err != nil || !same(byDigest, want) {
		t.Errorf("SessionByAPIDigest = %+v, %v; want the session", byDigest, err)
	}

	// Empty lists and byte slices read back as nil.
	bare := NewSession("s-bare")
	bare.Connectors, bare.Hosts, bare.CACert, bare.CAKey = []string{}, nil, nil, nil
	bare.Agent, bare.Project, bare.ApprovalSurface = "", "", ""
	mustPut(t, st, bare)
	got, err = st.Session(ctx, bare.ID)
	bare.Connectors = nil
	if err != nil || !same(got, bare) {
		t.Errorf("Session(%q) = %+v, %v; want %+v", bare.ID, got, err, bare)
	}

	if _, err := st.Session(ctx, "missing"); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("Session(missing) = %v, want ErrNotFound", err)
	}
	if _, err := st.SessionByAPIDigest(ctx, sha256.Sum256([]byte("nobody"))); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("SessionByAPIDigest(unknown) = %v, want ErrNotFound", err)
	}
}

func testSessionConflicts(t *testing.T, st state.Store) {
	ctx := context.Background()
	s := NewSession("s1")
	mustPut(t, st, s)
	dup := NewSession("s1")
	dup.APIDigest = sha256.Sum256([]byte("other"))
	if err := st.PutSession(ctx, dup); !errors.Is(err, state.ErrConflict) {
		t.Errorf("PutSession(duplicate ID) = %v, want ErrConflict", err)
	}
	sameToken := NewSession("s2")
	sameToken.APIDigest = s.APIDigest
	if err := st.PutSession(ctx, sameToken); !errors.Is(err, state.ErrConflict) {
		t.Errorf("PutSession(duplicate API digest) = %v, want ErrConflict", err)
	}
	if _, err := st.Session(ctx, "s2"); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("a refused PutSession stored the session: Session(s2) = %v", err)
	}
	got, err := st.Session(ctx, "s1")
	if err != nil || !same(got, s) {
		t.Errorf("after a refused duplicate, Session(s1) = %+v, %v; want the first one", got, err)
	}
}

func testSessionInvalid(t *testing.T, st state.Store) {
	ctx := context.Background()
	ended := base()
	for _, tc := range []struct {
		name string
		edit func(*state.Session)
	}{
		{"empty ID", func(s *state.Session) { s.ID = "" }},
		{"ID with a space", func(s *state.Session) { s.ID = "a b" }},
		{"ID with a newline", func(s *state.Session) { s.ID = "a\nb" }},
		{"overlong ID", func(s *state.Session) { s.ID = string(bytes.Repeat([]byte("x"), 1000)) }},
		{"no created_at", func(s *state.Session) { s.CreatedAt = time.Time{} }},
		{"no expires_at", func(s *state.Session) { s.ExpiresAt = time.Time{} }},
		{"no API digest", func(s *state.Session) { s.APIDigest = [32]byte{} }},
		{"already ended", func(s *state.Session) { s.EndedAt = &ended }},
	} {
		s := NewSession("s-invalid")
		tc.edit(&s)
		err := st.PutSession(ctx, s)
		if !errors.Is(err, state.ErrInvalid) {
			t.Errorf("PutSession(%s) = %v, want ErrInvalid", tc.name, err)
		}
	}
	if all, err := st.Sessions(ctx, base(), base().Add(-time.Hour)); err != nil || len(all) != 0 {
		t.Errorf("after refused writes Sessions = %v, %v; want none", sessionIDs(all), err)
	}
}

func testEndSession(t *testing.T, st state.Store) {
	ctx := context.Background()
	mustPut(t, st, NewSession("s1"))
	mustPut(t, st, NewSession("s2"))
	at := base().Add(time.Minute)
	code := 3
	if err := st.EndSession(ctx, "s1", at, "ended", &code); err != nil {
		t.Fatalf("EndSession(s1) = %v", err)
	}
	got, err := st.Session(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if got.EndedAt == nil || !got.EndedAt.Equal(at) || got.EndReason != "ended" || got.ExitCode == nil || *got.ExitCode != 3 {
		t.Errorf("after EndSession: EndedAt %v, EndReason %q, ExitCode %v; want %v, ended, 3", got.EndedAt, got.EndReason, got.ExitCode, at)
	}
	if got.CAKey == nil || !bytes.Equal(got.CAKey, CAKeyOf("s1")) {
		t.Errorf("after EndSession the CA key no longer reads back")
	}
	if err := st.EndSession(ctx, "s1", at.Add(time.Second), "expired", nil); !errors.Is(err, state.ErrConflict) {
		t.Errorf("EndSession(s1) twice = %v, want ErrConflict", err)
	}
	if got2, _ := st.Session(ctx, "s1"); got2.EndReason != "ended" {
		t.Errorf("a refused second EndSession changed the reason to %q", got2.EndReason)
	}
	if err := st.EndSession(ctx, "nope", at, "ended", nil); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("EndSession(unknown) = %v, want ErrNotFound", err)
	}
	if err := st.EndSession(ctx, "s2", at, "", nil); !errors.Is(err, state.ErrInvalid) {
		t.Errorf("EndSession(no reason) = %v, want ErrInvalid", err)
	}
	if err := st.EndSession(ctx, "s2", time.Time{}, "ended", nil); !errors.Is(err, state.ErrInvalid) {
		t.Errorf("EndSession(no time) = %v, want ErrInvalid", err)
	}
	if err := st.EndSession(ctx, "s2", at, "expired", nil); err != nil {
		t.Errorf("EndSession(s2, expired) = %v", err)
	}
	if got, _ := st.Session(ctx, "s2"); got.ExitCode != nil || got.EndReason != "expired" {
		t.Errorf("EndSession(s2, expired, nil) stored exit code %v reason %q", got.ExitCode, got.EndReason)
	}
}

func testSessionsWindow(t *testing.T, st state.Store) {
	ctx := context.Background()
	now := base()
	since := now.Add(-10 * time.Minute)
	mk := func(id string, expires time.Duration) state.Session {
		s := NewSession(id)
		s.CreatedAt = now.Add(-time.Hour)
		s.ExpiresAt = now.Add(expires)
		return s
	}
	for _, s := range []state.Session{
		mk("live", time.Hour),
		mk("expired-recently", -5*time.Minute),
		mk("expired-long-ago", -30*time.Minute),
		mk("ended-recently", time.Hour),
		mk("ended-long-ago", time.Hour),
	} {
		mustPut(t, st, s)
	}
	if err := st.EndSession(ctx, "ended-recently", now.Add(-time.Minute), "ended", nil); err != nil {
		t.Fatal(err)
	}
	if err := st.EndSession(ctx, "ended-long-ago", now.Add(-time.Hour), "ended", nil); err != nil {
		t.Fatal(err)
	}
	got, err := st.Sessions(ctx, now, since)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ended-recently", "expired-recently", "live"} // same CreatedAt: by ID
	if !reflect.DeepEqual(sessionIDs(got), want) {
		t.Errorf("Sessions(now, now-10m) = %v, want %v", sessionIDs(got), want)
	}
	got, err = st.Sessions(ctx, now, now)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(sessionIDs(got), []string{"live"}) {
		t.Errorf("Sessions(now, now) = %v, want [live]", sessionIDs(got))
	}
}

func testPrune(t *testing.T, st state.Store) {
	ctx := context.Background()
	now := base()
	old := NewSession("old")
	old.ExpiresAt = now.Add(-2 * time.Hour)
	old.CreatedAt = now.Add(-3 * time.Hour)
	mustPut(t, st, old)
	mustPut(t, st, NewSession("ended"))
	mustPut(t, st, NewSession("live"))
	for _, sid := range []string{"old", "ended", "live"} {
		if err := st.PutApproval(ctx, newApproval("a-"+sid, sid, "r1")); err != nil {
			t.Fatal(err)
		}
		if err := st.PutGrant(ctx, state.Grant{SessionID: sid, Connector: "github", Tool: "t", Operation: "op", Decision: "approve", CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
		if err := st.PutSandbox(ctx, newSandbox("sb-"+sid, sid)); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.EndSession(ctx, "ended", now.Add(-2*time.Hour), "ended", nil); err != nil {
		t.Fatal(err)
	}
	n, err := st.PruneSessions(ctx, now.Add(-time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("PruneSessions = %d, %v; want 2", n, err)
	}
	for _, sid := range []string{"old", "ended"} {
		if _, err := st.Session(ctx, sid); !errors.Is(err, state.ErrNotFound) {
			t.Errorf("after pruning, Session(%q) = %v, want ErrNotFound", sid, err)
		}
		if _, err := st.Approval(ctx, "a-"+sid); !errors.Is(err, state.ErrNotFound) {
			t.Errorf("after pruning, Approval(a-%s) = %v, want ErrNotFound (cascade)", sid, err)
		}
	}
	if _, err := st.Approval(ctx, "a-live"); err != nil {
		t.Errorf("pruning removed a live session's approval: %v", err)
	}
	sbs, err := st.Sandboxes(ctx)
	if err != nil || !reflect.DeepEqual(ids(sbs, func(s state.Sandbox) string { return s.ID }), []string{"sb-live"}) {
		t.Errorf("after pruning Sandboxes = %v, %v; want [sb-live]", ids(sbs, func(s state.Sandbox) string { return s.ID }), err)
	}
	// Grants lists live sessions' grants anyway; re-creating a pruned
	// session must not resurrect its grant.
	mustPut(t, st, NewSession("ended"))
	gs, err := st.Grants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(gs, func(g state.Grant) string { return g.SessionID }); !reflect.DeepEqual(got, []string{"live"}) {
		t.Errorf("after pruning and re-creating a session, Grants = %v, want [live] (cascade)", got)
	}
	if n, err := st.PruneSessions(ctx, now.Add(-time.Hour)); err != nil || n != 0 {
		t.Errorf("PruneSessions again = %d, %v; want 0", n, err)
	}
}
