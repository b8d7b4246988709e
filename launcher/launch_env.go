package launcher

import (
	"bytes"
	"context"
	"fmt"
	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"strings"
)

// resolvedSandbox is the plan's environment and lifecycle commands with
// their variables resolved for one container.
type resolvedSandbox struct {
	containerEnv, remoteEnv map[string]string
	lifecycle               []devcontainer.LifecycleStep
}

// resolveSandbox resolves the plan's containerEnv, remoteEnv and
// lifecycle commands for the agent's image and user: ${localEnv:...} from
// localEnv (the launching process), ${containerEnv:...} from the
// container's own environment, read by running the image once (no
// network) only when something uses it.
func resolveSandbox(ctx context.Context, rt runtime.Runtime, plan *Plan, user AgentUser, localEnv func(string) (string, bool)) (resolvedSandbox, error) {
	containerEnv, _ := plan.ResolveEnv(localEnv, nil)
	var imageEnv map[string]string
	if plan.NeedsContainerEnv() {
		var err error
		if imageEnv, err = probeContainerEnv(ctx, rt, user, containerEnv); err != nil {
			return resolvedSandbox{}, err
		}
	}
	var r resolvedSandbox
	r.containerEnv, r.remoteEnv = plan.ResolveEnv(localEnv, imageEnv)
	inContainer := func(k string) (string, bool) {
		if v, ok := r.remoteEnv[k]; ok {
			return v, true
		}
		if v, ok := r.containerEnv[k]; ok {
			return v, true
		}
		v, ok := imageEnv[k]
		return v, ok
	}
	r.lifecycle = plan.lifecycleSteps(plan.Vars(localEnv, inContainer))
	return r, nil
}

// lifecycleScriptEnv carries the lifecycle script into the container: the
// commands may hold resolved ${localEnv:...} values, which must not
// appear in the runtime's argv. Env files cannot carry newlines, so the
// script travels with backslashes doubled and newlines as \n, decoded by
// printf %b (a builtin of every POSIX shell). The script unsets it before
// the agent.
const lifecycleScriptEnv = "AILERON_LIFECYCLE_SCRIPT"

// agentCommand is the agent container's entrypoint, arguments and extra
// environment: the agent itself, or, when there are lifecycle commands,
// /bin/sh running them first (LifecycleScript, passed in the environment)
// and then exec'ing the agent.
func agentCommand(agent []string, steps []devcontainer.LifecycleStep) (entrypoint string, cmd []string, env map[string]string) {
	if len(steps) == 0 {
		return agent[0], agent[1:], nil
	}
	script := "unset " + lifecycleScriptEnv + "\n" + devcontainer.LifecycleScript(steps, true)
	encoded := strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(script)
	return "/bin/sh", append([]string{"-c", `eval "$(printf '%b' "$` + lifecycleScriptEnv + `")"`, "aileron-lifecycle"}, agent...),
		map[string]string{lifecycleScriptEnv: encoded}
}

// probeContainerEnv returns the environment a container of user.Image
// starts with, given containerEnv (NUL-separated /proc/self/environ, so
// values with newlines survive).
func probeContainerEnv(ctx context.Context, rt runtime.Runtime, user AgentUser, containerEnv map[string]string) (map[string]string, error) {
	var stdout, stderr bytes.Buffer
	code, err := rt.Run(ctx, runtime.RunRequest{
		Image: user.Image, User: user.User, Entrypoint: "/bin/cat", Cmd: []string{"/proc/self/environ"},
		Env: containerEnv, Network: "none", Labels: map[string]string{LabelManaged: "true"}, Stdout: &stdout, Stderr: &stderr,
	})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit status %d: %s", code, runtime.LastLines(stderr.String(), 2))
	}
	if err != nil {
		return nil, fmt.Errorf("reading the environment of image %s for ${containerEnv:...} in remoteEnv (%s): %w", user.Image, devcontainer.Path, err)
	}
	env := map[string]string{}
	for _, kv := range strings.Split(stdout.String(), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			env[k] = v
		}
	}
	return env, nil
}
