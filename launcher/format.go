package launcher

import (
	"encoding/json"
	"fmt"
	"github.com/aileron-dev/aileron-proxy/launcher/guard"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// RuntimeInfo describes the runtime a plan would use, for `sandbox plan`.
type RuntimeInfo struct {
	// Kind is "docker" or "podman"; empty when none is usable.
	Kind string `json:"kind"`
	// Selection says why (or, with an empty Kind, why none is usable).
	Selection string `json:"selection"`
}

// WritePlanJSON writes the plan and runtime as indented JSON.
func WritePlanJSON(w io.Writer, p *Plan, rt RuntimeInfo) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(planJSON(p, &rt)); err != nil {
		return fmt.Errorf("writing the plan: %w", err)
	}
	return nil
}

// WritePlanText writes the plan as aligned "key: value" lines; paths inside
// the project are shown relative to it.
func WritePlanText(w io.Writer, p *Plan, rt RuntimeInfo) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("project", p.ProjectDir)
	row("tier", p.Tier.String())
	row("image", p.Image)
	switch {
	case p.Build == nil:
		row("dockerfile", "(none: the image is used as supplied)")
		row("context", "(none)")
	case p.Build.Embedded:
		row("dockerfile", "(embedded sandbox-base definition, "+shortDigest(p.Build.Digest)+")")
		row("context", "(none)")
	default:
		row("dockerfile", relTo(p.ProjectDir, p.Build.Dockerfile))
		row("context", relTo(p.ProjectDir, p.Build.Context))
		if len(p.Build.Args) > 0 {
			var args []string
			for _, k := range sortedKeys(p.Build.Args) {
				args = append(args, k+"="+p.Build.Args[k])
			}
			row("build args", strings.Join(args, " "))
		}
		if p.Build.Target != "" {
			row("build target", p.Build.Target)
		}
		if len(p.Build.CacheFrom) > 0 {
			row("cache from", strings.Join(p.Build.CacheFrom, " "))
		}
		if len(p.Build.Options) > 0 {
			row("build options", strings.Join(p.Build.Options, " "))
		}
	}
	switch {
	case p.Build != nil && p.Build.ExtendsBase:
		row("base image", p.BaseImage+" (built first: the Dockerfile extends it)")
	case p.Build != nil && p.Build.Embedded:
		row("base image", p.BaseImage+" (this is the sandbox image)")
	default:
		row("base image", p.BaseImage+" (not used)")
	}
	if p.DevContainer != "" {
		row("devcontainer", relTo(p.ProjectDir, p.DevContainer))
	} else {
		row("devcontainer", "(none)")
	}
	if len(p.ContainerEnv) > 0 {
		row("container env", strings.Join(sortedKeys(p.ContainerEnv), " "))
	}
	if len(p.RemoteEnv) > 0 {
		row("remote env", strings.Join(sortedKeys(p.RemoteEnv), " "))
	}
	user := "(the image's USER)"
	if p.User != "" {
		user = p.User
	}
	if p.UpdateRemoteUserUID {
		user += ", uid/gid remapped to the project owner's (updateRemoteUserUID)"
	}
	row("user", user)
	if p.Workspace != (runtime.Mount{Source: p.ProjectDir, Target: WorkspacePath}) || p.WorkspaceFolder != WorkspacePath {
		row("workspace", formatMount(p.Workspace)+", working directory "+p.WorkspaceFolder)
	}
	for _, m := range p.Mounts {
		row("mount", formatMount(m))
	}
	for _, f := range p.Features {
		desc := f.Ref + " " + shortDigest(f.Digest)
		if f.DependedOn {
			desc += " (a dependency)"
		}
		if len(f.Env) > 0 {
			var opts []string
			for _, k := range sortedKeys(f.Env) {
				opts = append(opts, k+"="+f.Env[k])
			}
			desc += ", options " + strings.Join(opts, " ")
		}
		row("feature", desc)
	}
	if p.FeaturesImage != "" {
		row("features image", p.FeaturesImage+" (the features installed on the image, as root)")
	}
	for _, st := range p.Lifecycle {
		for _, c := range st.Commands {
			row(st.Key, c.String())
		}
	}
	if p.InitializeCommand != nil {
		for _, c := range p.InitializeCommand.Commands {
			row("initializeCommand", c.String()+" (on the host, only with launch --allow-host-commands)")
		}
	}
	if len(p.RunArgs) > 0 {
		row("run args", strings.Join(p.RunArgs, " "))
	}
	row("mediation", p.Mediation.String())
	row("approval surface", p.ApprovalSurface.String())
	row("egress guard", guard.Summary(nil))
	row("hardening", hardeningSummary(p))
	if rt.Kind != "" {
		row("runtime", rt.Kind+" ("+rt.Selection+")")
	} else {
		row("runtime", "none usable ("+rt.Selection+")")
	}
	for _, r := range p.Refused {
		row("refused", fmt.Sprintf("%s (line %d): %s", r.Key, r.Line, strings.TrimPrefix(r.Message, "refused: ")))
	}
	for _, warn := range p.Warnings {
		row("warning", warn)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing the plan: %w", err)
	}
	return nil
}

func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}

// formatMount is "bind SRC at TARGET[, read-only]".
func formatMount(m runtime.Mount) string {
	kind, src := "bind", m.Source
	if m.Volume {
		kind = "volume"
		if src == "" {
			src = "(anonymous)"
		}
	}
	s := fmt.Sprintf("%s %s at %s", kind, src, m.Target)
	if m.ReadOnly {
		s += ", read-only"
	}
	return s
}

// hardeningSummary says how the agent's container is confined under p.
func hardeningSummary(p *Plan) string {
	return "all capabilities dropped, no-new-privileges, pids limit " + p.pidsLimit() + ", never privileged"
}

// pidsLimit is the agent container's effective pids limit: the
// devcontainer's runArgs --pids-limit when it sets one (runArgs come last
// on the run line, so that value wins), else DefaultPidsLimit. RunArgs
// hold flags with values only as --flag=value (allowedFlags).
func (p *Plan) pidsLimit() string {
	limit := strconv.Itoa(DefaultPidsLimit)
	for _, a := range p.RunArgs {
		if v, ok := strings.CutPrefix(a, "--pids-limit="); ok {
			limit = v + " (runArgs)"
		}
	}
	return limit
}
