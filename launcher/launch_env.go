package launcher

import (
	"bytes"
	"context"
	"fmt"
	"strings"
)

// resolveSandboxEnv resolves the plan's containerEnv and remoteEnv for
// the agent's image and user: ${localEnv:...} from localEnv (the launching
// process), ${containerEnv:...} from the container's own environment,
// read by running the image once (no network) only when remoteEnv uses it.
func resolveSandboxEnv(ctx context.Context, rt Runtime, plan *Plan, user AgentUser, localEnv func(string) (string, bool)) (containerEnv, remoteEnv map[string]string, err error) {
	containerEnv, _ = plan.ResolveEnv(localEnv, nil)
	var imageEnv map[string]string
	if plan.NeedsContainerEnv() {
		if imageEnv, err = probeContainerEnv(ctx, rt, user, containerEnv); err != nil {
			return nil, nil, err
		}
	}
	containerEnv, remoteEnv = plan.ResolveEnv(localEnv, imageEnv)
	return containerEnv, remoteEnv, nil
}

// probeContainerEnv returns the environment a container of user.Image
// starts with, given containerEnv (NUL-separated /proc/self/environ, so
// values with newlines survive).
func probeContainerEnv(ctx context.Context, rt Runtime, user AgentUser, containerEnv map[string]string) (map[string]string, error) {
	var stdout, stderr bytes.Buffer
	code, err := rt.Run(ctx, RunRequest{
		Image: user.Image, User: user.User, Entrypoint: "/bin/cat", Cmd: []string{"/proc/self/environ"},
		Env: containerEnv, Network: "none", Labels: map[string]string{LabelManaged: "true"}, Stdout: &stdout, Stderr: &stderr,
	})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit status %d: %s", code, lastLines(stderr.String(), 2))
	}
	if err != nil {
		return nil, fmt.Errorf("reading the environment of image %s for ${containerEnv:...} in remoteEnv (%s): %w", user.Image, DevContainerPath, err)
	}
	env := map[string]string{}
	for _, kv := range strings.Split(stdout.String(), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			env[k] = v
		}
	}
	return env, nil
}
