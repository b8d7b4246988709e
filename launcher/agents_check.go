package launcher

import (
	"bytes"
	"context"
	"fmt"
	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"strings"
)

// Checks `sandbox check --agent NAME` adds for a known agent recipe.
const (
	CheckVersion     = "version"
	CheckConnector   = "connector"
	CheckCredential  = "credential"
	CheckPlaceholder = "placeholder"
)

// AgentHost is what the host has configured, as CheckAgent needs it.
type AgentHost struct {
	// Connectors lists the FQNs of the active installed connectors.
	Connectors []string
	// HasCredential reports whether a credential is configured for
	// (connector FQN, kind).
	HasCredential func(fqn, kind string) bool
	// ContainerEnv is the plan's containerEnv.
	ContainerEnv map[string]string
	// Project is the project directory, which holds the agent's MCP
	// configuration (CheckMCP is skipped when empty).
	Project string
}

// CheckAgentRecipe validates what a known agent needs beyond the image contract
// of Check: its command runs (`--version`, in a throwaway container with no
// network), its model connector is installed, that connector's credential
// is configured and the placeholder key is set in containerEnv. Each
// failure names the command or edit that fixes it. err is for failures to
// run the check at all.
func CheckAgentRecipe(ctx context.Context, rt runtime.Runtime, image string, a Agent, host AgentHost) ([]CheckResult, error) {
	var stdout, stderr bytes.Buffer
	code, err := rt.Run(ctx, runtime.RunRequest{
		Image:      image,
		Entrypoint: "/bin/sh",
		Cmd:        []string{"-c", `"$1" --version`, "aileron-check", a.Command},
		Network:    "none",
		Labels:     map[string]string{LabelManaged: "true"},
		Stdout:     &stdout,
		Stderr:     &stderr,
	})
	if err != nil {
		return nil, fmt.Errorf("checking %s in image %s: %w", a.Command, image, err)
	}
	rebuild := fmt.Sprintf("run `aileron-proxy sandbox init --agent %s --force` and `aileron-proxy sandbox build`", a.Name)
	v := CheckResult{Name: CheckVersion, OK: code == 0}
	if v.OK {
		v.Detail = fmt.Sprintf("%s --version: %s", a.Command, runtime.LastLines(stdout.String(), 1))
	} else {
		v.Detail = fmt.Sprintf("%s --version exited %d: %s", a.Command, code, runtime.LastLines(stderr.String()+stdout.String(), 1))
		v.Fix = rebuild
	}
	res := []CheckResult{v}

	c := CheckResult{Name: CheckConnector, Detail: fmt.Sprintf("connector %s is installed", a.Connector)}
	for _, fqn := range host.Connectors {
		if strings.EqualFold(fqn, a.Connector) {
			c.OK = true
		}
	}
	if !c.OK {
		c.Detail = fmt.Sprintf("connector %s, which carries the %s model API, is not installed", a.Connector, a.Title)
		c.Fix = "run `aileron-proxy connector install " + a.ConnectorFile + "`"
	}
	res = append(res, c)

	k := CheckResult{Name: CheckCredential, Detail: fmt.Sprintf("a %s credential is configured for %s", a.Kind, a.Connector)}
	if host.HasCredential != nil && host.HasCredential(a.Connector, a.Kind) {
		k.OK = true
	} else {
		k.Detail = fmt.Sprintf("no %s credential is configured for %s, so model calls would be refused", a.Kind, a.Connector)
		k.Fix = "run `" + a.CredentialSet + "`"
	}
	res = append(res, k)

	p := CheckResult{Name: CheckPlaceholder, Detail: fmt.Sprintf("containerEnv sets %s", a.Placeholder)}
	if host.ContainerEnv[a.Placeholder] != "" {
		p.OK = true
	} else {
		p.Detail = fmt.Sprintf("containerEnv does not set %s, which %s needs to start", a.Placeholder, a.Command)
		p.Fix = fmt.Sprintf("add %q: %q to containerEnv in %s (the proxy injects the real key), or %s", a.Placeholder, PlaceholderValue, devcontainer.Path, rebuild)
	}
	res = append(res, p)
	if host.Project == "" {
		return res, nil
	}
	m, err := checkAgentMCP(ctx, a, host.Project, func(ctx context.Context, cmd ...string) (int, string, error) {
		var out bytes.Buffer
		code, err := rt.Run(ctx, runtime.RunRequest{Image: image, Entrypoint: cmd[0], Cmd: cmd[1:], Network: "none",
			Labels: map[string]string{LabelManaged: "true"}, Stdout: &out, Stderr: &out})
		if err != nil {
			err = fmt.Errorf("checking the MCP configuration in image %s: %w", image, err)
		}
		return code, out.String(), err
	})
	if err != nil {
		return nil, err
	}
	return append(res, m), nil
}
