package state

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// populated makes a home whose state.db holds n sessions, closed cleanly.
func populated(t *testing.T, n int) string {
	t.Helper()
	home := t.TempDir()
	st := openHome(t, home)
	for i := range n {
		if err := st.PutSession(context.Background(), testSession(fmt.Sprintf("s%03d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return home
}

// rawExec runs SQL on a database file outside the store.
func rawExec(t *testing.T, path, stmt string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// refusedUntouched opens home, wants an error containing every want, and
// checks state.db is byte for byte what it was.
func refusedUntouched(t *testing.T, home string, want ...string) {
	t.Helper()
	path := filepath.Join(home, "state.db")
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var existed []string
	for _, name := range []string{"state.db-wal", "state.db-shm", "state.key"} {
		if _, err := os.Stat(filepath.Join(home, name)); err == nil {
			existed = append(existed, name)
		}
	}
	st, err := Open(context.Background(), Config{Home: home})
	if err == nil {
		st.Close()
		t.Fatalf("Open(%s) succeeded, want a refusal", home)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Open(%s) = %v\nwant it to say %q", home, err, w)
		}
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Errorf("Open(%s) changed state.db although it refused it", home)
	}
	for _, name := range []string{"state.db-wal", "state.db-shm", "state.key"} {
		if _, err := os.Stat(filepath.Join(home, name)); !slices.Contains(existed, name) && err == nil {
			t.Errorf("Open(%s) left %s behind although it refused the database", home, name)
		}
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	home := populated(t, 3)
	path := filepath.Join(home, "state.db")
	rawExec(t, path, `UPDATE meta SET value = CAST('99' AS BLOB) WHERE name = 'schema_version'`)
	refusedUntouched(t, home, path, "schema version 99", fmt.Sprintf("up to %d", sqliteVersion()), "upgrade aileron-proxy")
}

func TestNotSQLiteRefused(t *testing.T) {
	home := t.TempDir()
	path := filepath.Join(home, "state.db")
	if err := os.WriteFile(path, []byte("this is not a database, it is a note\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	refusedUntouched(t, home, path, "is not an SQLite database", "left untouched")
}

func TestDamagedPageRefused(t *testing.T) {
	home := populated(t, 200)
	path := filepath.Join(home, "state.db")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pageSize := int(data[16])<<8 | int(data[17])
	if len(data) < 4*pageSize {
		t.Fatalf("state.db is %d bytes, want several pages of %d", len(data), pageSize)
	}
	// Scribble over the middle of the third page (a b-tree page of the
	// sessions table or an index).
	for i := 2*pageSize + 8; i < 3*pageSize-8; i++ {
		data[i] = 0xa5
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	refusedUntouched(t, home, path, "is damaged", "left untouched")
}

// TestCrashRecovery: a copy of a live store's files (as a SIGKILL leaves
// them: committed data still in the WAL) opens with every session.
func TestCrashRecovery(t *testing.T) {
	home := t.TempDir()
	st := openHome(t, home)
	ctx := context.Background()
	for i := range 5 {
		if err := st.PutSession(ctx, testSession(fmt.Sprintf("s%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	crashed := t.TempDir()
	for _, name := range []string{"state.db", "state.db-wal", "state.key"} {
		data, err := os.ReadFile(filepath.Join(home, name))
		if err != nil {
			t.Fatal(err)
		}
		if name == "state.db-wal" && len(data) == 0 {
			t.Fatal("the WAL is empty: the test would not exercise recovery")
		}
		if err := os.WriteFile(filepath.Join(crashed, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	st2 := openHome(t, crashed)
	got, err := st2.Sessions(ctx, testSession("x").CreatedAt, testSession("x").CreatedAt)
	if err != nil || len(got) != 5 {
		t.Fatalf("after recovery Sessions = %d sessions, %v; want 5", len(got), err)
	}
}

// TestMigrationsRecordVersion: a new database is at the newest version and
// a reopen runs nothing.
func TestMigrationsRecordVersion(t *testing.T) {
	home := populated(t, 1)
	pc, err := checkSQLiteFile(context.Background(), filepath.Join(home, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	if pc.version != sqliteVersion() || pc.keyCheck == nil {
		t.Errorf("after Open: version %d (want %d), key check set %v", pc.version, sqliteVersion(), pc.keyCheck != nil)
	}
}
