package launcher

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/aileron-dev/aileron-proxy/api"
	"github.com/aileron-dev/aileron-proxy/launcher/guard"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"github.com/aileron-dev/aileron-proxy/policy"
	"github.com/aileron-dev/aileron-proxy/shims"
)

const (
	launchTestToken  = "api-token-SECRET-5d1e"
	launchTestSecret = "proxy-secret-SECRET-88a0"
	launchTestID     = "ses_0123456789abcdef01234567"
	launchTestHash   = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	launchTestCA     = "-----BEGIN CERTIFICATE-----\nTEST-SESSION-CA\n-----END CERTIFICATE-----\n"
)

func launchTestSpec(tool string) string {
	return `{"schema_version": "aileron.connector.v1",
  "connector": {"fqn": "local://test/echo", "version": "1.0.0"},
  "tools": [{"name": "` + tool + `", "operations": [
    {"name": "items.list", "method": "GET", "path": "/v1/items", "hosts": ["api.example.test"], "credential": "bearer"}]}]}`
}

// testConnector parses a spec and writes its package into a store layout.
func testConnector(t *testing.T, tool string) (policy.Connector, string) {
	t.Helper()
	raw := launchTestSpec(tool)
	spec, _, err := policy.ParseSpec([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	store := t.TempDir()
	pkg := filepath.Join(store, "sha256", strings.TrimPrefix(launchTestHash, "sha256:"))
	if err := os.MkdirAll(pkg, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pkg, policy.SpecFileName), []byte(raw), 0o600); err != nil {
		t.Fatal(err)
	}
	return policy.Connector{Spec: spec, Hash: launchTestHash}, store
}

// fakeSessions records the sessions Launch creates and ends.
type fakeSessions struct {
	proxyAddr string
	mu        sync.Mutex
	created   []api.CreateSessionRequest
	ended     []string // "ID" or "ID exit=N"
}

func (f *fakeSessions) CreateSession(_ context.Context, req api.CreateSessionRequest) (*api.CreatedSession, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = append(f.created, req)
	return &api.CreatedSession{
		ID:         launchTestID,
		APIToken:   launchTestToken,
		ProxyURL:   "http://" + launchTestID + ":" + launchTestSecret + "@" + f.proxyAddr,
		CAPEM:      launchTestCA,
		Connectors: req.Connectors,
	}, nil
}

func (f *fakeSessions) EndSession(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ended = append(f.ended, id)
	return nil
}

func (f *fakeSessions) EndSessionWithExitCode(_ context.Context, id string, code int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ended = append(f.ended, fmt.Sprintf("%s exit=%d", id, code))
	return nil
}

// fakeDaemon is a loopback proxy and API standing in for serve: the proxy
// answers plain-HTTP proxy requests with the credential it got, the API
// echoes the Host header.
func fakeDaemon(t *testing.T) DaemonEndpoints {
	t.Helper()
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, _ := parseProxyAuth(r.Header.Get("Proxy-Authorization"))
		fmt.Fprintf(w, "proxied %s for %s ok=%v", r.URL.String(), user, pass == launchTestSecret)
	}))
	t.Cleanup(proxy.Close)
	apiSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "api %s host=%s", r.URL.Path, r.Host)
	}))
	t.Cleanup(apiSrv.Close)
	return DaemonEndpoints{ProxyAddr: proxy.Listener.Addr().String(), APIURL: apiSrv.URL}
}

func parseProxyAuth(h string) (user, pass string, ok bool) {
	r := &http.Request{Header: http.Header{"Authorization": {h}}}
	return r.BasicAuth()
}

// agentRun is what the fake agent container saw.
type agentRun struct {
	argv      []string
	env       map[string]string
	envFile   string
	envMode   os.FileMode
	mounts    map[string]string // target → source (+",ro")
	proxied   string
	api       string
	toolsTxt  string
	bundle    string
	manifests []string
}

// checkOK is the marker output of a passing Check.
const checkOK = "aileron-check:shell:ok\naileron-check:uid:1000\naileron-check:path:/usr/bin\naileron-check:workspace:ok\naileron-check:agent:ok:/usr/bin/agent\naileron-check:wget:ok:/usr/bin/wget\n"

// respondLikeDocker answers the CLI calls Launch makes; agent simulates
// the agent container.
func respondLikeDocker(agent func(c runtime.Command) error) func(c runtime.Command) (string, string, error) {
	return func(c runtime.Command) (string, string, error) {
		a := c.Args
		switch {
		case len(a) >= 2 && a[0] == "image" && a[1] == "inspect":
			return "sha256:feed\n", "", nil
		case len(a) >= 2 && a[0] == "network" && a[1] == "create":
			return "netid\n", "", nil
		case len(a) >= 2 && a[0] == "network" && a[1] == "inspect":
			return `[{"Name":"x","IPAM":{"Config":[{"Subnet":"127.0.0.0/8","Gateway":"127.0.0.1"}]}}]`, "", nil
		case len(a) >= 2 && a[0] == "network" && a[1] == "rm":
			return "", "", nil
		case a[0] == "rm":
			return "", "", nil
		case a[0] == "run" && slices.Contains(a, probeUserScript):
			return fmt.Sprintf("aileron-user:%d:%d:agent\n", fakeImageUID, fakeImageUID), "", nil
		case a[0] == "run" && slices.ContainsFunc(a, isProbeAndCheck):
			return fmt.Sprintf("aileron-user:%d:%d:agent\n", fakeImageUID, fakeImageUID) + checkOK, "", nil
		case a[0] == "run" && strings.Contains(strings.Join(a, " "), "--network none"):
			return checkOK, "", nil
		case a[0] == "run" && slices.Contains(a, "--detach"):
			return "holderid\n", "", nil
		case a[0] == "exec":
			return fakeGuardApply(a), "", nil
		case a[0] == "run":
			return "", "", agent(c)
		}
		return "", "unexpected call", &runtime.ExitError{Code: 1}
	}
}

// fakeGuardApply answers `exec HOLDER ... internal guard apply --allow
// EP...` as the helper would after installing the rules.
func fakeGuardApply(argv []string) string {
	var allow []netip.AddrPort
	for i, a := range argv {
		if a == "--allow" && i+1 < len(argv) {
			ap, err := netip.ParseAddrPort(argv[i+1])
			if err != nil {
				return "bad --allow " + argv[i+1]
			}
			allow = append(allow, ap)
		}
	}
	rs, err := guard.Rules(allow)
	if err != nil {
		return err.Error()
	}
	return strings.Join(rs.Lines(), "\n") + "\n"
}

// inspectAgent reads what a container would get from its argv.
func inspectAgent(t *testing.T, c runtime.Command) (*agentRun, error) {
	run := &agentRun{argv: c.Args, env: map[string]string{}, mounts: map[string]string{}}
	for i := 0; i+1 < len(c.Args); i++ {
		switch c.Args[i] {
		case "--env-file":
			run.envFile = c.Args[i+1]
			st, err := os.Stat(c.Args[i+1])
			if err != nil {
				return nil, err
			}
			run.envMode = st.Mode().Perm()
			raw, err := os.ReadFile(c.Args[i+1])
			if err != nil {
				return nil, err
			}
			sc := bufio.NewScanner(bytes.NewReader(raw))
			for sc.Scan() {
				k, v, _ := strings.Cut(sc.Text(), "=")
				run.env[k] = v
			}
		case "--mount":
			var src, dst string
			ro := false
			for _, kv := range strings.Split(c.Args[i+1], ",") {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "source":
					src = v
				case "target":
					dst = v
				case "readonly":
					ro = true
				}
			}
			if ro {
				src += ",ro"
			}
			run.mounts[dst] = src
		}
	}
	return run, nil
}

// visit plays the agent: it calls through the proxy and the API relays
// and reads the mounted files.
func (run *agentRun) visit() error {
	pu, err := url.Parse(run.env["HTTPS_PROXY"])
	if err != nil {
		return err
	}
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}, Timeout: 10 * time.Second}
	resp, err := c.Get("http://api.example.test/v1/items")
	if err != nil {
		return fmt.Errorf("calling through the proxy relay: %w", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	run.proxied = string(b)
	direct := &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 10 * time.Second}
	resp, err = direct.Get(run.env["AILERON_API_URL"] + "/health")
	if err != nil {
		return fmt.Errorf("calling the API relay: %w", err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	run.api = string(b)
	src := func(target string) string { return strings.TrimSuffix(run.mounts[target], ",ro") }
	tools, err := os.ReadFile(src(SandboxToolsFile))
	if err != nil {
		return err
	}
	run.toolsTxt = string(tools)
	bundle, err := os.ReadFile(src(SandboxSystemBundle))
	if err != nil {
		return err
	}
	run.bundle = string(bundle)
	return filepath.WalkDir(src(SandboxManifestsDir), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(src(SandboxManifestsDir), p)
			run.manifests = append(run.manifests, rel)
		}
		return err
	})
}

// fakeImageUID is the uid and gid of the fake image's user: the test's
// own, or 1000 when the test runs as root (launchTestConfig then gives the
// project to 1000), so the agent keeps the image user.
var fakeImageUID = map[bool]int{true: 1000, false: os.Getuid()}[os.Getuid() == 0]

func launchTestConfig(t *testing.T, rt runtime.Runtime, sessions *fakeSessions, d DaemonEndpoints, conn policy.Connector, store string) LaunchConfig {
	t.Helper()
	project := t.TempDir()
	if os.Getuid() == 0 {
		if err := os.Chown(project, 1000, 1000); err != nil {
			t.Fatal(err)
		}
	} else if os.Getgid() != os.Getuid() {
		t.Skip("the fake image user needs uid == gid")
	}
	plan, err := NewPlan(project, PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return LaunchConfig{
		Logger: zaptest.NewLogger(t), Runtime: rt, Plan: plan, BuildPolicy: BuildAuto,
		Sessions: sessions, Daemon: d, Connectors: []policy.Connector{conn}, StoreDir: store,
		Agent: []string{"agent", "--flag", "arg"}, GuardBinary: "/usr/local/bin/aileron-proxy",
	}
}

// TestLaunchAssemblesSandbox runs Launch against a recording fake runtime
// and checks the container it asks for: environment only in the 0600 env
// file, gateway addresses only, read-only mounts, working relays, the
// agent's exit status passed through and everything removed afterwards.
func TestLaunchAssemblesSandbox(t *testing.T) {
	d := fakeDaemon(t)
	sessions := &fakeSessions{proxyAddr: d.ProxyAddr}
	conn, store := testConnector(t, "testapi")
	var run *agentRun
	var runErr error
	f := &fakeExec{respond: respondLikeDocker(func(c runtime.Command) error {
		run, runErr = inspectAgent(t, c)
		if runErr == nil {
			runErr = run.visit()
		}
		return &runtime.ExitError{Code: 3}
	})}
	rt := newFakeRuntime(t, runtime.Docker, f)
	cfg := launchTestConfig(t, rt, sessions, d, conn, store)
	var stderr bytes.Buffer
	cfg.Stderr = &stderr

	code, err := Launch(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Launch: %v\nstderr: %s", err, stderr.String())
	}
	if code != 3 {
		t.Errorf("Launch = %d, want the agent's 3", code)
	}
	if runErr != nil || run == nil {
		t.Fatalf("the agent container: %v", runErr)
	}

	// No secret in any argv; the env file held them, 0600.
	for i := range f.calls {
		argv := f.argv(i)
		if strings.Contains(argv, launchTestToken) || strings.Contains(argv, launchTestSecret) {
			t.Errorf("argv %d holds a secret: %s", i, argv)
		}
	}
	if run.envMode != 0o600 {
		t.Errorf("env file mode = %v, want 0600", run.envMode)
	}
	if _, err := os.Stat(run.envFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("env file %s, which holds the session's secrets, still exists after Launch (%v)", run.envFile, err)
	}
	daemonProxyPort := d.ProxyAddr[strings.LastIndex(d.ProxyAddr, ":"):]
	apiU, _ := url.Parse(d.APIURL)
	for k, v := range run.env {
		if strings.HasSuffix(v, daemonProxyPort) || strings.Contains(v, apiU.Host) {
			t.Errorf("env %s=%s names the daemon's own address, not a relay", k, redactSecrets(v))
		}
	}
	want := map[string]string{
		"AILERON_TOKEN": launchTestToken, "AILERON_SESSION_ID": launchTestID,
		"AILERON_TOOLS_FILE": "/etc/aileron/tools.txt", "AILERON_SHIMS_DIR": "/usr/local/bin",
		"SSL_CERT_FILE": "/etc/aileron/ca-bundle.pem", "CURL_CA_BUNDLE": "/etc/aileron/ca-bundle.pem",
		"REQUESTS_CA_BUNDLE": "/etc/aileron/ca-bundle.pem", "GIT_SSL_CAINFO": "/etc/aileron/ca-bundle.pem",
		"NODE_EXTRA_CA_CERTS": "/etc/aileron/ca.pem", "NODE_USE_ENV_PROXY": "1",
		"NO_PROXY": "127.0.0.1,host.docker.internal,localhost,127.0.0.1,::1",
	}
	for k, v := range want {
		if run.env[k] != v {
			t.Errorf("env %s = %q, want %q", k, redactSecrets(run.env[k]), v)
		}
	}
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"} {
		u, err := url.Parse(run.env[k])
		if err != nil || u.User.String() != launchTestID+":"+launchTestSecret || !strings.HasPrefix(u.Host, "127.0.0.1:") {
			t.Errorf("env %s = %q, want the session credential at the gateway relay", k, redactSecrets(run.env[k]))
		}
	}
	if u := run.env["AILERON_API_URL"]; !strings.HasPrefix(u, "http://127.0.0.1:") || !strings.HasSuffix(u, "/v1") {
		t.Errorf("AILERON_API_URL = %q, want http://<gateway>:<relay>/v1", u)
	}

	// The relays reach the daemon, with the credential and an IP Host.
	if !strings.Contains(run.proxied, "proxied http://api.example.test/v1/items for "+launchTestID+" ok=true") {
		t.Errorf("through the proxy relay: %q", run.proxied)
	}
	apiRelay := strings.TrimSuffix(strings.TrimPrefix(run.env["AILERON_API_URL"], "http://"), "/v1")
	if run.api != "api /v1/health host="+apiRelay {
		t.Errorf("through the API relay: %q, want the gateway address as Host", run.api)
	}

	// Argv: the agent as entrypoint, image user, network, pinned alias.
	argv := strings.Join(run.argv, " ")
	for _, w := range []string{
		"--name aileron-" + launchTestID, "--label " + LabelSession + "=" + launchTestID,
		"--network container:aileron-" + launchTestID + "-guard",
		"--cap-drop ALL --security-opt no-new-privileges --pids-limit 4096",
		"--workdir /home/agent/workspace", "--entrypoint agent", "--interactive",
		cfg.Plan.Image + " --flag arg",
	} {
		if !strings.Contains(argv, w) {
			t.Errorf("run argv lacks %q:\n%s", w, argv)
		}
	}
	for _, w := range []string{"--user", "--tty", "--rm=false", "--add-host", "--cap-add", "--privileged"} {
		if strings.Contains(argv, w) {
			t.Errorf("run argv has %q:\n%s", w, argv)
		}
	}

	// Mounts: project read-write, everything else read-only.
	if m := run.mounts[WorkspacePath]; m != cfg.Plan.ProjectDir {
		t.Errorf("workspace mount = %q, want %s read-write", m, cfg.Plan.ProjectDir)
	}
	for _, target := range []string{SandboxToolsFile, SandboxShimsDir + "/testapi", SandboxCAFile, SandboxCABundle, SandboxSystemBundle, SandboxManifestsDir, SandboxBinary} {
		if !strings.HasSuffix(run.mounts[target], ",ro") {
			t.Errorf("mount %s = %q, want read-only", target, run.mounts[target])
		}
	}
	if m := run.mounts[SandboxBinary]; m != cfg.GuardBinary+",ro" {
		t.Errorf("binary mount = %q, want the guard's static binary %s read-only", m, cfg.GuardBinary)
	}
	if len(run.mounts) != 8 {
		t.Errorf("mounts = %v, want 8", run.mounts)
	}
	if !strings.HasPrefix(run.toolsTxt, "testapi local://test/echo") {
		t.Errorf("tools.txt = %q", run.toolsTxt)
	}
	if !strings.HasPrefix(run.bundle, launchTestCA) {
		t.Errorf("the system bundle mount does not start with the session CA: %.80q", run.bundle)
	}
	if len(run.manifests) != 1 || run.manifests[0] != filepath.Join("sha256", strings.TrimPrefix(launchTestHash, "sha256:"), policy.SpecFileName) {
		t.Errorf("manifests = %v", run.manifests)
	}

	// Session: the rendered connectors, ended with the exit status.
	if len(sessions.created) != 1 || strings.Join(sessions.created[0].Connectors, ",") != "local://test/echo" ||
		sessions.created[0].Agent == "" || !filepath.IsAbs(sessions.created[0].Project) {
		t.Errorf("sessions created = %+v", sessions.created)
	}
	if strings.Join(sessions.ended, ";") != launchTestID+" exit=3" {
		t.Errorf("sessions ended = %q, want one with exit=3", sessions.ended)
	}

	// Teardown: container and network removed after the run, files gone,
	// relays closed.
	var sawRun, sawRm, sawGuardRm, sawNetRm bool
	for i := range f.calls {
		a := f.calls[i].Args
		switch {
		case a[0] == "run" && !strings.Contains(strings.Join(a, " "), "--network none") && !slices.Contains(a, "--detach"):
			sawRun = true
		case sawRun && a[0] == "rm" && a[len(a)-1] == "aileron-"+launchTestID:
			sawRm = true
		case sawRm && a[0] == "rm" && a[len(a)-1] == "aileron-"+launchTestID+"-guard":
			sawGuardRm = true
		case sawGuardRm && len(a) == 3 && a[0] == "network" && a[1] == "rm" && a[2] == "aileron-"+launchTestID:
			sawNetRm = true
		}
	}
	if !sawRun || !sawRm || !sawGuardRm || !sawNetRm {
		t.Errorf("want run, then rm --force of the agent, then of the guard's holder, then network rm; calls:\n%s", allArgv(f))
	}
	tmp := filepath.Dir(filepath.Dir(strings.TrimSuffix(run.mounts[SandboxToolsFile], ",ro")))
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary directory %s still exists (%v)", tmp, err)
	}
	if c, err := net.DialTimeout("tcp", apiRelay, time.Second); err == nil {
		c.Close()
		t.Errorf("the API relay %s still accepts after Launch", apiRelay)
	}

	banner := stderr.String()
	for _, w := range []string{"session  " + launchTestID, "tier     0 (base)", "image    " + cfg.Plan.Image,
		"runtime  docker (--sandbox=docker)", "tools    testapi (local://test/echo)",
		"aileron-proxy audit tail -f --session " + launchTestID,
		"guard    on: TCP to 127.0.0.1:", fmt.Sprintf("user     agent (uid %d, gid %d), the image's user, who owns the project", fakeImageUID, fakeImageUID), "hardened all capabilities dropped, no-new-privileges, pids limit 4096, never privileged"} {
		if !strings.Contains(banner, w) {
			t.Errorf("banner lacks %q:\n%s", w, banner)
		}
	}
	if strings.Contains(banner, launchTestSecret) || strings.Contains(banner, launchTestToken) {
		t.Error("the banner holds a secret")
	}
}

func allArgv(f *fakeExec) string {
	var b strings.Builder
	for i := range f.calls {
		b.WriteString(redactSecrets(f.argv(i)) + "\n")
	}
	return b.String()
}

func redactSecrets(s string) string {
	return strings.NewReplacer(launchTestToken, "<token>", launchTestSecret, "<secret>").Replace(s)
}

// TestLaunchConflictStopsFirst: a tool named like the agent stops the
// launch before any session or runtime call.
func TestLaunchConflictStopsFirst(t *testing.T) {
	d := fakeDaemon(t)
	sessions := &fakeSessions{proxyAddr: d.ProxyAddr}
	conn, store := testConnector(t, "mytool")
	f := &fakeExec{respond: respondLikeDocker(func(runtime.Command) error { return nil })}
	cfg := launchTestConfig(t, newFakeRuntime(t, runtime.Podman, f), sessions, d, conn, store)
	cfg.Agent = []string{"/usr/local/bin/mytool", "--yes"}
	code, err := Launch(context.Background(), cfg)
	var ce *shims.ConflictError
	if !errors.As(err, &ce) || len(ce.Conflicts) != 1 || ce.Conflicts[0].Kind != shims.ConflictAgent {
		t.Fatalf("Launch = %d, %v; want an agent-command conflict", code, err)
	}
	if !strings.Contains(err.Error(), `would shadow the agent command "mytool"`) || !strings.Contains(err.Error(), "nothing was started") {
		t.Errorf("error = %q, want the conflict, its fix and that nothing started", err)
	}
	if len(f.calls) != 0 {
		t.Errorf("the runtime was called before the conflict stopped the launch:\n%s", allArgv(f))
	}
	if len(sessions.created) != 0 {
		t.Errorf("a session was created: %+v", sessions.created)
	}

	// An unknown --connector stops it the same way.
	cfg.Agent = []string{"agent"}
	cfg.ConnectorFQNs = []string{"local://test/nope"}
	if _, err := Launch(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), `"local://test/nope" is not an active installed connector`) || !strings.Contains(err.Error(), "local://test/echo") {
		t.Errorf("Launch with an unknown connector = %v", err)
	}
	if len(f.calls) != 0 || len(sessions.created) != 0 {
		t.Error("an unknown connector reached the runtime or the daemon")
	}
}

// TestLaunchCheckFailureEndsSession: a failed validation stops before the
// network, and the session is ended without an exit status.
func TestLaunchCheckFailureEndsSession(t *testing.T) {
	d := fakeDaemon(t)
	sessions := &fakeSessions{proxyAddr: d.ProxyAddr}
	conn, store := testConnector(t, "testapi")
	respond := respondLikeDocker(func(runtime.Command) error { t.Error("the agent ran despite a failed check"); return nil })
	f := &fakeExec{respond: func(c runtime.Command) (string, string, error) {
		failed := strings.Replace(checkOK, "agent:ok:/usr/bin/agent", "agent:fail", 1)
		if c.Args[0] == "run" && slices.ContainsFunc(c.Args, isProbeAndCheck) {
			return fmt.Sprintf("aileron-user:%d:%d:agent\n", fakeImageUID, fakeImageUID) + failed, "", nil
		}
		if c.Args[0] == "run" && !slices.Contains(c.Args, probeUserScript) {
			return failed, "", nil
		}
		return respond(c)
	}}
	cfg := launchTestConfig(t, newFakeRuntime(t, runtime.Docker, f), sessions, d, conn, store)
	_, err := Launch(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), `agent command "agent" is not on PATH`) {
		t.Fatalf("Launch = %v, want the failed agent check", err)
	}
	if strings.Contains(allArgv(f), "network create") {
		t.Errorf("a network was created after a failed check:\n%s", allArgv(f))
	}
	if strings.Join(sessions.ended, ";") != launchTestID {
		t.Errorf("sessions ended = %q, want %s without an exit status", sessions.ended, launchTestID)
	}
}

// TestLaunchStopsOnCancel: when ctx ends and the agent does not exit
// within StopGrace, its container is removed and Launch returns.
func TestLaunchStopsOnCancel(t *testing.T) {
	d := fakeDaemon(t)
	sessions := &fakeSessions{proxyAddr: d.ProxyAddr}
	conn, store := testConnector(t, "testapi")
	started := make(chan struct{})
	removed := make(chan struct{})
	var once sync.Once
	respond := respondLikeDocker(func(runtime.Command) error {
		close(started)
		select {
		case <-removed: // the runtime kills a force-removed container
			return &runtime.ExitError{Code: 137}
		case <-time.After(30 * time.Second):
			return errors.New("never removed")
		}
	})
	f := &fakeExec{respond: func(c runtime.Command) (string, string, error) {
		if c.Args[0] == "rm" {
			once.Do(func() { close(removed) })
		}
		return respond(c)
	}}
	cfg := launchTestConfig(t, newFakeRuntime(t, runtime.Docker, f), sessions, d, conn, store)
	cfg.StopGrace = 50 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	done := make(chan struct{})
	var code int
	var err error
	go func() {
		defer close(done)
		code, err = Launch(ctx, cfg)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Launch did not return after its context ended")
	}
	if err != nil || code != 137 {
		t.Errorf("Launch = %d, %v; want 137 from the removed container", code, err)
	}
	if strings.Join(sessions.ended, ";") != launchTestID+" exit=137" {
		t.Errorf("sessions ended = %q", sessions.ended)
	}
	if !strings.Contains(allArgv(f), "network rm aileron-"+launchTestID) {
		t.Errorf("the network was not removed:\n%s", allArgv(f))
	}
}

// isProbeAndCheck reports whether arg is the script of the run that finds
// the image's user and checks the image at once (checkAndProbeUser).
func isProbeAndCheck(arg string) bool { return strings.HasPrefix(arg, probeUserScript+"\n") }

// TestLaunchRunsTheImageOnceBeforeTheAgent: finding the image's user and
// checking the image are one run of it (checkAndProbeUser) when the user
// is not remapped, as here (the fake image's user owns the project, or the
// project is root's).
func TestLaunchRunsTheImageOnceBeforeTheAgent(t *testing.T) {
	d := fakeDaemon(t)
	sessions := &fakeSessions{proxyAddr: d.ProxyAddr}
	conn, store := testConnector(t, "testapi")
	f := &fakeExec{respond: respondLikeDocker(func(runtime.Command) error { return nil })}
	cfg := launchTestConfig(t, newFakeRuntime(t, runtime.Docker, f), sessions, d, conn, store)
	if _, err := Launch(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	var before int
	for i := range f.calls {
		a := f.calls[i].Args
		if a[0] == "run" && slices.Contains(a, "none") && !slices.Contains(a, "--detach") {
			before++
		}
	}
	if before != 1 {
		t.Errorf("the image ran %d times before the agent, want once:\n%s", before, allArgv(f))
	}
}
