package state_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/state"
	"github.com/aileron-dev/aileron-proxy/state/statetest"
)

func openSQLite(t *testing.T) state.Store {
	t.Helper()
	st, err := state.Open(context.Background(), state.Config{Home: t.TempDir()})
	if err != nil {
		t.Fatalf("Open = %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestSQLiteConformance(t *testing.T) {
	statetest.Run(t, openSQLite)
}

// TestSQLiteSealsCAKeys reads state.db and its WAL as bytes: no CA key
// appears in plaintext (nor any 16-byte piece of one), and the store
// reads every key back.
func TestSQLiteSealsCAKeys(t *testing.T) {
	home := t.TempDir()
	ctx := context.Background()
	st, err := state.Open(ctx, state.Config{Home: home})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var keys [][]byte
	for i := range 20 {
		s := statetest.NewSession(fmt.Sprintf("sealed-%02d", i))
		keys = append(keys, s.CAKey)
		if err := st.PutSession(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string) {
		t.Helper()
		for _, name := range []string{"state.db", "state.db-wal"} {
			raw, err := os.ReadFile(filepath.Join(home, name))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				if bytes.Contains(raw, k[:16]) {
					t.Errorf("%s: %s holds CA key bytes in plaintext", when, name)
				}
			}
		}
	}
	check("while open")
	for i, k := range keys {
		got, err := st.Session(ctx, fmt.Sprintf("sealed-%02d", i))
		if err != nil || !bytes.Equal(got.CAKey, k) {
			t.Errorf("Session(sealed-%02d) CA key does not read back: %v", i, err)
		}
	}
	st.Close()
	check("after Close")
}

// TestSQLiteSealedKeyBoundToItsRow: a sealed CA key copied into another
// session's row does not open (the session ID is the additional data).
func TestSQLiteSealedKeyBoundToItsRow(t *testing.T) {
	home := t.TempDir()
	ctx := context.Background()
	st, err := state.Open(ctx, state.Config{Home: home})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"victim", "attacker"} {
		if err := st.PutSession(ctx, statetest.NewSession(id)); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	db, err := sql.Open("sqlite", filepath.Join(home, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE sessions SET ca_key_sealed = (SELECT ca_key_sealed FROM sessions WHERE id = 'victim') WHERE id = 'attacker'`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	st, err = state.Open(ctx, state.Config{Home: home})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, err = st.Session(ctx, "attacker")
	if !errors.Is(err, state.ErrWrongKey) {
		t.Fatalf("Session(attacker) with victim's sealed key = %v, want ErrWrongKey", err)
	}
	if bytes.Contains([]byte(err.Error()), statetest.CAKeyOf("victim")[:16]) {
		t.Errorf("the error holds key bytes: %v", err)
	}
	if _, err := st.Session(ctx, "victim"); err != nil {
		t.Errorf("Session(victim) = %v", err)
	}
}

// TestSQLitePutSessionLatency measures session creation through the store
// (a committed, fsynced transaction each). The bound is far above what it
// takes on a quiet machine, so only a real regression trips it.
func TestSQLitePutSessionLatency(t *testing.T) {
	st := openSQLite(t)
	ctx := context.Background()
	const n = 200
	d := make([]time.Duration, n)
	for i := range n {
		s := statetest.NewSession(fmt.Sprintf("lat-%03d", i))
		start := time.Now()
		if err := st.PutSession(ctx, s); err != nil {
			t.Fatal(err)
		}
		d[i] = time.Since(start)
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	p50, p99 := d[n/2], d[n*99/100]
	t.Logf("PutSession over %d sessions: p50 %v, p99 %v, max %v", n, p50, p99, d[n-1])
	if p50 > 25*time.Millisecond {
		t.Errorf("PutSession p50 = %v, want well under 25ms", p50)
	}
}

func BenchmarkSQLitePutSession(b *testing.B) {
	st, err := state.Open(context.Background(), state.Config{Home: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		if err := st.PutSession(ctx, statetest.NewSession(fmt.Sprintf("b-%d", i))); err != nil {
			b.Fatal(err)
		}
	}
}
