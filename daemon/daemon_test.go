package daemon

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/policy"
)

// TestChangeBetweenNewAndRunIsLoaded installs a connector after New has
// loaded the (empty) store but before Run starts the watchers: the watcher
// must compare against what New loaded, not against the state at Run.
func TestChangeBetweenNewAndRunIsLoaded(t *testing.T) {
	home := t.TempDir()
	d, err := New(Config{Home: home, ProxyListen: "127.0.0.1:0", APIListen: "127.0.0.1:0", ReloadInterval: 20 * time.Millisecond}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(d.snapshot.Load().Connectors()); n != 0 {
		t.Fatalf("fresh home has %d connectors", n)
	}
	store, err := policy.OpenStore(home)
	if err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(t.TempDir(), policy.SpecFileName)
	raw, err := os.ReadFile("../configs/connectors/demo.aileron.connector.v1.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spec, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Install(spec, policy.InstallOptions{}); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for len(d.snapshot.Load().Connectors()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the connector installed between New and Run was never loaded")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
