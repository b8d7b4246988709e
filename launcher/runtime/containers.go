package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Container is one container as the runtime describes it (ps, then
// inspect): what a restarted daemon needs to find its sandboxes again.
type Container struct {
	// ID is the full container ID; Name its name (without Docker's
	// leading "/").
	ID, Name string
	// Status is the runtime's state word: "running", "exited", "created",
	// "paused", ...
	Status string
	Labels map[string]string
}

// IsRunning reports whether commands can be exec'd in the container.
func (c Container) IsRunning() bool { return c.Status == "running" }

// Containers lists the containers (running or not) that carry label (a
// key, or key=value), as `ps --all --filter label=...` selects them, each
// inspected. A container removed between the listing and its inspection
// is left out.
func (r *cliRuntime) Containers(ctx context.Context, label string) ([]Container, error) {
	out, err := r.run(ctx, "ps", "--all", "--quiet", "--no-trunc", "--filter", "label="+label)
	if err != nil {
		return nil, wrapf(err, "listing the containers labelled %s", label)
	}
	ids := strings.Fields(out)
	if len(ids) == 0 {
		return nil, nil
	}
	out, err = r.run(ctx, append([]string{"container", "inspect"}, ids...)...)
	if err == nil {
		return parseContainerInspect(out)
	}
	// One of them went away meanwhile: inspect them one by one.
	var cs []Container
	for _, id := range ids {
		out, err := r.run(ctx, "container", "inspect", id)
		var ce *cliError
		if errors.As(err, &ce) && ContainerStateOf(ce.stderr) == ContainerGone {
			continue
		}
		if err != nil {
			return nil, wrapf(err, "inspecting container %s", id)
		}
		one, err := parseContainerInspect(out)
		if err != nil {
			return nil, err
		}
		cs = append(cs, one...)
	}
	return cs, nil
}

// parseContainerInspect reads `docker container inspect` or `podman
// container inspect` output (a JSON array; both engines use Docker's
// field names for these).
func parseContainerInspect(out string) ([]Container, error) {
	var raw []struct {
		ID    string `json:"Id"`
		Name  string
		State struct {
			Status string
		}
		Config struct {
			Labels map[string]string
		}
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		return nil, fmt.Errorf("parsing container inspect output: %w", err)
	}
	cs := make([]Container, 0, len(raw))
	for _, c := range raw {
		cs = append(cs, Container{ID: c.ID, Name: strings.TrimPrefix(c.Name, "/"), Status: strings.ToLower(c.State.Status), Labels: c.Config.Labels})
	}
	return cs, nil
}
