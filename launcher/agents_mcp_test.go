package launcher

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// TestInitWritesAgentMCPConfig: each recipe's MCP configuration, as
// `sandbox init --agent` writes it into a fresh project, is pinned by a
// golden file; Codex's is in its Dockerfile.
func TestInitWritesAgentMCPConfig(t *testing.T) {
	for _, name := range AgentNames() {
		t.Run(name, func(t *testing.T) {
			a, _ := LookupAgent(name)
			dir := t.TempDir()
			written, err := Init(dir, InitOptions{Agent: name})
			if err != nil {
				t.Fatal(err)
			}
			if len(written) != 2+len(a.MCPFiles()) {
				t.Errorf("written = %v, want the devcontainer files and %v", written, a.MCPFiles())
			}
			if name == "codex" {
				df, _ := os.ReadFile(filepath.Join(dir, ".devcontainer", "Dockerfile"))
				for _, line := range strings.Split(codexMCPConfig, "\n") {
					if !strings.Contains(string(df), "'"+line+"'") {
						t.Errorf("the Codex Dockerfile does not write %q into /etc/codex/config.toml:\n%s", line, df)
					}
				}
				return
			}
			for _, f := range a.MCPFiles() {
				got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f)))
				if err != nil {
					t.Fatal(err)
				}
				testkit.Golden(t, filepath.Join("testdata", "mcp-"+name+"-"+strings.NewReplacer("/", "_", ".", "").Replace(f)+".golden"), got)
			}
		})
	}
}

// TestInitMergesMCPConfig: an existing configuration keeps its entries
// and gains ours; running init again changes nothing.
func TestInitMergesMCPConfig(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, ".claude"), 0o755)
	os.WriteFile(filepath.Join(dir, ".mcp.json"), []byte(`{"mcpServers": {"other": {"command": "x"}}, "extra": 1}`), 0o644)
	os.WriteFile(filepath.Join(dir, ".claude", "settings.json"), []byte(`{"permissions": {"allow": ["Bash(ls)", "mcp__aileron"], "deny": ["Read(.env)"]}, "model": "m"}`), 0o644)
	if _, err := Init(dir, InitOptions{Agent: "claude"}); err != nil {
		t.Fatal(err)
	}
	var mcpJSON, settings map[string]any
	readJSON(t, filepath.Join(dir, ".mcp.json"), &mcpJSON)
	readJSON(t, filepath.Join(dir, ".claude", "settings.json"), &settings)
	servers := mcpJSON["mcpServers"].(map[string]any)
	if servers["other"] == nil || mcpJSON["extra"] != 1.0 || servers["aileron"].(map[string]any)["command"] != "aileron-proxy" {
		t.Errorf(".mcp.json = %v", mcpJSON)
	}
	perms := settings["permissions"].(map[string]any)
	if got, _ := json.Marshal(perms["allow"]); string(got) != `["Bash(ls)","mcp__aileron","mcp__aileron__*"]` || perms["deny"] == nil || settings["model"] != "m" {
		t.Errorf("settings = %v", settings)
	}
	if got, _ := json.Marshal(settings["enabledMcpjsonServers"]); string(got) != `["aileron"]` {
		t.Errorf("enabledMcpjsonServers = %s", got)
	}
	before, _ := os.ReadFile(filepath.Join(dir, ".claude", "settings.json"))
	if _, err := Init(dir, InitOptions{Agent: "claude", Force: true}); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, ".claude", "settings.json")); string(after) != string(before) {
		t.Errorf("a second init changed the settings:\n%s\n%s", before, after)
	}
}

// TestInitRefusesBadMCPConfig: a configuration file that is not a JSON
// object stops init before it writes anything, naming the file.
func TestInitRefusesBadMCPConfig(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, ".gemini"), 0o755)
	bad := "{ // a comment\n \"mcpServers\": {} }"
	os.WriteFile(filepath.Join(dir, ".gemini", "settings.json"), []byte(bad), 0o644)
	_, err := Init(dir, InitOptions{Agent: "gemini"})
	if err == nil || !strings.Contains(err.Error(), ".gemini/settings.json is not a JSON object") {
		t.Fatalf("Init = %v, want an error naming .gemini/settings.json", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".devcontainer")); err == nil {
		t.Error("init wrote the devcontainer although it refused the MCP configuration")
	}
	if got, _ := os.ReadFile(filepath.Join(dir, ".gemini", "settings.json")); string(got) != bad {
		t.Errorf("the settings changed: %q", got)
	}
}

// TestCheckAgentMCP: the check passes on what init wrote, and fails with
// the fix when the entry is missing or the file is broken; for Codex it
// reads the image's config.
func TestCheckAgentMCP(t *testing.T) {
	ctx := context.Background()
	noRun := func(context.Context, ...string) (int, string, error) {
		t.Error("the check ran a container for a project-file agent")
		return 0, "", nil
	}
	for _, name := range []string{"claude", "gemini", "opencode"} {
		a, _ := LookupAgent(name)
		dir := t.TempDir()
		r, err := checkAgentMCP(ctx, a, dir, noRun)
		if err != nil || r.OK || !strings.Contains(r.Fix, "sandbox init --agent "+name) {
			t.Errorf("%s without configuration = %+v, %v; want a failure with the fix", name, r, err)
		}
		if _, err := Init(dir, InitOptions{Agent: name}); err != nil {
			t.Fatal(err)
		}
		if r, err := checkAgentMCP(ctx, a, dir, noRun); err != nil || !r.OK {
			t.Errorf("%s after init = %+v, %v; want ok", name, r, err)
		}
		// Another server replacing ours: stale again.
		f := filepath.Join(dir, filepath.FromSlash(a.MCPFiles()[0]))
		raw, _ := os.ReadFile(f)
		os.WriteFile(f, []byte(strings.Replace(string(raw), `"aileron-proxy"`, `"other"`, 1)), 0o644)
		if r, _ := checkAgentMCP(ctx, a, dir, noRun); r.OK || !strings.Contains(r.Detail, a.MCPFiles()[0]) {
			t.Errorf("%s with the command changed = %+v; want a failure naming the file", name, r)
		}
		os.WriteFile(f, []byte("{"), 0o644)
		if r, _ := checkAgentMCP(ctx, a, dir, noRun); r.OK || !strings.Contains(r.Detail, "is not a JSON object") {
			t.Errorf("%s with a broken file = %+v", name, r)
		}
	}
	codex, _ := LookupAgent("codex")
	for code, ok := range map[int]bool{0: true, 1: false} {
		var ran []string
		r, err := checkAgentMCP(ctx, codex, t.TempDir(), func(_ context.Context, cmd ...string) (int, string, error) {
			ran = cmd
			return code, "", nil
		})
		if err != nil || r.OK != ok || !strings.Contains(strings.Join(ran, " "), "/etc/codex/config.toml") {
			t.Errorf("codex check with exit %d = %+v, %v (ran %q)", code, r, err, ran)
		}
		if !ok && !strings.Contains(r.Fix, "sandbox build") {
			t.Errorf("codex fix = %q", r.Fix)
		}
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
