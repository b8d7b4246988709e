package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestAuditFullDiskFailsClosed puts $AILERON_HOME/audit on a 4 MiB tmpfs,
// fills it, and sends curl through serve: once the proxy knows the audit
// log cannot be written it answers 503 audit_unavailable and forwards
// nothing; every request that did reach the upstream has its audit line;
// the log holds only valid lines; /healthz and /metrics report the
// episode and serve logs it once; freeing space resumes forwarding and
// auditing without a restart.
func TestAuditFullDiskFailsClosed(t *testing.T) {
	home := t.TempDir()
	auditDir := filepath.Join(home, "audit")
	if err := os.Mkdir(auditDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", auditDir, "tmpfs", 0, "size=4m,mode=0700"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mounting a tmpfs (CI runs tests as root): %v", err)
		}
		t.Skipf("mounting a tmpfs needs root: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(auditDir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", auditDir, err)
		}
	})
	up := newUpstream(t, []string{"api.example.test"}, upstreamHandler())
	spec := filepath.Join(t.TempDir(), "echo.aileron.connector.v1.json")
	if err := os.WriteFile(spec, []byte(testSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, home, "", "connector", "install", spec)
	mustCLI(t, home, canary+"\n", "credential", "set", "local://test/echo", "--kind", "bearer", "--stdin")
	d := startServe(t, home, nil, "--resolve", "api.example.test:443="+up.addr, "--upstream-ca", up.certFile)
	e := &env{home: home, up: up, d: d, s: createSession(t, home)}
	t.Cleanup(func() { e.assertNoCanary(t) })
	const target = "https://api.example.test/v1/items"

	if _, code := e.curl(t, target); code != http.StatusOK {
		t.Fatalf("before the disk filled: %d, want 200", code)
	}
	filler := filepath.Join(auditDir, "filler")
	fillDisk(t, filler)

	// The request that finds the disk full may still go: its line fits the
	// space the log keeps reserved, and the failed reservation after it
	// turns the log unavailable.
	forwardedAfterFill := 0
	for {
		body, code := e.curl(t, target)
		if code == http.StatusServiceUnavailable {
			if c := decodeError(t, body)["code"]; c != "audit_unavailable" {
				t.Fatalf("503 with code %v, want audit_unavailable: %s", c, body)
			}
			break
		}
		if code != http.StatusOK {
			t.Fatalf("on a full disk: %d %s", code, body)
		}
		if forwardedAfterFill++; forwardedAfterFill > 3 {
			t.Fatalf("%d requests forwarded after the disk filled; the proxy does not fail closed", forwardedAfterFill)
		}
	}
	reached := len(up.requests())
	for range 10 {
		body, code := e.curl(t, target, "-X", "POST", "-H", "Content-Type: application/json", "-d", `{"name":"x"}`)
		if code != http.StatusServiceUnavailable || decodeError(t, body)["code"] != "audit_unavailable" {
			t.Fatalf("while the audit log is unavailable: %d %s, want 503 audit_unavailable", code, body)
		}
	}
	if n := len(up.requests()); n != reached {
		t.Fatalf("the upstream received %d requests while the audit log was unavailable", n-reached)
	}
	// A denial is still answered.
	if body, code := e.curl(t, "https://api.example.test/v1/not-an-operation"); code != http.StatusForbidden {
		t.Fatalf("a denial while the audit log is unavailable: %d %s, want 403", code, body)
	}
	health, status := getJSON(t, d.APIURL+"/healthz")
	if a, _ := health["audit"].(map[string]any); status != http.StatusServiceUnavailable || health["status"] != "degraded" ||
		a["available"] != false || a["reason"] != "no space left on device" {
		t.Fatalf("GET /healthz on a full disk = %d %v", status, health)
	}
	if v := metricValue(t, d.APIURL, "aileron_audit_unavailable"); v != 1 {
		t.Errorf("aileron_audit_unavailable = %v on a full disk, want 1", v)
	}
	if v := metricValue(t, d.APIURL, "aileron_audit_write_errors_total"); v < 1 {
		t.Errorf("aileron_audit_write_errors_total = %v on a full disk, want at least 1", v)
	}
	if out, _, code := cli(t, home, "", "session", "create", "--json"); code == 0 {
		t.Errorf("session create succeeded while the audit log is unavailable: %s", out)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, status := getJSON(t, d.APIURL+"/healthz"); status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("/healthz still degraded 10 s after space was freed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, code := e.curl(t, target+"/after-recovery"); code != http.StatusOK {
		t.Fatalf("after space was freed: %d, want 200", code)
	}
	waitAudit(t, home, map[string]any{"path": "/v1/items/after-recovery", "status": 200})
	if v := metricValue(t, d.APIURL, "aileron_audit_unavailable"); v != 0 {
		t.Errorf("aileron_audit_unavailable = %v after recovery, want 0", v)
	}

	// Every line is a whole, valid event (auditEvents fails otherwise), and
	// every request the upstream received has its line.
	proxied := 0
	for _, ev := range auditEvents(t, home) {
		if ev["event"] == "connector.proxy.proxied" {
			proxied++
		}
	}
	if got := len(up.requests()); proxied != got {
		t.Errorf("%d proxied events in the audit log, the upstream received %d requests", proxied, got)
	}
	logs := d.stderr.String()
	if n := strings.Count(logs, "audit log unavailable:"); n != 1 {
		t.Errorf("serve logged the episode's start %d times, want once", n)
	}
	if n := strings.Count(logs, "audit log writable again"); n != 1 {
		t.Errorf("serve logged the episode's end %d times, want once", n)
	}
}

// fillDisk writes path until its filesystem is full.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := bytes.Repeat([]byte{'x'}, 64<<10)
	for _, n := range []int{len(buf), 4096, 1} {
		for {
			if _, err := f.Write(buf[:n]); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("filling the disk: %v", err)
				}
				break
			}
		}
	}
}

// getJSON GETs url and decodes its JSON object.
func getJSON(t *testing.T, url string) (map[string]any, int) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("GET %s: %q is not JSON: %v", url, raw, err)
	}
	return v, resp.StatusCode
}

// metricValue reads an unlabelled series from /metrics.
func metricValue(t *testing.T, apiURL, name string) float64 {
	t.Helper()
	resp, err := http.Get(apiURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(raw)
	if m == nil {
		t.Fatalf("/metrics has no %s", name)
	}
	var v float64
	if err := json.Unmarshal(m[1], &v); err != nil {
		t.Fatalf("%s = %q: %v", name, m[1], err)
	}
	return v
}
