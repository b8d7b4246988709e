package state_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/pgtest"
	"github.com/aileron-dev/aileron-proxy/state"
	"github.com/aileron-dev/aileron-proxy/state/statetest"
)

// TestPostgresConformance holds the Postgres store, opened through Open as
// `serve --state postgres://...` opens it, to every backend's contract.
func TestPostgresConformance(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "state.key")
	if err := os.WriteFile(keyFile, []byte("MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	statetest.Run(t, func(t *testing.T) state.Store {
		st, err := state.Open(context.Background(), state.Config{URL: pgtest.DB(t), KeyFile: keyFile, Replica: "conformance"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	})
}
