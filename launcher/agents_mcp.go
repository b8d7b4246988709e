package launcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/aileron-dev/aileron-proxy/internal/atomicfile"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
)

// MCPServerName is the name every agent's configuration gives the
// session's MCP server; Claude Code shows its tools to the model as
// mcp__aileron__<tool>.
const MCPServerName = "aileron"

// mcpEnv are the variables `aileron-proxy mcp` reads, which a sandbox sets
// (SandboxEnv). The configurations pass them on by reference, because some
// agents give an MCP server only a few variables of their own.
var mcpEnv = []string{"AILERON_API_URL", "AILERON_TOKEN", "AILERON_SESSION_ID"}

// CheckMCP is the check `sandbox check --agent NAME` adds for the agent's
// MCP configuration.
const CheckMCP = "mcp"

// mcpConfig is one project file of an agent's MCP configuration: a JSON
// object in which set puts (or replaces) the entries that start `aileron-proxy
// mcp`, leaving everything else as it was.
type mcpConfig struct {
	// path is relative to the project, "/"-separated.
	path string
	set  func(doc map[string]any)
}

// mcpEnvRefs maps each of mcpEnv to a reference to it in the agent's
// syntax (ref).
func mcpEnvRefs(ref func(name string) string) map[string]any {
	env := map[string]any{}
	for _, k := range mcpEnv {
		env[k] = ref(k)
	}
	return env
}

// child returns doc[key] as an object, creating it when absent or not an
// object.
func child(doc map[string]any, key string) map[string]any {
	m, ok := doc[key].(map[string]any)
	if !ok {
		m = map[string]any{}
		doc[key] = m
	}
	return m
}

// addString appends s to the string list doc[key] unless it is there.
func addString(doc map[string]any, key, s string) {
	list, _ := doc[key].([]any)
	for _, v := range list {
		if v == s {
			return
		}
	}
	doc[key] = append(list, s)
}

// mcpConfigs are the project files each recipe's MCP configuration lives
// in. Codex has none: its server is in the image's system config (the
// recipe's Dockerfile), since Codex reads project config only from
// projects the user marked trusted.
var mcpConfigs = map[string][]mcpConfig{
	"claude": {
		{path: ".mcp.json", set: func(doc map[string]any) {
			child(doc, "mcpServers")[MCPServerName] = map[string]any{
				"type": "stdio", "command": "aileron-proxy", "args": []any{"mcp"},
				"env": mcpEnvRefs(func(k string) string { return "${" + k + "}" }),
			}
		}},
		// Project MCP servers need approval, and their tools permission
		// in -p mode: both for this server only.
		{path: ".claude/settings.json", set: func(doc map[string]any) {
			addString(doc, "enabledMcpjsonServers", MCPServerName)
			addString(child(doc, "permissions"), "allow", "mcp__"+MCPServerName+"__*")
		}},
	},
	"gemini": {
		// trust: no confirmation per call (a call that needs one waits for
		// Aileron's approval instead); -p mode cannot ask.
		{path: ".gemini/settings.json", set: func(doc map[string]any) {
			child(doc, "mcpServers")[MCPServerName] = map[string]any{
				"command": "aileron-proxy", "args": []any{"mcp"}, "trust": true,
				"env": mcpEnvRefs(func(k string) string { return "$" + k }),
			}
		}},
	},
	"opencode": {
		{path: "opencode.json", set: func(doc map[string]any) {
			if _, ok := doc["$schema"]; !ok {
				doc["$schema"] = "https://opencode.ai/config.json"
			}
			child(doc, "mcp")[MCPServerName] = map[string]any{
				"type": "local", "command": []any{"aileron-proxy", "mcp"}, "enabled": true,
				"environment": mcpEnvRefs(func(k string) string { return "{env:" + k + "}" }),
			}
		}},
	},
}

// claudeTrust is the Claude Code recipe's Dockerfile block that marks the
// sandbox's workspace trusted in ~/.claude.json.
const claudeTrust = `RUN printf '%s\n' '{"projects": {"` + WorkspacePath + `": {"hasTrustDialogAccepted": true}}}' > /home/agent/.claude.json \
 && chown agent:agent /home/agent/.claude.json
`

// codexMCPConfig is the [mcp_servers] table the Codex recipe appends to
// /etc/codex/config.toml; env_vars passes the sandbox's variables on
// (Codex gives an MCP server only a few of its own otherwise).
const codexMCPConfig = `[mcp_servers.aileron]
command = "aileron-proxy"
args = ["mcp"]
env_vars = ["AILERON_API_URL", "AILERON_TOKEN", "AILERON_SESSION_ID"]`

// MCPFiles returns the project files that hold the recipe's MCP
// configuration, "/"-separated and relative to the project (none for
// Codex, whose configuration is in its image).
func (a Agent) MCPFiles() []string {
	var out []string
	for _, c := range mcpConfigs[a.Name] {
		out = append(out, c.path)
	}
	return out
}

// mergeMCP returns the content of c's file with the entries set: old is
// the file's content, nil when it does not exist. A file that is not a
// JSON object is an error naming it (nothing is written then); keys come
// out sorted, two-space indented.
func mergeMCP(c mcpConfig, old []byte) ([]byte, error) {
	doc := map[string]any{}
	if old != nil && len(bytes.TrimSpace(old)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(old))
		if err := dec.Decode(&doc); err != nil || dec.More() {
			if err == nil {
				err = errors.New("more than one JSON value")
			}
			return nil, fmt.Errorf("%s is not a JSON object (%v); fix it, or move it away and run `aileron-proxy sandbox init` again (comments are not supported)", c.path, err)
		}
	}
	c.set(doc)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("encoding %s: %w", c.path, err)
	}
	return b.Bytes(), nil
}

// readOptional reads path; a missing file is nil content and no error.
func readOptional(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// agentMCPFiles computes the recipe's MCP configuration files merged into
// what projectDir holds, keyed by relative path. Nothing is written.
func agentMCPFiles(projectDir, agent string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, c := range mcpConfigs[agent] {
		old, err := readOptional(filepath.Join(projectDir, filepath.FromSlash(c.path)))
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", c.path, err)
		}
		b, err := mergeMCP(c, old)
		if err != nil {
			return nil, fmt.Errorf("configuring %s's MCP server: %w", agent, err)
		}
		out[c.path] = b
	}
	return out, nil
}

// writeMCPFiles writes files (from agentMCPFiles) under projectDir, each
// atomically, and returns the paths written, sorted.
func writeMCPFiles(projectDir string, files map[string][]byte) ([]string, error) {
	var written []string
	for _, name := range slices.Sorted(maps.Keys(files)) {
		path := filepath.Join(projectDir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return written, fmt.Errorf("creating the directory of %s: %w", name, err)
		}
		if err := atomicfile.WriteFile(path, files[name], 0o644); err != nil {
			return written, fmt.Errorf("writing %s: %w", name, err)
		}
		written = append(written, path)
	}
	return written, nil
}

// checkAgentMCP reports whether the agent's MCP configuration starts
// `aileron-proxy mcp`: for the project files, that writing them again
// would change nothing; for Codex, that the image's system config has the
// server (run reads a file in the image).
func checkAgentMCP(ctx context.Context, a Agent, projectDir string, run func(ctx context.Context, cmd ...string) (int, string, error)) (CheckResult, error) {
	fix := fmt.Sprintf("run `aileron-proxy sandbox init --agent %s`", a.Name)
	res := CheckResult{Name: CheckMCP}
	if a.Name == "codex" {
		code, out, err := run(ctx, "/bin/sh", "-c", `grep -qxF '[mcp_servers.aileron]' /etc/codex/config.toml && grep -qxF 'args = ["mcp"]' /etc/codex/config.toml`)
		if err != nil {
			return res, err
		}
		res.OK = code == 0
		if res.OK {
			res.Detail = "/etc/codex/config.toml starts aileron-proxy mcp as MCP server " + MCPServerName
		} else {
			res.Detail = "/etc/codex/config.toml in the image has no [mcp_servers.aileron] running aileron-proxy mcp" + strings.TrimSpace(" "+runtime.LastLines(out, 1))
			res.Fix = fix + " --force and `aileron-proxy sandbox build`"
		}
		return res, nil
	}
	var stale []string
	for _, c := range mcpConfigs[a.Name] {
		old, err := readOptional(filepath.Join(projectDir, filepath.FromSlash(c.path)))
		if err != nil {
			return res, fmt.Errorf("reading %s: %w", c.path, err)
		}
		want, err := mergeMCP(c, old)
		if err != nil {
			res.Detail, res.Fix = err.Error(), fix
			return res, nil
		}
		if old == nil || !sameJSON(old, want) {
			stale = append(stale, c.path)
		}
	}
	if len(stale) == 0 {
		res.OK = true
		res.Detail = fmt.Sprintf("%s start aileron-proxy mcp as MCP server %s", strings.Join(a.MCPFiles(), " and "), MCPServerName)
		return res, nil
	}
	res.Detail = fmt.Sprintf("%s do not configure aileron-proxy mcp as MCP server %s, so %s does not see the session's tools", strings.Join(stale, " and "), MCPServerName, a.Title)
	res.Fix = fix + " (it adds the entries and keeps the rest)"
	return res, nil
}

// sameJSON reports whether a and b hold the same JSON value.
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}
