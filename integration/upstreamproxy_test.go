package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

const corpSpec = `{
  "schema_version": "aileron.connector.v1",
  "connector": {"fqn": "local://test/corp", "version": "1.0.0"},
  "tools": [{"name": "corp", "operations": [
    {"name": "items.list", "method": "GET", "path": "/v1/items", "hosts": ["api.corp.test", "api2.corp.test"], "credential": "bearer"}
  ]}]
}`

// proxyPassword is the corporate proxy's password; like the canary it
// must appear in no log or audit line.
const proxyPassword = "squid-pw-4c1d9e7a"

// squid is Debian's squid on loopback as a corporate proxy that requires
// basic authentication, resolving names from its own hosts file.
type squid struct {
	addr, dir string
}

func (s *squid) accessLog() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "access.log"))
	return string(b)
}

// waitLog reports whether squid's access log has every want within 10s:
// squid writes a line once the transaction ends, buffered.
func (s *squid) waitLog(want ...string) bool {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		log, all := s.accessLog(), true
		for _, w := range want {
			all = all && strings.Contains(log, w)
		}
		if all {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

func startSquid(t *testing.T, hosts string) *squid {
	t.Helper()
	bin := testkit.RequireTool(t, "squid")
	helper := "/usr/lib/squid/basic_ncsa_auth"
	if _, err := os.Stat(helper); err != nil {
		t.Fatalf("squid's basic_ncsa_auth helper is missing at %s: %v", helper, err)
	}
	openssl := testkit.RequireTool(t, "openssl")
	hash, err := exec.Command(openssl, "passwd", "-apr1", proxyPassword).Output()
	if err != nil {
		t.Fatal(err)
	}
	// squid drops root for its own user, which must read and write here
	// (t.TempDir's parent is private to root).
	dir, err := os.MkdirTemp("", "aileron-squid-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	s := &squid{addr: testkit.DeadAddr(t), dir: dir}
	conf := fmt.Sprintf(`http_port %s
pid_filename %[2]s/squid.pid
cache_log %[2]s/cache.log
access_log stdio:%[2]s/access.log squid
coredump_dir %[2]s
cache deny all
cache_mem 4 MB
hosts_file %[2]s/hosts
dns_nameservers 127.0.0.1
shutdown_lifetime 1 seconds
auth_param basic program %[3]s %[2]s/passwd
auth_param basic realm corp
acl authed proxy_auth REQUIRED
http_access deny !authed
http_access allow authed
`, s.addr, dir, helper)
	for name, body := range map[string]string{"squid.conf": conf, "hosts": hosts, "passwd": "agent:" + string(hash)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "-N", "-f", filepath.Join(dir, "squid.conf"))
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "cache.log"))
			t.Logf("squid output:\n%s\ncache.log:\n%s\naccess.log:\n%s", out.String(), b, s.accessLog())
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if c, err := net.Dial("tcp", s.addr); err == nil {
			c.Close()
			return s
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "cache.log"))
			t.Fatalf("squid did not listen on %s within 20s\n%s\n%s", s.addr, out.String(), b)
		}
	}
}

// corpUpstream serves names over HTTPS on a fresh loopback address's port
// 443, the port squid connects to; only squid's hosts file names it.
func corpUpstream(t *testing.T, names []string, h http.Handler) (ip, certFile string) {
	t.Helper()
	if os.Getuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the corporate proxy test binds port 443 on loopback and needs root")
		}
		t.Skip("binds port 443 on loopback: needs root")
	}
	var ln net.Listener
	var err error
	for i := 0; i < 20; i++ {
		ip = fmt.Sprintf("127.%d.%d.%d", 100+rand.IntN(100), rand.IntN(250)+1, rand.IntN(250)+1)
		if ln, err = net.Listen("tcp", ip+":443"); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	cert, pem := selfSigned(t, names)
	certFile = filepath.Join(t.TempDir(), "corp.pem")
	if err := os.WriteFile(certFile, pem, 0o644); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return ip, certFile
}

// TestUpstreamThroughCorporateProxy makes squid, requiring proxy
// authentication, the only way to the upstreams: their names resolve only
// in squid's hosts file. curl through aileron-proxy reaches an intercepted
// host with the credential injected and a passthrough host, both through
// squid; a wrong proxy password is a clear error naming the proxy.
func TestUpstreamThroughCorporateProxy(t *testing.T) {
	testkit.RequireTool(t, "curl")
	names := []string{"api.corp.test", "api2.corp.test", "pass.corp.test"}
	ip, certFile := corpUpstream(t, names, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != "pass.corp.test" && r.Header.Get("Authorization") != "Bearer "+canary {
			http.Error(w, "no credential", http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, "hello from %s", r.Host)
	}))
	sq := startSquid(t, ip+" "+strings.Join(names, " ")+"\n")
	if _, err := net.LookupHost("api.corp.test"); err == nil {
		t.Fatal("api.corp.test resolves on this host; the test needs a name only squid resolves")
	}

	home := t.TempDir()
	spec := filepath.Join(t.TempDir(), "corp.aileron.connector.v1.json")
	if err := os.WriteFile(spec, []byte(corpSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, home, "", "connector", "install", spec)
	mustCLI(t, home, canary+"\n", "credential", "set", "local://test/corp", "--kind", "bearer", "--stdin")
	pwFile := filepath.Join(t.TempDir(), "proxy-password")
	if err := os.WriteFile(pwFile, []byte(proxyPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startServe(t, home, nil, "--upstream-proxy", "http://"+sq.addr, "--upstream-proxy-user", "agent",
		"--upstream-proxy-password-from-file", pwFile, "--upstream-ca", certFile, "--passthrough", "pass.corp.test")
	e := &env{home: home, d: d, s: createSession(t, home)}
	t.Cleanup(func() {
		e.assertNoCanary(t)
		for _, f := range testkit.SecretForms(proxyPassword) {
			if strings.Contains(d.stderr.String(), f) {
				t.Errorf("serve's log contains the upstream proxy password (as %q)", f)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(home, "audit", "audit.jsonl")); strings.Contains(string(b), proxyPassword) {
			t.Error("the audit log contains the upstream proxy password")
		}
	})

	if body, code := e.curl(t, "https://api.corp.test/v1/items"); code != 200 || body != "hello from api.corp.test" {
		t.Fatalf("intercepted GET through squid = %d %q, want 200 with the credential injected", code, body)
	}
	curlPass := func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "curl", "-sS", "--proxy", e.s.ProxyURL, "--cacert", certFile, "https://pass.corp.test/")
		cmd.Env = testkit.CleanEnv()
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := curlPass(); err != nil || out != "hello from pass.corp.test" {
		t.Fatalf("passthrough through squid = %q, %v", out, err)
	}
	// squid logs a tunnel when it closes; serve keeps the intercepted one
	// pooled, so only the passthrough one is there yet.
	if !sq.waitLog("TCP_TUNNEL/200", "CONNECT pass.corp.test:443 agent") {
		t.Errorf("squid's access log lacks the passthrough tunnel:\n%s", sq.accessLog())
	}

	// A wrong password (the file is read for each connection).
	if err := os.WriteFile(pwFile, []byte("wrong-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	body, code := e.curl(t, "https://api2.corp.test/v1/items")
	if code != http.StatusBadGateway || !strings.Contains(body, "the upstream proxy "+sq.addr+" refused its credentials for CONNECT api2.corp.test:443 (407)") {
		t.Fatalf("with a wrong proxy password: %d %q, want 502 naming the upstream proxy and its 407", code, body)
	}
	if out, err := curlPass(); err == nil || !strings.Contains(out, "502") {
		t.Fatalf("passthrough with a wrong proxy password = %q, %v; want CONNECT refused with 502", out, err)
	}
	if !sq.waitLog("TCP_DENIED/407", "CONNECT api2.corp.test:443 agent") {
		t.Errorf("squid's access log lacks the refused intercepted CONNECT:\n%s", sq.accessLog())
	}
	if !strings.Contains(d.stderr.String(), `"upstream_proxy":"`+sq.addr+`"`) || !strings.Contains(d.stderr.String(), "refused its credentials") {
		t.Errorf("serve did not log the upstream proxy's refusal naming it")
	}
}
