package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReloadWithoutRestart installs a connector and then its credential
// while serve runs: each takes effect on the next request, and a broken
// store entry is skipped without breaking the rest.
func TestReloadWithoutRestart(t *testing.T) {
	home := t.TempDir()
	up := newUpstream(t, []string{"api.example.test"}, upstreamHandler())
	d := startServe(t, home, nil, "--resolve", "api.example.test:443="+up.addr, "--upstream-ca", up.certFile)

	spec := filepath.Join(t.TempDir(), "echo.aileron.connector.v1.json")
	if err := os.WriteFile(spec, []byte(testSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, home, "", "connector", "install", spec)

	// The session is created against the reloaded policy.
	var s sessionInfo
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _, code := cli(t, home, "", "session", "create", "--json", "--connector", "local://test/echo")
		if code == 0 {
			s = parseSession(t, out)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the installed connector never became usable: %s", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	e := &env{home: home, up: up, d: d, s: s}

	body, code := e.curl(t, "https://api.example.test/v1/items")
	if code != 403 || decodeError(t, body)["code"] != "credential_not_configured" {
		t.Fatalf("before the credential is set = %d %s, want 403 credential_not_configured", code, body)
	}
	if !strings.Contains(body, "aileron-proxy credential set local://test/echo --kind bearer") {
		t.Errorf("the denial does not say which command to run: %s", body)
	}

	mustCLI(t, home, canary+"\n", "credential", "set", "local://test/echo", "--kind", "bearer", "--stdin")
	deadline = time.Now().Add(10 * time.Second)
	for {
		body, code = e.curl(t, "https://api.example.test/v1/items")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the credential set while serving was never used: %d %s", code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if e.up.last(t).Header.Get("Authorization") != "Bearer "+canary {
		t.Error("the reloaded credential was not injected")
	}

	// A corrupted store entry is skipped and logged; the good policy stays.
	matches, _ := filepath.Glob(filepath.Join(home, "store", "connectors", "sha256", "*", "aileron.connector.v1.json"))
	if len(matches) != 1 {
		t.Fatalf("store entries = %v", matches)
	}
	bad := filepath.Join(filepath.Dir(filepath.Dir(matches[0])), strings.Repeat("ab", 32))
	if err := os.MkdirAll(bad, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad, "aileron.connector.v1.json"), []byte("{broken"), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for !strings.Contains(e.d.stderr.String(), "skipping installed connector") {
		if time.Now().After(deadline) {
			t.Fatalf("the broken entry was not reported:\n%s", e.d.stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, code := e.curl(t, "https://api.example.test/v1/items"); code != 200 {
		t.Errorf("after a broken entry appeared = %d, want the good connector still allowed", code)
	}
	e.assertNoCanary(t)
}
