package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/api"
	"github.com/aileron-dev/aileron-proxy/approval"
	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/policy"
	"github.com/aileron-dev/aileron-proxy/session"
)

const cliTestSpec = `{"schema_version": "aileron.connector.v1",
  "connector": {"fqn": "github://acme/cli-test"},
  "tools": [{"name": "clitest", "operations": [
    {"name": "get", "method": "GET", "path": "/x", "hosts": ["api.cli-test.example"]}]}]}`

const cliAdminToken = "cli-admin-token-0123456789abcdef"

type nopAudit struct{}

func (nopAudit) Record(audit.Event) {}

// cliDaemon is a real API server on loopback with a daemon.json in a fresh
// $AILERON_HOME, standing in for `aileron-proxy serve`.
type cliDaemon struct {
	home      string
	reg       *session.Registry
	broker    *approval.Broker
	requested chan approval.Pending
}

// newCLIDaemon starts it; mutate, when given, adjusts the API's config.
func newCLIDaemon(t *testing.T, mutate ...func(*api.Config)) *cliDaemon {
	t.Helper()
	spec, _, err := policy.ParseSpec([]byte(cliTestSpec))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := policy.Compile([]policy.Connector{{Spec: spec}})
	if err != nil {
		t.Fatal(err)
	}
	d := &cliDaemon{
		home:      t.TempDir(),
		reg:       session.NewRegistry(session.RegistryConfig{}),
		requested: make(chan approval.Pending, 16),
	}
	d.broker = approval.NewBroker(approval.BrokerConfig{Timeout: time.Minute, OnRequested: func(p approval.Pending) { d.requested <- p }})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadProxy := l.Addr().String()
	l.Close()
	promReg := prometheus.NewRegistry()
	cfg := api.Config{
		Logger: zap.NewNop(), Sessions: d.reg, Policy: func() *policy.Snapshot { return snap },
		Approvals: d.broker, Audit: nopAudit{}, AdminToken: cliAdminToken, ProxyAddr: deadProxy,
		ProxyInternalKey: "k", Registerer: promReg, Gatherer: promReg,
	}
	for _, m := range mutate {
		m(&cfg)
	}
	srv, err := api.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	raw, _ := json.Marshal(api.DaemonInfo{APIURL: hs.URL, ProxyAddr: deadProxy, AdminToken: cliAdminToken, PID: os.Getpid()})
	if err := os.WriteFile(filepath.Join(d.home, "daemon.json"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestSessionCommands(t *testing.T) {
	d := newCLIDaemon(t)

	out, errOut, code := runCLI(t, d.home, "", nil, "session", "create", "--connector", "github://acme/cli-test", "--ttl", "2h", "--json")
	if code != exitOK {
		t.Fatalf("session create: exit %d: %s", code, errOut)
	}
	var created api.CreatedSession
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	if _, ok := d.reg.Get(created.ID); !ok || created.APIToken == "" || !strings.Contains(created.ProxyURL, created.ID+":") {
		t.Errorf("created %+v", created)
	}
	if d := time.Until(created.ExpiresAt); d < 119*time.Minute || d > 121*time.Minute {
		t.Errorf("expires in %v, want 2h", d)
	}

	out, _, code = runCLI(t, d.home, "", nil, "session", "create")
	if code != exitOK || !strings.Contains(out, "export HTTPS_PROXY='http://ses_") || !strings.Contains(out, "api_token:") {
		t.Errorf("human create output (exit %d):\n%s", code, out)
	}

	out, _, code = runCLI(t, d.home, "", nil, "session", "list")
	if code != exitOK || !strings.Contains(out, created.ID) || !strings.Contains(out, "github://acme/cli-test") {
		t.Errorf("session list (exit %d):\n%s", code, out)
	}
	if strings.Contains(out, created.APIToken) {
		t.Error("session list prints a secret")
	}
	out, _, code = runCLI(t, d.home, "", nil, "session", "list", "--json")
	var infos []api.SessionInfo
	if err := json.Unmarshal([]byte(out), &infos); err != nil || code != exitOK || len(infos) != 2 {
		t.Errorf("session list --json (exit %d, %v):\n%s", code, err, out)
	}

	out, errOut, code = runCLI(t, d.home, "", nil, "session", "end", created.ID)
	if code != exitOK || !strings.Contains(out, "ended") {
		t.Errorf("session end: exit %d %s %s", code, out, errOut)
	}
	if _, ok := d.reg.Get(created.ID); ok {
		t.Error("the session is still live")
	}
	_, errOut, code = runCLI(t, d.home, "", nil, "session", "end", created.ID)
	if code != exitFailure || !strings.Contains(errOut, "session_ended") {
		t.Errorf("second end: exit %d %s", code, errOut)
	}

	_, errOut, code = runCLI(t, d.home, "", nil, "session", "create", "--connector", "github://acme/nope")
	if code != exitFailure || !strings.Contains(errOut, "github://acme/cli-test") {
		t.Errorf("unknown connector: exit %d, stderr %s (want the available connectors)", code, errOut)
	}
}

func TestSessionUsageErrors(t *testing.T) {
	d := newCLIDaemon(t)
	tests := []struct {
		name string
		args []string
	}{
		{"bad ttl", []string{"session", "create", "--ttl", "soon"}},
		{"end without id", []string{"session", "end"}},
		{"list with args", []string{"session", "list", "x"}},
		{"unknown subcommand", []string{"session", "frobnicate"}},
		{"approvals bad state", []string{"approvals", "list", "--state", "old"}},
		{"approve bad remember", []string{"approvals", "approve", "apr_x", "--remember", "forever"}},
		{"deny two ids", []string{"approvals", "deny", "a", "b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, errOut, code := runCLI(t, d.home, "", nil, tc.args...); code != exitUsage {
				t.Errorf("exit %d, want %d (usage): %s", code, exitUsage, errOut)
			}
		})
	}
}

func TestNoDaemon(t *testing.T) {
	home := t.TempDir()
	for _, args := range [][]string{{"session", "list"}, {"session", "create"}, {"approvals", "list"}, {"approvals", "deny", "apr_x"}} {
		_, errOut, code := runCLI(t, home, "", nil, args...)
		want := "no aileron-proxy daemon is running (daemon.json not found); start one with `aileron-proxy serve`"
		if code != exitFailure || !strings.Contains(errOut, want) {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
	// A stale daemon.json names the file and the pid.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	raw, _ := json.Marshal(api.DaemonInfo{APIURL: "http://" + addr, AdminToken: "x", PID: 424242})
	if err := os.WriteFile(filepath.Join(home, "daemon.json"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := runCLI(t, home, "", nil, "session", "list")
	if code != exitFailure || !strings.Contains(errOut, "424242") || !strings.Contains(errOut, "aileron-proxy serve") {
		t.Errorf("stale daemon.json: exit %d, stderr %q", code, errOut)
	}
}

func TestApprovalsCommands(t *testing.T) {
	d := newCLIDaemon(t)
	hold := func(op string) <-chan approval.Outcome {
		ch := make(chan approval.Outcome, 1)
		go func() {
			ch <- d.broker.Await(context.Background(), approval.Request{SessionID: "ses_cli", ConnectorFQN: "github://acme/cli-test",
				Tool: "clitest", Operation: op, Method: "POST", Host: "api.cli-test.example:443", Path: "/x",
				Fields: map[string]string{"repo": "w"}})
		}()
		return ch
	}
	pendingID := func(op string) string {
		t.Helper()
		select {
		case p := <-d.requested:
			if p.Operation != op {
				t.Fatalf("pending approval for %s, want %s", p.Operation, op)
			}
			return p.ID
		case <-time.After(5 * time.Second):
			t.Fatalf("no pending approval for %s", op)
			return ""
		}
	}
	wait := func(ch <-chan approval.Outcome) approval.Outcome {
		t.Helper()
		select {
		case o := <-ch:
			return o
		case <-time.After(5 * time.Second):
			t.Fatal("Await did not return")
			return ""
		}
	}

	a1 := hold("op.approve")
	id1 := pendingID("op.approve")
	a2 := hold("op.deny")
	id2 := pendingID("op.deny")

	out, errOut, code := runCLI(t, d.home, "", nil, "approvals", "list")
	if code != exitOK || !strings.Contains(out, id1) || !strings.Contains(out, id2) || !strings.Contains(out, "repo=w") ||
		!strings.Contains(out, "POST api.cli-test.example:443/x") {
		t.Errorf("approvals list (exit %d %s):\n%s", code, errOut, out)
	}
	out, _, _ = runCLI(t, d.home, "", nil, "approvals", "list", "--json")
	var list []approval.Pending
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 2 {
		t.Errorf("approvals list --json: %v\n%s", err, out)
	}

	out, errOut, code = runCLI(t, d.home, "", nil, "approvals", "approve", id1, "--remember", "session")
	if code != exitOK || !strings.Contains(out, "approved") {
		t.Errorf("approve: exit %d %s %s", code, out, errOut)
	}
	if o := wait(a1); o != approval.OutcomeApproved {
		t.Errorf("approved request: %q", o)
	}
	out, errOut, code = runCLI(t, d.home, "", nil, "approvals", "deny", id2)
	if code != exitOK || !strings.Contains(out, "denied") {
		t.Errorf("deny: exit %d %s %s", code, out, errOut)
	}
	if o := wait(a2); o != approval.OutcomeDenied {
		t.Errorf("denied request: %q", o)
	}
	_, errOut, code = runCLI(t, d.home, "", nil, "approvals", "deny", id2)
	if code != exitFailure || !strings.Contains(errOut, "approval_already_decided") {
		t.Errorf("deciding twice: exit %d %s", code, errOut)
	}
	out, _, _ = runCLI(t, d.home, "", nil, "approvals", "list")
	if !strings.Contains(out, "no pending approvals") {
		t.Errorf("list after deciding:\n%s", out)
	}
	out, _, _ = runCLI(t, d.home, "", nil, "approvals", "list", "--state", "decided")
	if !strings.Contains(out, id1) || !strings.Contains(out, "approved") || !strings.Contains(out, "denied") {
		t.Errorf("decided list:\n%s", out)
	}
}
