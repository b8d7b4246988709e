package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/policy"
)

const (
	connDemoSpec   = "../../configs/connectors/demo.aileron.connector.v1.json"
	connGitHubSpec = "../../configs/connectors/github.aileron.connector.v1.json"
	connManyErrors = "testdata/many-errors.aileron.connector.v1.json" // a copy of the shared fixture that policy/testdata/many-errors.golden describes
)

func connWriteSpec(t *testing.T, doc string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "spec.json")
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func connSpecDoc(fqn, version, tool string) string {
	return `{"schema_version": "aileron.connector.v1", "connector": {"fqn": "` + fqn + `", "version": "` + version + `"},
  "tools": [{"name": "` + tool + `", "operations": [{"name": "get", "method": "GET", "path": "/x", "hosts": ["api.example.com"]}]}]}`
}

func TestConnectorInstallListRemove(t *testing.T) {
	home := t.TempDir()
	hash, err := policy.PackageHash(connDemoSpec)
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCLI(t, home, "", nil, "connector", "install", connDemoSpec)
	if code != exitOK || stdout != "installed local://aileron/demo 1.0.0 "+hash+"\n" || stderr != "" {
		t.Fatalf("install: exit %d\nstdout: %q\nstderr: %q", code, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(home, "store", "connectors", "sha256", strings.TrimPrefix(hash, "sha256:"), policy.SpecFileName)); err != nil {
		t.Errorf("installed spec not in the store: %v", err)
	}
	// Idempotent.
	if stdout2, _, code := runCLI(t, home, "", nil, "connector", "install", connDemoSpec); code != exitOK || stdout2 != stdout {
		t.Errorf("second install: exit %d, stdout %q; want %q", code, stdout2, stdout)
	}
	if _, _, code := runCLI(t, home, "", nil, "connector", "install", connGitHubSpec); code != exitOK {
		t.Fatalf("install github: exit %d", code)
	}

	stdout, stderr, code = runCLI(t, home, "", nil, "connector", "list")
	if code != exitOK || stderr != "" {
		t.Fatalf("list: exit %d, stderr %q", code, stderr)
	}
	lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("list printed %d lines, want header + 2:\n%s", len(lines), stdout)
	}
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != "FQN VERSION HASH STATUS TOOLS/OPERATIONS" {
		t.Errorf("list header = %q", lines[0])
	}
	if got := strings.Join(strings.Fields(lines[2]), " "); got != "local://aileron/demo 1.0.0 "+hash[:len("sha256:")+12]+" ok demo (4 operations)" {
		t.Errorf("list row = %q", got)
	}
	if !strings.HasPrefix(lines[1], "github://acme/aileron-connector-github") || !strings.Contains(lines[1], "gh-api (6 operations)") {
		t.Errorf("list row = %q, want the github connector first (sorted by FQN)", lines[1])
	}

	stdout, _, code = runCLI(t, home, "", nil, "connector", "list", "--json")
	if code != exitOK {
		t.Fatalf("list --json: exit %d", code)
	}
	var entries []struct {
		FQN, Version, Hash, Dir, Status string
		Active                          bool
		Tools                           []struct {
			Name, Command string
			Operations    []struct {
				Name, Method, Path, Approval string
				Hosts                        []string
				Proxyable                    bool
			}
		}
	}
	if err := json.Unmarshal([]byte(stdout), &entries); err != nil {
		t.Fatalf("list --json is not JSON: %v\n%s", err, stdout)
	}
	if len(entries) != 2 {
		t.Fatalf("list --json = %d entries, want 2", len(entries))
	}
	demo := entries[1]
	if demo.FQN != "local://aileron/demo" || demo.Version != "1.0.0" || demo.Hash != hash || demo.Status != "ok" || !demo.Active ||
		!strings.HasSuffix(demo.Dir, strings.TrimPrefix(hash, "sha256:")) || len(demo.Tools) != 1 || demo.Tools[0].Command != "demo" {
		t.Fatalf("list --json demo entry = %+v", demo)
	}
	ops := demo.Tools[0].Operations
	if len(ops) != 4 || ops[3].Name != "items.update" || ops[3].Method != "PUT" || ops[3].Path != "/v1/items/{id}" ||
		ops[3].Approval != "required" || !ops[3].Proxyable || ops[3].Hosts[0] != "api.demo.localhost:8443" {
		t.Errorf("list --json demo operations = %+v", ops)
	}

	stdout, stderr, code = runCLI(t, home, "", nil, "connector", "remove", "local://aileron/demo")
	if code != exitOK || stdout != "removed local://aileron/demo 1.0.0 "+hash+"\n" || stderr != "" {
		t.Errorf("remove: exit %d\nstdout: %q\nstderr: %q", code, stdout, stderr)
	}
	stdout, _, code = runCLI(t, home, "", nil, "connector", "remove", "github://acme/aileron-connector-github")
	if code != exitOK || !strings.HasPrefix(stdout, "removed github://acme/aileron-connector-github 0.4.0 sha256:") {
		t.Errorf("remove github: exit %d, stdout %q", code, stdout)
	}
	stdout, stderr, code = runCLI(t, home, "", nil, "connector", "list")
	if code != exitOK || stdout != "" || !strings.Contains(stderr, "no connectors installed; install one with: aileron-proxy connector install PATH") {
		t.Errorf("list of an empty store: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if stdout, _, _ := runCLI(t, home, "", nil, "connector", "list", "--json"); stdout != "[]\n" {
		t.Errorf("list --json of an empty store = %q, want []", stdout)
	}
	_, stderr, code = runCLI(t, home, "", nil, "connector", "remove", "local://aileron/demo")
	if code != exitFailure || !strings.Contains(stderr, `error: removing "local://aileron/demo": no installed connector matches; run "aileron-proxy connector list"`) {
		t.Errorf("remove of a removed connector: exit %d, stderr %q", code, stderr)
	}
}

func TestConnectorInstallInvalid(t *testing.T) {
	home := t.TempDir()
	stdout, stderr, code := runCLI(t, home, "", nil, "connector", "install", connManyErrors)
	if code != exitFailure || stdout != "" {
		t.Fatalf("install invalid: exit %d, stdout %q", code, stdout)
	}
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	if len(lines) != 15 {
		t.Fatalf("install invalid printed %d stderr lines, want 14 problems and the error:\n%s", len(lines), stderr)
	}
	if lines[5] != `tools[1].operations[0].hosts[0]: "https://api.example.com/path" must be host[:port] without a scheme or path` {
		t.Errorf("problem line = %q", lines[5])
	}
	if want := "error: " + connManyErrors + " is not a valid connector spec (14 problems); nothing was installed"; lines[14] != want {
		t.Errorf("last line = %q, want %q", lines[14], want)
	}
	if _, err := os.Stat(filepath.Join(home, "store")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an invalid install wrote to the store: %v", err)
	}
	_, stderr, code = runCLI(t, home, "", nil, "connector", "install", connWriteSpec(t, "{\n  \"tools\": [1,,]\n}"))
	if code != exitFailure || !strings.Contains(stderr, "line 2, column 15: invalid character ','") {
		t.Errorf("install of broken JSON: exit %d, stderr %q", code, stderr)
	}
}

func TestConnectorValidate(t *testing.T) {
	home := t.TempDir()
	stdout, stderr, code := runCLI(t, home, "", nil, "connector", "validate", connDemoSpec)
	if code != exitOK || stdout != "valid: local://aileron/demo 1.0.0: 1 tool, 4 operations\n" || stderr != "" {
		t.Errorf("validate demo: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// configs/connectors holds flat spec files, not aileron.connector.v1.json.
	_, stderr, code = runCLI(t, home, "", nil, "connector", "validate", filepath.Dir(connDemoSpec))
	if code != exitFailure || !strings.Contains(stderr, "a package directory holds aileron.connector.v1.json at its root") {
		t.Errorf("validate of a directory without the spec: exit %d, stderr %q", code, stderr)
	}
	pkg := t.TempDir()
	warnDoc := `{"schema_version": "aileron.connector.v1", "$schema": "x", "connector": {"fqn": "local://me/w"},
	  "tools": [{"name": "w", "operations": [{"name": "later"}, {"name": "get", "method": "get", "path": "/x", "hosts": ["H.example"]}]}]}`
	os.WriteFile(filepath.Join(pkg, policy.SpecFileName), []byte(warnDoc), 0o644)
	stdout, stderr, code = runCLI(t, home, "", nil, "connector", "validate", pkg)
	want := `warning: ["$schema"]: unknown field "$schema" is ignored
warning: tools[0].operations[0]: not proxyable: it declares no method, path or hosts; the proxy refuses its calls until it declares method, path and hosts
valid: local://me/w unversioned: 1 tool, 2 operations (1 not proxyable)
`
	if code != exitOK || stdout != want || stderr != "" {
		t.Errorf("validate with warnings: exit %d\nstdout:\n%s\nwant:\n%s\nstderr: %q", code, stdout, want, stderr)
	}

	stdout, stderr, code = runCLI(t, home, "", nil, "connector", "validate", connManyErrors)
	golden, err := os.ReadFile("../../policy/testdata/many-errors.golden")
	if err != nil {
		t.Fatal(err)
	}
	// Same list as the policy golden file: warnings, then problems.
	var problems, warns []string
	for _, l := range strings.Split(strings.TrimRight(string(golden), "\n"), "\n") {
		if p, ok := strings.CutPrefix(l, "error: "); ok {
			problems = append(problems, p)
		} else {
			warns = append(warns, l)
		}
	}
	wantLines := append(warns, problems...)
	if code != exitFailure || stdout != strings.Join(wantLines, "\n")+"\n" {
		t.Errorf("validate many-errors: exit %d\nstdout:\n%s\nwant:\n%s", code, stdout, strings.Join(wantLines, "\n"))
	}
	if stderr != "error: "+connManyErrors+" is not a valid connector spec (14 problems)\n" {
		t.Errorf("validate many-errors stderr = %q", stderr)
	}

	stdout, stderr, code = runCLI(t, home, "", nil, "connector", "validate", connWriteSpec(t, "{\n  \"tools\": [1,,]\n}"))
	if code != exitFailure || stdout != "line 2, column 15: invalid character ',' looking for beginning of value\n" || !strings.HasSuffix(stderr, " is not valid JSON\n") {
		t.Errorf("validate broken JSON: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	_, stderr, code = runCLI(t, home, "", nil, "connector", "validate", filepath.Join(home, "missing.json"))
	if code != exitFailure || !strings.Contains(stderr, "error: reading spec: ") {
		t.Errorf("validate missing file: exit %d, stderr %q", code, stderr)
	}
}

func TestConnectorConflicts(t *testing.T) {
	home := t.TempDir()
	a := connWriteSpec(t, connSpecDoc("github://acme/a", "1.0.0", "shared"))
	b := connWriteSpec(t, connSpecDoc("github://acme/b", "2.0.0", "Shared"))
	if _, _, code := runCLI(t, home, "", nil, "connector", "install", a); code != exitOK {
		t.Fatal("install a failed")
	}
	stdout, stderr, code := runCLI(t, home, "", nil, "connector", "install", b)
	if code != exitFailure || stdout != "" || !strings.Contains(stderr, `tool command "shared" is already provided by github://acme/a 1.0.0`) ||
		!strings.Contains(stderr, `"aileron-proxy connector remove github://acme/a"`) {
		t.Errorf("conflicting install: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	stdout, stderr, code = runCLI(t, home, "", nil, "connector", "install", "--force", b)
	if code != exitOK || !strings.HasPrefix(stdout, "installed github://acme/b 2.0.0 sha256:") ||
		!strings.HasPrefix(stderr, "warning: github://acme/b is not active: conflict: tool command \"shared\" is provided by github://acme/a 1.0.0 (sha256:") {
		t.Errorf("install --force: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	stdout, _, _ = runCLI(t, home, "", nil, "connector", "list")
	if strings.Count(stdout, "conflict: tool command \"shared\"") != 2 {
		t.Errorf("list after --force = %s, want both connectors in conflict", stdout)
	}
	// Removing by short hash, as list shows it, resolves the conflict.
	var short string
	for _, l := range strings.Split(stdout, "\n") {
		if strings.HasPrefix(l, "github://acme/b") {
			short = strings.Fields(l)[2]
		}
	}
	stdout, _, code = runCLI(t, home, "", nil, "connector", "remove", short)
	if code != exitOK || !strings.HasPrefix(stdout, "removed github://acme/b 2.0.0 "+short) {
		t.Errorf("remove %s: exit %d, stdout %q", short, code, stdout)
	}
	stdout, _, _ = runCLI(t, home, "", nil, "connector", "list")
	if !regexp.MustCompile(`github://acme/a\s+1\.0\.0\s+sha256:[0-9a-f]{12}\s+ok\s+shared \(1 operation\)`).MatchString(stdout) {
		t.Errorf("list after remove = %q, want a ok", stdout)
	}
}

func TestConnectorUsageErrors(t *testing.T) {
	home := t.TempDir()
	tests := []struct {
		args []string
		msg  string
	}{
		{[]string{"connector", "install"}, "accepts 1 arg(s), received 0; usage: aileron-proxy connector install [--force] PATH"},
		{[]string{"connector", "install", "a", "b"}, "accepts 1 arg(s), received 2"},
		{[]string{"connector", "validate"}, "accepts 1 arg(s), received 0"},
		{[]string{"connector", "remove"}, "accepts 1 arg(s), received 0"},
		{[]string{"connector", "list", "extra"}, `unknown command "extra" for "aileron-proxy connector list"`},
		{[]string{"connector", "list", "--yaml"}, "unknown flag: --yaml"},
		{[]string{"connector", "frobnicate"}, `unknown command "frobnicate" for "aileron-proxy connector"`},
	}
	for _, tc := range tests {
		stdout, stderr, code := runCLI(t, home, "", nil, tc.args...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, tc.msg) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, code, stdout, stderr, tc.msg)
		}
	}
	stdout, _, code := runCLI(t, home, "", nil, "connector")
	if code != exitOK || !strings.Contains(stdout, "Available Commands:") {
		t.Errorf("connector alone: exit %d, want help", code)
	}
}
