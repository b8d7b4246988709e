package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// actWrite writes an action.md running items.list of the demo connector
// under dir/actions/<name>/ and returns dir.
func actWrite(t *testing.T, dir, name, version string) string {
	t.Helper()
	p := filepath.Join(dir, "actions", name, "action.md")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	doc := "+++\nname = \"" + name + "\"\nversion = \"" + version + "\"\n\n[[execute]]\nconnector = \"local://aileron/demo\"\nop = \"items.list\"\n\n[execute.args]\nlimit = 5\n\n[[inputs]]\nname = \"q\"\n+++\n"
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestActionInstallListRemove(t *testing.T) {
	home := t.TempDir()
	pkg := actWrite(t, t.TempDir(), "find-items", "1.0.0")
	// Without the connector the action is refused with its line.
	stdout, stderr, code := runCLI(t, home, "", nil, "action", "install", pkg)
	if code != exitFailure || !strings.Contains(stderr, "action.md:6: connector \"local://aileron/demo\" is not installed") || stdout != "" {
		t.Fatalf("install without connector: exit %d\nstdout: %q\nstderr: %q", code, stdout, stderr)
	}
	if _, _, code := runCLI(t, home, "", nil, "connector", "install", connDemoSpec); code != exitOK {
		t.Fatalf("connector install: exit %d", code)
	}
	if stdout, _, code := runCLI(t, home, "", nil, "action", "validate", pkg); code != exitOK || stdout != "valid: find-items 1.0.0: local://aileron/demo items.list\n" {
		t.Fatalf("validate: exit %d, stdout %q", code, stdout)
	}
	stdout, stderr, code = runCLI(t, home, "", nil, "action", "install", pkg)
	if code != exitOK || !strings.HasPrefix(stdout, "installed find-items 1.0.0 sha256:") || stderr != "" {
		t.Fatalf("install: exit %d\nstdout: %q\nstderr: %q", code, stdout, stderr)
	}
	if again, _, _ := runCLI(t, home, "", nil, "action", "install", pkg); again != stdout {
		t.Errorf("second install printed %q, want %q (idempotent)", again, stdout)
	}
	newer := actWrite(t, t.TempDir(), "find-items", "1.1.0")
	if _, _, code := runCLI(t, home, "", nil, "action", "install", newer); code != exitOK {
		t.Fatalf("install 1.1.0: exit %d", code)
	}
	stdout, _, _ = runCLI(t, home, "", nil, "action", "list")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "1.1.0") || !strings.Contains(lines[1], " ok ") || !strings.Contains(lines[2], "superseded") {
		t.Errorf("list after supersede:\n%s", stdout)
	}
	// Removing the connector breaks the action; list says so.
	if _, _, code := runCLI(t, home, "", nil, "connector", "remove", "local://aileron/demo"); code != exitOK {
		t.Fatalf("connector remove: exit %d", code)
	}
	stdout, _, _ = runCLI(t, home, "", nil, "action", "list")
	if !strings.Contains(stdout, "broken: connector \"local://aileron/demo\" is not installed") {
		t.Errorf("list after connector removal does not report the action as broken:\n%s", stdout)
	}
	stdout, _, code = runCLI(t, home, "", nil, "action", "remove", "find-items")
	if code != exitOK || strings.Count(stdout, "removed find-items") != 2 {
		t.Errorf("remove: exit %d, stdout %q", code, stdout)
	}
	if _, stderr, code := runCLI(t, home, "", nil, "action", "remove", "find-items"); code != exitFailure || !strings.Contains(stderr, "no installed action has that name") {
		t.Errorf("second remove: exit %d, stderr %q", code, stderr)
	}
}

// TestToolsRenderActionConflict: an action on the demo connector derives
// the command "demo", which the connector's own tool has; tools render
// refuses, naming both sources and the fixes.
func TestToolsRenderActionConflict(t *testing.T) {
	home := t.TempDir()
	if _, _, code := runCLI(t, home, "", nil, "connector", "install", connDemoSpec); code != exitOK {
		t.Fatalf("connector install: exit %d", code)
	}
	if _, stderr, code := runCLI(t, home, "", nil, "action", "install", actWrite(t, t.TempDir(), "find-items", "1.0.0")); code != exitOK {
		t.Fatalf("action install: exit %d %s", code, stderr)
	}
	out := filepath.Join(t.TempDir(), "tools")
	_, stderr, code := runCLI(t, home, "", nil, "tools", "render", "--out", out)
	for _, want := range []string{
		`command "demo" of tool "demo" of local://aileron/demo`,
		"conflicts with the action tool of local://aileron/demo (installed actions: find-items)",
		`"aileron-proxy connector remove local://aileron/demo"`,
		`"aileron-proxy action remove find-items"`,
		"nothing was written",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("tools render stderr lacks %q:\n%s", want, stderr)
		}
	}
	if code != exitFailure {
		t.Errorf("tools render: exit %d, want %d", code, exitFailure)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("tools render wrote the output directory despite the conflict")
	}
}

// TestActionPublishedManifests validates and installs Aileron's published
// google manifests unchanged: the placeholder hashes are printed as
// warnings with their lines and do not fail the command.
func TestActionPublishedManifests(t *testing.T) {
	home := t.TempDir()
	pub := filepath.Join("..", "..", "actions", "testdata", "aileron-connector-google")
	if _, stderr, code := runCLI(t, home, "", nil, "connector", "install", filepath.Join(pub, "connector.aileron.connector.v1.json")); code != exitOK {
		t.Fatalf("connector install: exit %d %s", code, stderr)
	}
	placeholder := `send-email/action.md:19: warning: requires.connectors[0].hash "sha256:bound-at-release" is a placeholder`
	stdout, _, code := runCLI(t, home, "", nil, "action", "validate", pub)
	if code != exitOK || !strings.Contains(stdout, placeholder) || strings.Count(stdout, "\nvalid: ") != 21 || !strings.Contains(stdout, "valid: send-email 0.0.0-dev: github://ALRubinger/aileron-connector-google send_email\n") {
		t.Fatalf("validate published: exit %d\n%s", code, stdout)
	}
	stdout, stderr, code := runCLI(t, home, "", nil, "action", "install", pub)
	if code != exitOK || strings.Count(stdout, "installed ") != 21 || !strings.Contains(stderr, placeholder) || strings.Contains(stderr, "[approval.preview]") {
		t.Fatalf("install published: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	// The same manifest pinned to a digest that is not the installed
	// connector's is refused, naming both digests.
	data, err := os.ReadFile(filepath.Join(pub, "actions", "send-email", "action.md"))
	if err != nil {
		t.Fatal(err)
	}
	wrong := "sha256:" + strings.Repeat("ab", 32)
	p := filepath.Join(t.TempDir(), "action.md")
	if err := os.WriteFile(p, []byte(strings.Replace(string(data), "sha256:bound-at-release", wrong, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	list, _, _ := runCLI(t, home, "", nil, "connector", "list", "--json")
	stdout, stderr, code = runCLI(t, home, "", nil, "action", "validate", p)
	if code != exitFailure || !strings.Contains(stdout, "action.md:19: connector \"github://ALRubinger/aileron-connector-google\" is installed as sha256:") || !strings.Contains(stdout, "but the action requires "+wrong) || !strings.Contains(stderr, "(1 error)") {
		t.Fatalf("validate with a wrong digest: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	installed := stdout[strings.Index(stdout, "installed as ")+len("installed as ") : strings.Index(stdout, ", but")]
	if !strings.Contains(list, installed) {
		t.Errorf("the digest named (%s) is not the one connector list shows:\n%s", installed, list)
	}
}
