package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/policy"
)

// toolsSpec is a minimal valid spec with one tool.
func toolsSpec(fqn, toolName string) string {
	return `{"schema_version": "aileron.connector.v1",
  "connector": {"fqn": "` + fqn + `", "version": "1.0.0"},
  "tools": [{"name": "` + toolName + `", "description": "test tool",
    "operations": [{"name": "get", "method": "GET", "path": "/x", "hosts": ["api.example.com"]}]}]}`
}

// toolsHome installs the Google fixture and a connector whose tool is
// named git into a fresh $AILERON_HOME.
func toolsHome(t *testing.T, gitTool bool) string {
	t.Helper()
	home := t.TempDir()
	store, err := policy.OpenStore(home)
	if err != nil {
		t.Fatal(err)
	}
	fixture := filepath.Join("..", "..", "shims", "testdata", "specs", "google.aileron.connector.v1.json")
	if _, err := store.Install(fixture, policy.InstallOptions{}); err != nil {
		t.Fatalf("installing %s: %v", fixture, err)
	}
	if gitTool {
		p := filepath.Join(t.TempDir(), policy.SpecFileName)
		if err := os.WriteFile(p, []byte(toolsSpec("local://me/git-tools", "Git")), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Install(p, policy.InstallOptions{}); err != nil {
			t.Fatalf("installing the git spec: %v", err)
		}
	}
	return home
}

func TestToolsRenderCommand(t *testing.T) {
	const googleLine = "google github://acme/aileron-connector-google -- Aileron connector operations: gmail.messages.search, gmail.messages.send, gemini.models.generateContent, gemini.models.streamGenerateContent\n"
	tests := []struct {
		name       string
		gitTool    bool
		args       []string // after --home HOME tools render
		wantCode   int
		wantOut    []string
		wantErr    []string
		wantTools  string // tools.txt content; "" means nothing may be written
		wantShims  []string
		preexisted bool
	}{
		{
			name: "every active connector", args: []string{"--out", "OUT"},
			wantCode: exitOK, wantOut: []string{"wrote 1 tool to ", googleLine}, wantTools: googleLine, wantShims: []string{"google"},
		},
		{
			name: "selected connector", gitTool: true,
			args:     []string{"--out", "OUT", "--connector", "github://acme/aileron-connector-google", "--connector", "github://acme/aileron-connector-google"},
			wantCode: exitOK, wantTools: googleLine, wantShims: []string{"google"},
		},
		{
			name: "unknown connector", args: []string{"--out", "OUT", "--connector", "github://acme/nope"},
			wantCode: exitFailure, wantErr: []string{`--connector "github://acme/nope" is not an active installed connector`, "active connectors: github://acme/aileron-connector-google"},
		},
		{
			name: "agent command conflict", args: []string{"--out", "OUT", "--agent", "/usr/bin/Google"},
			wantCode: exitFailure, wantErr: []string{`command "google" of tool "google" of github://acme/aileron-connector-google (sha256:`, `would shadow the agent command "google"`, `"aileron-proxy connector remove github://acme/aileron-connector-google"`, "nothing was written to "},
		},
		{
			name: "reserved name conflict", args: []string{"--out", "OUT", "--reserved", "google"},
			wantCode: exitFailure, wantErr: []string{`would shadow "google", a command the sandbox mounts`},
		},
		{
			name: "basic command conflict", gitTool: true, args: []string{"--out", "OUT"},
			wantCode: exitFailure, wantErr: []string{`command "git" of tool "Git" of local://me/git-tools`, `basic sandbox command "git"`, `"aileron-proxy connector remove local://me/git-tools"`},
		},
		{
			name: "conflict keeps a previous render", preexisted: true, args: []string{"--out", "OUT", "--agent", "google"},
			wantCode: exitFailure, wantErr: []string{"nothing was written"}, wantTools: "old\n",
		},
		{name: "missing --out", args: nil, wantCode: exitUsage, wantErr: []string{"--out is required"}},
		{name: "positional argument", args: []string{"--out", "OUT", "extra"}, wantCode: exitUsage, wantErr: []string{"unknown command \"extra\""}},
		{name: "unknown flag", args: []string{"--out", "OUT", "--bogus"}, wantCode: exitUsage, wantErr: []string{"unknown flag: --bogus"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			home := toolsHome(t, tc.gitTool)
			parent := t.TempDir()
			out := filepath.Join(parent, "tools")
			if tc.preexisted {
				if err := os.MkdirAll(filepath.Join(out, "bin"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(out, "tools.txt"), []byte("old\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			args := []string{"tools", "render"}
			for _, a := range tc.args {
				args = append(args, strings.ReplaceAll(a, "OUT", out))
			}
			stdout, stderr, code := runCLI(t, home, "", nil, args...)
			if code != tc.wantCode {
				t.Errorf("aileron-proxy --home %s %s: exit %d, want %d\nstdout: %s\nstderr: %s", home, strings.Join(args, " "), code, tc.wantCode, stdout, stderr)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout %q lacks %q", stdout, w)
				}
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q lacks %q", stderr, w)
				}
			}
			if tc.wantTools == "" {
				if entries, _ := os.ReadDir(parent); len(entries) != 0 {
					t.Errorf("a failed render left %d entries in %s", len(entries), parent)
				}
				return
			}
			got, err := os.ReadFile(filepath.Join(out, "tools.txt"))
			if err != nil || string(got) != tc.wantTools {
				t.Errorf("tools.txt = %q, %v, want %q", got, err, tc.wantTools)
			}
			bins, _ := os.ReadDir(filepath.Join(out, "bin"))
			var names []string
			for _, b := range bins {
				names = append(names, b.Name())
				fi, err := os.Stat(filepath.Join(out, "bin", b.Name()))
				if err != nil || fi.Mode().Perm() != 0o755 {
					t.Errorf("bin/%s mode = %v, %v, want 0755", b.Name(), fi.Mode(), err)
				}
			}
			if strings.Join(names, " ") != strings.Join(tc.wantShims, " ") {
				t.Errorf("bin/ = %v, want %v", names, tc.wantShims)
			}
			if entries, _ := os.ReadDir(parent); len(entries) != 1 {
				t.Errorf("render left temporary entries in %s: %v", parent, entries)
			}
		})
	}
}

// TestToolsGroupCommand: tools alone prints its help, and an unknown
// subcommand is a usage error.
func TestToolsGroupCommand(t *testing.T) {
	stdout, _, code := runCLI(t, t.TempDir(), "", nil, "tools")
	if code != exitOK || !strings.Contains(stdout, "render") {
		t.Errorf("tools: exit %d, stdout %q, want the help", code, stdout)
	}
	if _, stderr, code := runCLI(t, t.TempDir(), "", nil, "tools", "bogus"); code != exitUsage || !strings.Contains(stderr, `unknown command "bogus"`) {
		t.Errorf("tools bogus: exit %d, stderr %q, want a usage error", code, stderr)
	}
}
