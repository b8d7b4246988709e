package daemon

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/actions"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// TestActionsReloadWhileServing installs a connector and an action while
// the daemon runs, then removes the action: the runnable set follows each
// change within a few reload intervals.
func TestActionsReloadWhileServing(t *testing.T) {
	home := t.TempDir()
	d, err := New(Config{Home: home, ProxyListen: "127.0.0.1:0", APIListen: "127.0.0.1:0", ReloadInterval: 20 * time.Millisecond}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(t.Context()) }()
	t.Cleanup(func() {
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not seen by the running daemon within 5s", what)
			}
		}
	}

	cstore, _ := policy.OpenStore(home)
	if _, err := cstore.Install("../configs/connectors/demo.aileron.connector.v1.json", policy.InstallOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("connector install", func() bool { return len(d.snapshot.Load().Connectors()) == 1 })

	manifest := filepath.Join(t.TempDir(), actions.FileName)
	doc := "+++\nname = \"find\"\n[[execute]]\nconnector = \"local://aileron/demo\"\nop = \"items.list\"\n+++\n"
	if err := os.WriteFile(manifest, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	astore, _ := actions.OpenStore(home)
	conns, _ := cstore.Load()
	if _, _, err := astore.Install(manifest, conns.Active); err != nil {
		t.Fatal(err)
	}
	waitFor("action install", func() bool { _, ok := d.activeActions()["find"]; return ok })

	if _, err := astore.Remove("find"); err != nil {
		t.Fatal(err)
	}
	waitFor("action removal", func() bool { _, ok := d.activeActions()["find"]; return !ok })
}
