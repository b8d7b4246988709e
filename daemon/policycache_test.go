package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/internal/testkit/specs"
	"github.com/aileron-dev/aileron-proxy/policy"
	"github.com/aileron-dev/aileron-proxy/session"
)

// TestPolicyBuiltOncePerConnectorVersion installs a 1,000-operation
// connector and checks that the sessions of the daemon share one compiled
// form of it: two sessions match a request to the same compiled operation,
// a reload caused by installing another connector keeps it, and installing
// a new version of the big connector builds a new one.
func TestPolicyBuiltOncePerConnectorVersion(t *testing.T) {
	home := t.TempDir()
	d, err := New(Config{Home: home, ProxyListen: "127.0.0.1:0", APIListen: "127.0.0.1:0", ReloadInterval: time.Hour}, zap.NewNop())
	if err != nil {
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
	store, err := policy.OpenStore(home)
	if err != nil {
		t.Fatal(err)
	}
	const big = "local://bench/big"
	install := func(doc []byte) {
		t.Helper()
		path := filepath.Join(t.TempDir(), policy.SpecFileName)
		if err := os.WriteFile(path, doc, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Install(path, policy.InstallOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := d.reloadPolicy(); err != nil {
			t.Fatal(err)
		}
	}
	req := policy.Request{Method: "GET", Host: "api.big.example:443", Path: "/repos/octo/hello/issues/7"}
	matched := func(s *session.Session) *policy.CompiledOperation {
		t.Helper()
		dec := d.snapshot.Load().Decide(s.Scope, req)
		if !dec.Allow {
			t.Fatalf("session %s: Decide(%q) = %v %s, want allow", s.ID, req, dec.Reason, dec.Message)
		}
		return dec.Match.Compiled
	}
	newSession := func() *session.Session {
		t.Helper()
		s, _, err := d.sessions.Create(session.CreateOptions{Connectors: []string{big}, Snapshot: d.snapshot.Load()})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	install(specs.Synthetic(big, "big", "api.big.example", 1000))
	builds := d.compiler.Builds()
	s1, s2 := newSession(), newSession()
	first := matched(s1)
	if got := matched(s2); got != first {
		t.Fatalf("two sessions matched %q to different compiled operations (%p, %p); want one shared", req, first, got)
	}

	install(specs.Synthetic("local://bench/small", "small", "api.small.example", 5))
	if got := d.compiler.Builds() - builds; got != 1 {
		t.Fatalf("installing a second connector built %d connectors; want 1 (the unchanged one reused)", got)
	}
	if s3 := newSession(); matched(s1) != first || matched(s3) != first {
		t.Fatal("a reload for another connector rebuilt the unchanged 1,000-operation connector")
	}

	v2 := strings.Replace(string(specs.Synthetic(big, "big", "api.big.example", 1000)), `"version": "1.0.0"`, `"version": "1.1.0"`, 1)
	install([]byte(v2))
	s4 := newSession()
	if got := matched(s4); got == first || got.Operation() == first.Operation() {
		t.Fatal("installing version 1.1.0 of the big connector reused the compiled 1.0.0")
	}
	if c, _ := d.snapshot.Load().Connector(big); c.Spec.Connector.Version != "1.1.0" {
		t.Fatalf("active version %q after installing 1.1.0", c.Spec.Connector.Version)
	}
	if matched(s1) != matched(s4) {
		t.Fatal("sessions created before and after the new version do not share its compiled form")
	}
}
