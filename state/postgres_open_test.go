package state_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/pgtest"
	"github.com/aileron-dev/aileron-proxy/state"
	"github.com/jackc/pgx/v5"
)

// writeKeyFile writes a new random state key, base64 as `openssl rand
// -base64 32` prints it.
func writeKeyFile(t *testing.T) string {
	t.Helper()
	raw := make([]byte, state.KeySize)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "state.key")
	if err := os.WriteFile(p, []byte(base64.StdEncoding.EncodeToString(raw)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestOpenPostgresKeys opens a Postgres store as `serve` does: two replicas
// given the same key file share a session and its CA key; a replica given
// another key file is refused at start with ErrWrongKey, an error that
// names the key flag and not the password; no key file is refused before
// connecting.
func TestOpenPostgresKeys(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := pgtest.DB(t)
	key := writeKeyFile(t)
	open := func(replica, keyFile string) (state.Store, error) {
		st, err := state.Open(ctx, state.Config{URL: dsn, KeyFile: keyFile, Replica: replica})
		if err == nil {
			t.Cleanup(func() { st.Close() })
		}
		return st, err
	}
	a, err := open("a", key)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	caKey := bytes.Repeat([]byte("CA KEY BYTES;"), 8)
	if err := a.PutSession(ctx, state.Session{ID: "s1", APIDigest: sha256.Sum256([]byte("t")), CAKey: caKey, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	b, err := open("b", key)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.Session(ctx, "s1"); err != nil || !bytes.Equal(got.CAKey, caKey) {
		t.Fatalf("replica b reading replica a's session: %v (CA key equal: %v)", err, bytes.Equal(got.CAKey, caKey))
	}
	// Each replica's connections carry its name, for pg_stat_activity.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var names []string
	if err := conn.QueryRow(ctx, "SELECT coalesce(array_agg(DISTINCT application_name ORDER BY application_name), '{}') FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'aileron-proxy%'").Scan(&names); err != nil {
		t.Fatal(err)
	}
	if strings.Join(names, ",") != "aileron-proxy a,aileron-proxy b" {
		t.Errorf("the replicas' application names = %q, want aileron-proxy a and b", names)
	}
	_, err = open("c", writeKeyFile(t))
	if !errors.Is(err, state.ErrWrongKey) || !strings.Contains(err.Error(), "--state-key-file") {
		t.Fatalf("Open with another key file = %v, want ErrWrongKey naming --state-key-file", err)
	}
	if strings.Contains(err.Error(), pgtest.Password) {
		t.Errorf("the refusal holds the database password: %v", err)
	}
	if _, err := open("d", ""); err == nil || !strings.Contains(err.Error(), "--state-key-file") {
		t.Fatalf("Open without a key file = %v, want a refusal naming --state-key-file", err)
	}
}
