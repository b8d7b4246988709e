package state

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testSession is a valid live session with a CA key of distinctive bytes.
func testSession(id string) Session {
	now := time.Now().UTC().Truncate(time.Microsecond)
	return Session{
		ID:          id,
		ProxyDigest: sha256.Sum256([]byte("proxy " + id)),
		APIDigest:   sha256.Sum256([]byte("api " + id)),
		CACert:      []byte("cert " + id),
		CAKey:       bytes.Repeat([]byte("K3Y-"+id+"-"), 8),
		Connectors:  []string{"github"},
		CreatedAt:   now,
		ExpiresAt:   now.Add(time.Hour),
	}
}

func openHome(t *testing.T, home string) Store {
	t.Helper()
	st, err := Open(context.Background(), Config{Home: home})
	if err != nil {
		t.Fatalf("Open(home %s) = %v", home, err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestOpenSQLiteFilesArePrivate: state.db, its WAL files and state.key are
// 0600, and a session's CA key survives a reopen.
func TestOpenSQLiteFilesArePrivate(t *testing.T) {
	home := t.TempDir()
	ctx := context.Background()
	st := openHome(t, home)
	want := testSession("s1")
	if err := st.PutSession(ctx, want); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"state.db", "state.db-wal", "state.db-shm", "state.key", "state.db.lock"} {
		fi, err := os.Stat(filepath.Join(home, name))
		if err != nil {
			t.Fatalf("stat %s: %v", name, err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", name, fi.Mode().Perm())
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = openHome(t, home)
	got, err := st.Session(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.CAKey, want.CAKey) {
		t.Errorf("CA key after reopen differs")
	}
}

func TestOpenURLs(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	keyFile := filepath.Join(t.TempDir(), "k")
	if err := os.WriteFile(keyFile, bytes.Repeat([]byte{7}, KeySize), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, url, keyFile, want string
	}{
		{"postgres needs a key file", "postgres://u:hunter2@db/x", "", "pass --state-key-file with the same file on every replica"},
		{"postgres dispatches", "postgresql://u:hunter2@127.0.0.1:1/x", keyFile, "connecting to the postgres state at 127.0.0.1:1/x"},
		{"unknown scheme", "mysql://u:hunter2@db/x", "", `unknown scheme "mysql"`},
		{"relative sqlite path", "sqlite://rel/state.db", "", "not absolute"},
		{"sqlite query", "sqlite:///tmp/x.db?mode=ro", "", "no query"},
		{"no scheme", "u:hunter2@db", "", "neither"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(ctx, Config{Home: home, URL: tc.url, KeyFile: tc.keyFile})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open(%q) = %v, want an error containing %q", tc.url, err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("Open(%q) error quotes the password: %v", tc.url, err)
			}
		})
	}
	t.Run("sqlite absolute path", func(t *testing.T) {
		db := filepath.Join(t.TempDir(), "other.db")
		st, err := Open(ctx, Config{Home: home, URL: "sqlite://" + db})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if _, err := os.Stat(db); err != nil {
			t.Errorf("Open(sqlite://%s) made no file there: %v", db, err)
		}
	})
}

// TestOpenTwice: a second Open of the same home fails while the first is open.
func TestOpenTwice(t *testing.T) {
	home := t.TempDir()
	st := openHome(t, home)
	_, err := Open(context.Background(), Config{Home: home})
	if err == nil || !strings.Contains(err.Error(), "another aileron-proxy serve is using this AILERON_HOME") {
		t.Fatalf("second Open = %v, want a refusal naming the other serve", err)
	}
	st.Close()
	st2 := openHome(t, home)
	st2.Close()
}

func TestWrongAndLostKey(t *testing.T) {
	home := t.TempDir()
	ctx := context.Background()
	st := openHome(t, home)
	if err := st.PutSession(ctx, testSession("s1")); err != nil {
		t.Fatal(err)
	}
	st.Close()
	keyPath := filepath.Join(home, "state.key")
	orig, _ := os.ReadFile(keyPath)
	if err := os.WriteFile(keyPath, bytes.Repeat([]byte{1}, KeySize), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(ctx, Config{Home: home})
	if !errors.Is(err, ErrWrongKey) || !strings.Contains(err.Error(), "cannot be recovered without the key that sealed them") {
		t.Fatalf("Open with another key = %v, want ErrWrongKey", err)
	}
	if err := os.Remove(keyPath); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, Config{Home: home})
	if err == nil || !strings.Contains(err.Error(), "cannot be recovered without the key that sealed them") {
		t.Fatalf("Open without the key = %v, want a refusal", err)
	}
	if _, err := os.Stat(keyPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open without the key created a new key (%v); it must not", err)
	}
	for _, e := range []error{err} {
		if bytes.Contains([]byte(e.Error()), orig) {
			t.Errorf("error holds key bytes")
		}
	}
	if err := os.WriteFile(keyPath, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	st = openHome(t, home)
	if _, err := st.Session(ctx, "s1"); err != nil {
		t.Fatalf("with the original key back: %v", err)
	}
}
