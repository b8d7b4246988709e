package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// restartFlags are serve's flags for env e at fixed addresses, so that a
// restarted serve answers the proxy URL sessions were given.
func restartFlags(e *env, proxyAddr, apiAddr string, extra ...string) []string {
	return append([]string{"--resolve", "api.example.test:443=" + e.up.addr, "--upstream-ca", e.up.certFile,
		"--proxy-listen", proxyAddr, "--api-listen", apiAddr}, extra...)
}

// sendAsync posts a run of the approval-required operation with token and
// reports the HTTP status (or -1 when the connection died, as it does when
// serve is killed while holding it).
func sendAsync(e *env, token string) <-chan int {
	ch := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, e.d.APIURL+"/v1/connector-operations/run",
			strings.NewReader(`{"connector_fqn":"local://test/echo","tool":"testapi","operation":"items.send","args":{"to":"bob@example.test"}}`))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{Proxy: nil}}).Do(req)
		if err != nil {
			ch <- -1
			return
		}
		resp.Body.Close()
		ch <- resp.StatusCode
	}()
	return ch
}

// TestRestartKeepsState restarts serve (SIGTERM, and SIGKILL then start)
// on the embedded SQLite store: the session keeps working through its old
// proxy URL and CA file with the credential injected, its API token still
// authenticates, a remembered approval still answers without a person, and
// the approval pending at the restart is recorded as abandoned.
func TestRestartKeepsState(t *testing.T) {
	testkit.RequireTool(t, "curl")
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			proxyAddr, apiAddr := testkit.DeadAddr(t), testkit.DeadAddr(t)
			e := newEnv(t, "--proxy-listen", proxyAddr, "--api-listen", apiAddr, "--replica", "serve-a")
			flags := restartFlags(e, proxyAddr, apiAddr, "--replica", "serve-a")

			body, code := e.curl(t, "https://api.example.test/v1/items")
			if code != 200 || !strings.Contains(body, `"items"`) {
				t.Fatalf("curl before the restart = %d %s", code, body)
			}
			// A decision remembered for the session.
			first := sendAsync(e, e.s.APIToken)
			mustCLI(t, e.home, "", "approvals", "approve", pendingApproval(t, e.home), "--remember", "session")
			if c := <-first; c != 200 {
				t.Fatalf("approved call = %d", c)
			}
			// A request of another session held when serve stops.
			other := createSession(t, e.home)
			held := sendAsync(e, other.APIToken)
			heldID := pendingApproval(t, e.home)

			err := e.d.stop(t, sig)
			if sig == syscall.SIGTERM && err != nil {
				t.Fatalf("serve after SIGTERM: %v\n%s", err, e.d.stderr.String())
			}
			if c := <-held; c == 200 {
				t.Fatal("the held request was answered 200 across the stop")
			}
			e.d = startServe(t, e.home, nil, flags...)
			t.Logf("restarted after %s: %s", sig, lastLine(e.d.stderr.String(), "state restored"))

			// The old proxy URL and CA file: 200, credential injected.
			before := len(e.up.requests())
			body, code = e.curl(t, "https://api.example.test/v1/items")
			if code != 200 || !strings.Contains(body, `"items"`) {
				t.Fatalf("curl with the session's proxy URL and CA after the restart = %d %s", code, body)
			}
			reqs := e.up.requests()
			if len(reqs) != before+1 || reqs[len(reqs)-1].Header.Get("Authorization") != "Bearer "+canary {
				t.Fatalf("after the restart the upstream got %d requests, the last without the injected credential", len(reqs)-before)
			}
			// The API token authenticates; the remembered decision answers.
			if code, v := e.run(t, e.s.APIToken, `{"connector_fqn":"local://test/echo","tool":"testapi","operation":"items.list","args":{}}`); code != 200 {
				t.Fatalf("run with the session's API token after the restart = %d %v", code, v)
			}
			start := time.Now()
			select {
			case c := <-sendAsync(e, e.s.APIToken):
				if c != 200 {
					t.Fatalf("the remembered operation after the restart = %d, want 200 without a person", c)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the remembered operation is held for a person after the restart")
			}
			t.Logf("remembered approval answered in %s", time.Since(start).Round(time.Millisecond))

			// The held approval: abandoned, listed and audited.
			var list []map[string]any
			if err := json.Unmarshal([]byte(mustCLI(t, e.home, "", "approvals", "list", "--state", "all", "--json")), &list); err != nil {
				t.Fatal(err)
			}
			found := false
			for _, p := range list {
				if p["id"] == heldID {
					found = true
					if p["state"] != "decided" || p["decision"] != "abandoned" || p["reason"] != "abandoned" {
						t.Errorf("approvals list shows the held approval as %v", p)
					}
				}
			}
			if !found {
				t.Errorf("approvals list --state all lacks the held approval %s: %v", heldID, list)
			}
			ev := waitAudit(t, e.home, map[string]any{"event": "approval.decided", "reason": "abandoned"})
			if f, _ := ev["fields"].(map[string]any); f["approval_id"] != heldID || ev["replica"] != "serve-a" || ev["session_id"] != other.ID {
				t.Errorf("abandoned audit event = %v, want approval %s of %s by replica serve-a", ev, heldID, other.ID)
			}
			// The store holds digests, never the session's secrets.
			pu, err := url.Parse(e.s.ProxyURL)
			if err != nil {
				t.Fatal(err)
			}
			proxySecret, _ := pu.User.Password()
			for _, name := range []string{"state.db", "state.db-wal"} {
				raw, _ := os.ReadFile(filepath.Join(e.home, name))
				for _, sec := range []string{proxySecret, e.s.APIToken, other.APIToken} {
					for _, f := range testkit.SecretForms(sec) {
						if bytes.Contains(raw, []byte(f)) {
							t.Errorf("%s holds a session secret (as %q)", name, f)
						}
					}
				}
			}
			// Nothing was ended by the stop.
			for _, ev := range auditEvents(t, e.home) {
				if ev["event"] == "session.ended" {
					t.Errorf("the restart ended a session: %v", ev)
				}
			}
			if out := mustCLI(t, e.home, "", "session", "list"); !strings.Contains(out, e.s.ID) || !strings.Contains(out, other.ID) {
				t.Errorf("session list after the restart lacks the sessions:\n%s", out)
			}
			// Ending the session still works, and is refused after.
			mustCLI(t, e.home, "", "session", "end", e.s.ID)
			if _, code := e.curl(t, "https://api.example.test/v1/items"); code == 200 {
				t.Error("an ended session's proxy URL still works")
			}
		})
	}
}

// lastLine returns the last line of log containing s, for the test log.
func lastLine(log, s string) string {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], s) {
			return lines[i]
		}
	}
	return fmt.Sprintf("(no %q line)", s)
}

// TestServeRefusesUnusableStateDB: a state.db from a newer aileron-proxy,
// or a damaged one, makes serve exit non-zero with an error that says what
// and how to fix it, and leaves the file as it was.
func TestServeRefusesUnusableStateDB(t *testing.T) {
	sqlite := testkit.RequireTool(t, "sqlite3")
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, path string)
		want  []string
	}{
		{"newer schema", func(t *testing.T, path string) {
			out, err := exec.Command(sqlite, path, `UPDATE meta SET value = CAST('99' AS BLOB) WHERE name = 'schema_version'`).CombinedOutput()
			if err != nil {
				t.Fatalf("sqlite3: %v\n%s", err, out)
			}
		}, []string{"schema version 99", "upgrade aileron-proxy"}},
		{"damaged page", func(t *testing.T, path string) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			pageSize := int(data[16])<<8 | int(data[17])
			if len(data) < 3*pageSize {
				t.Fatalf("state.db is %d bytes, want at least 3 pages of %d", len(data), pageSize)
			}
			for i := 2*pageSize + 8; i < 3*pageSize-8; i++ {
				data[i] = 0xa5
			}
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}, []string{"state.db", "damaged"}},
		{"not a database", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("a note, not a database\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, []string{"state.db", "not an SQLite database"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := t.TempDir()
			d := startServe(t, home, nil)
			for i := 0; i < 20; i++ { // enough rows for several pages
				createSession(t, home)
			}
			if err := d.stop(t, syscall.SIGTERM); err != nil {
				t.Fatalf("serve: %v", err)
			}
			path := filepath.Join(home, "state.db")
			tc.spoil(t, path)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			out, errOut, code := cli(t, home, "", "serve", "--proxy-listen", "127.0.0.1:0", "--api-listen", "127.0.0.1:0")
			if code == 0 {
				t.Fatalf("serve with a spoiled state.db exited 0\n%s", out)
			}
			last := lastLine(errOut, "error:")
			for _, w := range tc.want {
				if !strings.Contains(last, w) {
					t.Errorf("serve's error %q lacks %q", last, w)
				}
			}
			after, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) {
				t.Error("serve changed the state.db it refused")
			}
			if _, err := os.Stat(filepath.Join(home, "daemon.json")); !os.IsNotExist(err) {
				t.Errorf("a refused serve left daemon.json (%v)", err)
			}
			t.Logf("exit %d: %s", code, last)
		})
	}
}

// TestRestartKeepsLearning: a learn session outlives a SIGKILL of serve and
// its record takes the requests learned after the restart, after those
// learned before.
func TestRestartKeepsLearning(t *testing.T) {
	testkit.RequireTool(t, "curl")
	home := t.TempDir()
	up := learnUpstream(t)
	proxyAddr, apiAddr := testkit.DeadAddr(t), testkit.DeadAddr(t)
	flags := []string{"--resolve", "api.learn.test:443=" + up.addr, "--upstream-ca", up.certFile,
		"--proxy-listen", proxyAddr, "--api-listen", apiAddr}
	e := &env{home: home, up: up, d: startServe(t, home, nil, flags...)}
	e.s = createSession(t, home, "--learn", "api.learn.test")
	if _, code := e.curl(t, "https://api.learn.test/v2/items/17"); code != 200 {
		t.Fatalf("learned GET before the restart = %d", code)
	}
	_ = e.d.stop(t, syscall.SIGKILL)
	e.d = startServe(t, home, nil, flags...)
	if _, code := e.curl(t, "https://api.learn.test/v2/items/18"); code != 200 {
		t.Fatalf("learned GET after the restart = %d", code)
	}
	mustCLI(t, home, "", "session", "end", e.s.ID)
	raw, err := os.ReadFile(filepath.Join(home, "learn", e.s.ID+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], e.s.ID) || !strings.Contains(lines[1], `"/v2/items/17"`) || !strings.Contains(lines[2], `"/v2/items/18"`) {
		t.Errorf("learn record after the restart:\n%s\nwant the header, /v2/items/17, then /v2/items/18", raw)
	}
}
