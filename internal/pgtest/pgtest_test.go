package pgtest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestDB checks that each test gets its own database on a server that
// speaks SQL, as a user that is not root, and that a dropped database is
// gone at cleanup.
func TestDB(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var names []string
	for _, sub := range []string{"a", "b"} {
		t.Run(sub, func(t *testing.T) {
			dsn := pgtest.DB(t)
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			var db, version string
			if err := conn.QueryRow(ctx, "SELECT current_database(), current_setting('server_version_num')").Scan(&db, &version); err != nil {
				t.Fatal(err)
			}
			if version[:2] != "15" {
				t.Errorf("server_version_num = %s, want PostgreSQL 15", version)
			}
			if _, err := conn.Exec(ctx, "CREATE TABLE t (x int)"); err != nil {
				t.Fatalf("creating a table in a fresh database: %v", err)
			}
			names = append(names, db)
		})
	}
	if len(names) != 2 || names[0] == names[1] {
		t.Fatalf("databases = %v, want two distinct ones", names)
	}
	// Both subtests' databases were dropped at their cleanup.
	dsn := pgtest.DB(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = ANY($1)", names).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d of the subtests' databases %v still exist after their cleanup", n, names)
	}
}

// TestServerStop checks that a server of a test's own runs as a non-root
// user, restarts, and that Stop removes its directory.
func TestServerStop(t *testing.T) {
	srv := pgtest.Own(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		srv.Stop()
		t.Fatal(err)
	}
	var dir string
	if err := conn.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&dir); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	// initdb made the data directory as the user the server runs as.
	if owner := st.Sys().(*syscall.Stat_t).Uid; owner == 0 {
		t.Errorf("the data directory %s belongs to root; the server must not run as root", dir)
	} else if owner != uint32(os.Geteuid()) && os.Geteuid() != 0 {
		t.Errorf("the data directory belongs to uid %d, want the current user's %d", owner, os.Geteuid())
	}
	if err := srv.Restart(0); err != nil {
		t.Fatal(err)
	}
	if conn, err := pgx.Connect(ctx, srv.DSN("postgres")); err != nil {
		t.Fatalf("after Restart: %v", err)
	} else {
		conn.Close(ctx)
	}
	srv.Stop()
	if _, err := os.Stat(filepath.Dir(dir)); !os.IsNotExist(err) {
		t.Errorf("after Stop, %s: %v, want it removed", filepath.Dir(dir), err)
	}
	if _, err := pgx.Connect(ctx, srv.DSN("postgres")); err == nil {
		t.Error("after Stop, the server still accepts connections")
	}
}

// TestSweepStale checks that Start removes the directory a killed test
// binary left (old, its postmaster dead) and keeps one whose server runs.
func TestSweepStale(t *testing.T) {
	pgtest.DB(t) // skips without the binaries
	old := time.Now().Add(-time.Hour)
	mk := func(pid int) string {
		d, err := os.MkdirTemp("", "pgtest-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		if err := os.MkdirAll(filepath.Join(d, "data"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "data", "postmaster.pid"), []byte(fmt.Sprintf("%d\n/x\n", pid)), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(d, old, old); err != nil {
			t.Fatal(err)
		}
		return d
	}
	done := exec.Command("true")
	if err := done.Run(); err != nil {
		t.Fatal(err)
	}
	stale, live := mk(done.Process.Pid), mk(os.Getpid())
	srv, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the stale directory %s is still there (%v)", stale, err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the directory of a live server was removed: %v", err)
	}
}
