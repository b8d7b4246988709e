package integration

import (
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSandboxSurvivesRestart: a long-lived sandbox outlives a restart of
// serve (SIGTERM, then a new serve on the same AILERON_HOME), on Docker
// and on Podman: exec answers with the same token, its egress through the
// proxy still gets the credential injected, its relays listen again on
// the same gateway addresses; a connection through a relay when serve
// stops is cut; a sandbox whose container was removed while serve was
// down answers 410 SANDBOX_GONE. It measures how long the relays were
// unavailable.
func TestSandboxSurvivesRestart(t *testing.T) {
	eachRuntime(t, func(t *testing.T, kind string, e *env) {
		sb := upSandbox(t, e, kind, agentWorkspace(t), "--ttl", "1h")
		lost := upSandbox(t, e, kind, agentWorkspace(t), "--ttl", "1h")
		c := &sandboxClient{t: t, base: sb.APIURL + "/v1/sandboxes/" + sb.ID, token: sb.Token}
		cl := &sandboxClient{t: t, base: lost.APIURL + "/v1/sandboxes/" + lost.ID, token: lost.Token}
		egress := func(when string) {
			t.Helper()
			before := len(e.up.requests())
			r := c.exec(map[string]any{"command": "curl -sS --max-time 30 https://api.example.test/v1/items"})
			if out, _ := r["stdout"].(string); !strings.Contains(out, `"items":[{"id":"1"}]`) {
				t.Fatalf("%s: curl through the proxy from the sandbox = %v", when, r)
			}
			reqs := e.up.requests()
			if len(reqs) != before+1 || reqs[len(reqs)-1].Header.Get("Authorization") != "Bearer "+canary {
				t.Fatalf("%s: the upstream got %d new requests, the last without the injected credential", when, len(reqs)-before)
			}
		}
		relays := func() (proxy, api string) {
			t.Helper()
			r := c.exec(map[string]any{"command": `p=${HTTPS_PROXY##*@}; echo ${p%%/*}; a=${AILERON_API_URL#http://}; echo ${a%%/*}`})
			f := strings.Fields(r["stdout"].(string))
			if len(f) != 2 {
				t.Fatalf("the sandbox's relay addresses = %v", r)
			}
			return f[0], f[1]
		}
		egress("before the restart")
		proxyRelay, apiRelay := relays()
		if !dials(proxyRelay) || !dials(apiRelay) {
			t.Fatalf("the relays %s and %s do not accept from the host before the restart", proxyRelay, apiRelay)
		}

		// An agent's connection through the proxy relay, open when serve
		// stops.
		inflight, err := net.DialTimeout("tcp", proxyRelay, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer inflight.Close()
		cut := make(chan time.Time, 1)
		go func() {
			_, _ = inflight.Read(make([]byte, 1))
			cut <- time.Now()
		}()

		stopAt := time.Now()
		if err := e.d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		// The relay is down from the first refused connection.
		var downAt time.Time
		for deadline := time.Now().Add(30 * time.Second); downAt.IsZero(); time.Sleep(5 * time.Millisecond) {
			if !dials(proxyRelay) {
				downAt = time.Now()
			} else if time.Now().After(deadline) {
				t.Fatalf("the proxy relay still accepts 30s after serve's SIGTERM")
			}
		}
		select {
		case at := <-cut:
			t.Logf("%s: the open connection through the relay was cut %s after SIGTERM", kind, at.Sub(stopAt).Round(time.Millisecond))
		case <-time.After(10 * time.Second):
			t.Error("a connection through the proxy relay stayed open 10s after serve's SIGTERM")
		}
		waitExited(t, e.d)
		exitedAt := time.Now()

		// Its containers outlived serve; the other sandbox's is removed
		// while serve is down.
		for _, name := range []string{"aileron-" + sb.SessionID, "aileron-" + sb.SessionID + "-guard", "aileron-" + lost.SessionID} {
			if out, err := exec.Command(kind, "inspect", "--format", "{{.State.Status}}", name).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "running" {
				t.Fatalf("%s after serve stopped: %q, %v; want it still running", name, out, err)
			}
		}
		if out, err := exec.Command(kind, "rm", "--force", "aileron-"+lost.SessionID).CombinedOutput(); err != nil {
			t.Fatalf("%s rm: %v: %s", kind, err, out)
		}

		startAt := time.Now()
		e.d = startServe(t, e.home, nil, "--resolve", "api.example.test:443="+e.up.addr, "--upstream-ca", e.up.certFile)
		announcedAt := time.Now()
		// Removed while this serve runs (its cleanup stops it first).
		t.Cleanup(func() { _, _, _ = cli(t, e.home, "", "sandbox", "down", "--all") })
		var upAt time.Time
		for deadline := time.Now().Add(30 * time.Second); upAt.IsZero(); time.Sleep(5 * time.Millisecond) {
			if dials(proxyRelay) {
				upAt = time.Now()
			} else if time.Now().After(deadline) {
				t.Fatalf("the proxy relay %s does not accept 30s after serve started again\n%s", proxyRelay, e.d.stderr.String())
			}
		}
		t.Logf("%s: relays unavailable for %s (serve stopped %s after SIGTERM; the test started serve again %s later; it announced itself after %s; the relay accepted %s after that)",
			kind, upAt.Sub(downAt).Round(time.Millisecond), exitedAt.Sub(stopAt).Round(time.Millisecond),
			startAt.Sub(exitedAt).Round(time.Millisecond), announcedAt.Sub(startAt).Round(time.Millisecond), upAt.Sub(announcedAt).Round(time.Millisecond))
		c.base = e.d.APIURL + "/v1/sandboxes/" + sb.ID
		cl.base = e.d.APIURL + "/v1/sandboxes/" + lost.ID

		// The same token, the same relays, the same egress.
		if r := c.exec(map[string]any{"command": "echo alive; id -u"}); r["stdout"] != "alive\n1000\n" {
			t.Errorf("exec after the restart = %v", r)
		}
		if p, a := relays(); p != proxyRelay || a != apiRelay || !dials(apiRelay) {
			t.Errorf("after the restart the relays are %s and %s (API relay accepts: %v), want %s and %s", p, a, dials(apiRelay), proxyRelay, apiRelay)
		}
		egress("after the restart")
		if code, r := c.json(http.MethodGet, "/", nil); code != 200 || r["state"] != "running" || r["session_id"] != sb.SessionID {
			t.Errorf("info after the restart = %d %v", code, r)
		}
		if code, _ := (&sandboxClient{t: t, base: c.base, token: "aps_wrong"}).json(http.MethodGet, "/", nil); code != 401 {
			t.Errorf("info with a wrong token after the restart = %d, want 401", code)
		}
		if code, r := cl.json(http.MethodPost, "/exec", map[string]any{"command": "true"}); code != 410 || errCode(r) != "SANDBOX_GONE" {
			t.Errorf("exec in the sandbox whose container was removed while serve was down = %d %v, want 410 SANDBOX_GONE", code, r)
		}
		if out := mustCLI(t, e.home, "", "sandbox", "ls", "--json"); !strings.Contains(out, sb.ID) || strings.Contains(out, lost.ID) {
			t.Errorf("sandbox ls --json after the restart = %s; want %s only", out, sb.ID)
		}
		// What was left of the lost one (holder, network) is removed.
		waitNone(t, kind, "label=dev.aileron.session="+lost.SessionID)

		// sandbox down --all still removes it, and its record: a third
		// start finds nothing to take up.
		if out := mustCLI(t, e.home, "", "sandbox", "down", "--all"); !strings.Contains(out, sb.ID) {
			t.Errorf("sandbox down --all = %q", out)
		}
		waitNone(t, kind, "label=dev.aileron.session="+sb.SessionID)
		if dials(proxyRelay) {
			t.Error("the proxy relay still accepts after sandbox down")
		}
		// The token is nowhere under AILERON_HOME (the state database holds
		// its digest) nor in serve's log.
		if strings.Contains(e.d.stderr.String(), sb.Token) {
			t.Error("the sandbox's token is in serve's log")
		}
		_ = filepath.Walk(e.home, func(p string, info os.FileInfo, err error) error {
			if err == nil && !info.IsDir() {
				if raw, _ := os.ReadFile(p); strings.Contains(string(raw), sb.Token) || strings.Contains(string(raw), lost.Token) {
					t.Errorf("%s holds a sandbox's token", p)
				}
			}
			return nil
		})
	})
}

// dials reports whether addr accepts a TCP connection within a second.
func dials(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// waitExited waits until serve's process has exited and daemon.json is
// gone (the harness's cleanup collects its exit status).
func waitExited(t *testing.T, d *daemon) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, statErr := os.Stat(filepath.Join(d.home, "daemon.json"))
		if err := d.cmd.Process.Signal(syscall.Signal(0)); errors.Is(err, os.ErrProcessDone) && os.IsNotExist(statErr) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not exit within 30s of SIGTERM\n%s", d.stderr.String())
		}
	}
}

// waitNone waits until no container or network matches filter.
func waitNone(t *testing.T, kind, filter string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		ps, _ := exec.Command(kind, "ps", "--all", "--quiet", "--filter", filter).CombinedOutput()
		nets, _ := exec.Command(kind, "network", "ls", "--quiet", "--filter", filter).CombinedOutput()
		if strings.TrimSpace(string(ps)+string(nets)) == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("60s on, %s still matches containers %q, networks %q", filter, ps, nets)
		}
	}
}
