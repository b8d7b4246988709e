package integration

import (
	"crypto/rand"
	"encoding/base64"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/pgtest"
	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// replicaEnv is one serve replica of a shared Postgres store: its own home
// with the test connector and credential, its own listeners.
func replicaEnv(t *testing.T, up *upstream, name, stateURL, keyFile string) *env {
	t.Helper()
	home := t.TempDir()
	spec := filepath.Join(t.TempDir(), "echo.aileron.connector.v1.json")
	if err := os.WriteFile(spec, []byte(testSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, home, "", "connector", "install", spec)
	mustCLI(t, home, canary+"\n", "credential", "set", "local://test/echo", "--kind", "bearer", "--stdin")
	d := startServe(t, home, nil, "--resolve", "api.example.test:443="+up.addr, "--upstream-ca", up.certFile,
		"--state", stateURL, "--state-key-file", keyFile, "--replica", name)
	e := &env{home: home, up: up, d: d}
	t.Cleanup(func() { e.assertNoCanary(t) })
	return e
}

// replicasOn runs two serve replicas on the Postgres database at stateURL:
// a session created through A works through B's proxy (curl, A's proxy
// credential and CA file), an approval held on A is approved through B and
// A's request goes through, and a session ended through B is refused by
// A's proxy within a second.
func replicasOn(t *testing.T, stateURL string) {
	testkit.RequireTool(t, "curl")
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	keyFile := filepath.Join(t.TempDir(), "state.key")
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(key)), 0o600); err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t, []string{"api.example.test"}, upstreamHandler())
	a := replicaEnv(t, up, "a", stateURL, keyFile)
	b := replicaEnv(t, up, "b", stateURL, keyFile)
	a.s = createSession(t, a.home)

	// Through B's proxy with A's credential and CA.
	viaB := *b
	viaB.s = a.s
	pu, err := url.Parse(a.s.ProxyURL)
	if err != nil {
		t.Fatal(err)
	}
	pu.Host = b.d.ProxyAddr
	viaB.s.ProxyURL = pu.String()
	before := len(up.requests())
	if body, code := viaB.curl(t, "https://api.example.test/v1/items"); code != 200 {
		t.Fatalf("curl through B's proxy with A's session = %d %s", code, body)
	}
	if reqs := up.requests(); len(reqs) != before+1 || reqs[len(reqs)-1].Header.Get("Authorization") != "Bearer "+canary {
		t.Fatal("the upstream did not get the request through B with the injected credential")
	}

	// Held on A, approved through B.
	held := sendAsync(a, a.s.APIToken)
	id := pendingApproval(t, b.home)
	start := time.Now()
	mustCLI(t, b.home, "", "approvals", "approve", id)
	select {
	case c := <-held:
		if c != 200 {
			t.Fatalf("A's held request after B approved it = %d", c)
		}
		t.Logf("A released its request %s after B's decision", time.Since(start).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("A did not release its request after B's decision")
	}
	ev := waitAudit(t, a.home, map[string]any{"event": "approval.decided", "reason": "approved"})
	if ev["replica"] != "a" {
		t.Errorf("A's audit event = %v, want replica a", ev)
	}

	// Ended through B, refused by A.
	if _, code := a.curl(t, "https://api.example.test/v1/items"); code != 200 {
		t.Fatalf("A's proxy before the end = %d", code)
	}
	mustCLI(t, b.home, "", "session", "end", a.s.ID)
	start = time.Now()
	for {
		_, code := a.curl(t, "https://api.example.test/v1/items")
		if code != 200 {
			t.Logf("A refuses the session %s after B ended it", time.Since(start).Round(time.Millisecond))
			break
		}
		if time.Since(start) > time.Second {
			t.Fatal("A still serves the session a second after B ended it")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := a.d.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("replica A: %v", err)
	}
	if out := mustCLI(t, b.home, "", "session", "list"); strings.Contains(out, a.s.ID) {
		t.Errorf("B still lists the ended session:\n%s", out)
	}
}

// TestReplicasShareOnePostgres runs two serve replicas on a real Postgres
// (internal/pgtest: Debian's server in a temporary directory).
func TestReplicasShareOnePostgres(t *testing.T) {
	replicasOn(t, pgtest.DB(t))
}
