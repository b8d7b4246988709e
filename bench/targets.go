package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// Target names, in table order.
const (
	targetDirect  = "direct"
	targetAileron = "aileron-proxy"
	// targetCompare is a second aileron-proxy binary (-compare-bin) run
	// side by side, to record a change's before and after in one run.
	targetCompare = "aileron-proxy-b"
	targetGoproxy = "goproxy"
	targetMitm    = "mitmproxy"
	targetSquid   = "squid"
)

var allTargets = []string{targetDirect, targetAileron, targetCompare, targetGoproxy, targetMitm, targetSquid}

// target is one way of reaching the origin.
type target struct {
	name    string
	version string
	// proxyURL is nil for direct. For aileron-proxy it carries the session's
	// proxy credential.
	proxyURL *url.URL
	// tunnels are the endpoints scenario (5) spreads its idle tunnels over
	// (aileron-proxy caps tunnels per session); nil means proxyURL, roots.
	tunnels []endpoint
	// roots is what the client trusts: the origin CA for direct, the
	// proxy's CA (only) otherwise.
	roots *x509.CertPool
	// proc is the proxy process whose RSS is measured; nil for direct.
	proc *process
	// auditHeader is set when every proxied response must carry
	// X-Aileron-Audit-Id (policy decided and audited per request).
	auditHeader bool
	// skipped says why the target is not measured; empty when it is.
	skipped string
	// aileron is the running serve's control-API view (aileron-proxy only).
	aileron *aileronDaemon
}

// endpoint is a proxy URL and the CA a client trusts through it.
type endpoint struct {
	proxyURL *url.URL
	roots    *x509.CertPool
}

// endpoints returns where scenario (5) opens tunnels.
func (t *target) endpoints() []endpoint {
	if len(t.tunnels) > 0 {
		return t.tunnels
	}
	return []endpoint{{proxyURL: t.proxyURL, roots: t.roots}}
}

func (t *target) pid() int {
	if t.proc == nil {
		return 0
	}
	return t.proc.pid()
}

// --- aileron-proxy ---------------------------------------------------------

// aileronDaemon is a running `aileron-proxy serve` and what the harness
// needs of its control API.
type aileronDaemon struct {
	bin, home  string
	APIURL     string `json:"api_url"`
	ProxyAddr  string `json:"proxy_addr"`
	AdminToken string `json:"admin_token"`
	PID        int    `json:"pid"`
}

// benchSpec is the connector for the origin: both endpoints need a bearer
// credential, so every request is matched, injected, scrubbed and audited.
func benchSpec(authority string) string {
	return fmt.Sprintf(`{
  "schema_version": "aileron.connector.v1",
  "connector": {"fqn": %q, "version": "1.0.0"},
  "tools": [{
    "name": "bench",
    "description": "aileron-proxy benchmark origin",
    "operations": [
      {"name": "small", "method": "GET", "path": %q, "hosts": [%q], "credential": "bearer"},
      {"name": "websocket", "method": "GET", "path": %q, "hosts": [%q], "credential": "bearer", "websocket": true},
      {"name": "download", "method": "GET", "path": "%s{size}", "hosts": [%q], "credential": "bearer",
       "inputs": [{"name": "size", "type": "integer", "required": true}]}
    ]
  }]
}`, benchFQN, pathSmall, authority, pathWebSocket, authority, pathDownload, authority)
}

// hosts100Spec is a connector whose one operation lists 100 hosts, for
// scenario (6).
func hosts100Spec() string {
	hosts := make([]string, 100)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("%q", fmt.Sprintf("h%03d.bench.test", i))
	}
	return fmt.Sprintf(`{
  "schema_version": "aileron.connector.v1",
  "connector": {"fqn": %q, "version": "1.0.0"},
  "tools": [{
    "name": "hosts100",
    "description": "100 intercepted hosts",
    "operations": [
      {"name": "get", "method": "GET", "path": "/", "hosts": [%s]}
    ]
  }]
}`, hosts100FQN, strings.Join(hosts, ", "))
}

// cli runs the aileron-proxy binary against home.
func (d *aileronDaemon) cli(ctx context.Context, stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.bin, append([]string{"--home", d.home}, args...)...)
	cmd.Env = testkit.CleanEnv()
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("running aileron-proxy %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// createdSession is the part of `session create --json` the harness uses.
type createdSession struct {
	ID       string   `json:"id"`
	ProxyURL string   `json:"proxy_url"`
	CAPEM    string   `json:"ca_pem"`
	Hosts    []string `json:"hosts"`
}

// createSession runs `session create --json --ttl 2h` with args added
// (e.g. --connector FQN; none: a session on every connector).
func (d *aileronDaemon) createSession(ctx context.Context, args ...string) (createdSession, error) {
	out, err := d.cli(ctx, "", append([]string{"session", "create", "--json", "--ttl", "2h"}, args...)...)
	if err != nil {
		return createdSession{}, err
	}
	var s createdSession
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		return createdSession{}, fmt.Errorf("parsing `session create --json` output: %w", err)
	}
	if s.ProxyURL == "" || s.CAPEM == "" {
		return createdSession{}, errors.New("`session create --json` printed no proxy_url or ca_pem")
	}
	return s, nil
}

// endpoint is where s's proxy answers and the CA it presents.
func (s createdSession) endpoint() (endpoint, error) {
	u, err := url.Parse(s.ProxyURL)
	if err != nil {
		return endpoint{}, fmt.Errorf("parsing the session proxy URL: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(s.CAPEM)) {
		return endpoint{}, fmt.Errorf("session %s: ca_pem holds no certificate", s.ID)
	}
	return endpoint{proxyURL: u, roots: pool}, nil
}

// startAileron installs the bench connectors, sets their bearer credential,
// starts serve against the origin and creates the sessions the scenarios
// use. Everything it starts is registered with cleanup.
func startAileron(ctx context.Context, name, bin, dir string, o *origin, tunnelSessions int, cleanup *cleanups, env ...string) (*target, error) {
	dir = filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	home := filepath.Join(dir, "home")
	d := &aileronDaemon{bin: bin, home: home}
	specs := map[string]string{
		"bench.aileron.connector.v1.json":     benchSpec(o.authority()),
		"hosts100.aileron.connector.v1.json":  hosts100Spec(),
		"ops-small.aileron.connector.v1.json": opsSpec(o, opsSmall),
		"ops-large.aileron.connector.v1.json": opsSpec(o, opsLarge),
	}
	for name, body := range specs {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return nil, fmt.Errorf("writing %s: %w", p, err)
		}
		if _, err := d.cli(ctx, "", "connector", "install", p); err != nil {
			return nil, err
		}
	}
	for _, fqn := range []string{benchFQN, opsFQN(opsSmall), opsFQN(opsLarge)} {
		if _, err := d.cli(ctx, benchToken+"\n", "credential", "set", fqn, "--kind", "bearer", "--stdin"); err != nil {
			return nil, err
		}
	}
	p, err := d.serve(ctx, name, dir, o, cleanup, env...)
	if err != nil {
		return nil, err
	}

	t := &target{name: name, proc: p, auditHeader: true, aileron: d}
	for i := range max(1, tunnelSessions) {
		s, err := d.createSession(ctx, "--connector", benchFQN)
		if err != nil {
			return nil, err
		}
		ep, err := s.endpoint()
		if err != nil {
			return nil, err
		}
		if i == 0 {
			t.proxyURL, t.roots = ep.proxyURL, ep.roots
		}
		// Each session has its own CA: scenario (5) trusts per endpoint.
		t.tunnels = append(t.tunnels, ep)
	}
	return t, nil
}

// serve starts `serve` on d's home against the origin (its log in dir),
// with env added to its environment, and waits for its daemon.json, which
// fills in d's control-API fields. The process is registered with cleanup.
func (d *aileronDaemon) serve(ctx context.Context, name, dir string, o *origin, cleanup *cleanups, env ...string) (*process, error) {
	cmd := exec.Command(d.bin, "--home", d.home, "serve",
		"--proxy-listen", "127.0.0.1:0", "--api-listen", "127.0.0.1:0",
		"--resolve", o.authority()+"="+o.addr(), "--resolve", o.opsAuthority()+"="+o.addr(), "--upstream-ca", o.caFile)
	cmd.Env = testkit.CleanEnv(env...)
	p, err := startProcess(name, cmd, filepath.Join(dir, "serve.log"))
	if err != nil {
		return nil, err
	}
	cleanup.add(func() { p.stop(10 * time.Second) })

	deadline := time.Now().Add(30 * time.Second)
	for {
		raw, err := os.ReadFile(filepath.Join(d.home, "daemon.json"))
		if err == nil && json.Unmarshal(raw, d) == nil && d.ProxyAddr != "" && d.PID == p.pid() {
			break
		}
		if p.exited() {
			return nil, fmt.Errorf("aileron-proxy serve exited early (%v); log:\n%s", p.err, p.logTail(20))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("aileron-proxy serve wrote no daemon.json within 30s; log:\n%s", p.logTail(20))
		}
		time.Sleep(50 * time.Millisecond)
	}

	return p, nil
}

// --- goproxy ---------------------------------------------------------------

// startGoproxyTarget re-runs the harness binary as `-serve-goproxy`.
func startGoproxyTarget(ctx context.Context, self, dir string, o *origin, cleanup *cleanups, env ...string) (*target, error) {
	caFile := filepath.Join(dir, "goproxy-ca.pem")
	cmd := exec.Command(self, serveGoproxyFlag, "-listen", "127.0.0.1:0", "-upstream-ca", o.caFile, "-ca-out", caFile)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	p, addr, err := startListener(ctx, targetGoproxy, cmd, filepath.Join(dir, "goproxy.log"), cleanup)
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("reading goproxy's CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw) {
		return nil, fmt.Errorf("goproxy's CA file %s holds no certificate", caFile)
	}
	return &target{name: targetGoproxy, version: goproxyVersion(), proxyURL: &url.URL{Scheme: "http", Host: addr}, roots: pool, proc: p}, nil
}

func goproxyVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/elazarl/goproxy" {
				return m.Version
			}
		}
	}
	return "unknown"
}
