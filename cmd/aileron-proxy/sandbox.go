package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/aileron-dev/aileron-proxy/internal/hostport"
	"github.com/aileron-dev/aileron-proxy/launcher"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
)

// newSandboxCmd is `aileron-proxy sandbox`: compose, build and check the
// image an agent runs in.
func newSandboxCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandbox COMMAND",
		Short: "Compose, build and check the agent's sandbox image",
		Long: `Compose, build and check the container image an agent runs in.

The project's .devcontainer/devcontainer.json (JSON with comments) selects a tier:
  tier 0  no devcontainer: aileron/sandbox-base:` + launcher.BaseVersion + `, built from the definition in this binary
  tier 1  devcontainer: its Dockerfile is built (after sandbox-base when it extends it), or its image is used
  tier 2  customizations.aileron.image: a bring-your-own image, used as supplied

Images are built with Docker or Podman through their CLIs; "auto" picks Docker
when its engine answers, else Podman.

up, ls, down and exec manage long-lived sandboxes in the running daemon: launch's
sandbox without an agent, driven through the exec/files API (the Flue connector in
flue/) or with "sandbox exec".`,
		Example: `  aileron-proxy sandbox init
  aileron-proxy sandbox plan --json
  aileron-proxy sandbox check --agent=claude`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRunE,
	}
	cmd.AddCommand(newSandboxInitCmd(a), newSandboxPlanCmd(a), newSandboxBuildCmd(a), newSandboxCheckCmd(a),
		newSandboxUpCmd(a), newSandboxLsCmd(a), newSandboxDownCmd(a), newSandboxExecCmd(a))
	return cmd
}

// projectFlag registers --project and returns its value holder.
func projectFlag(cmd *cobra.Command) *string {
	p := new(string)
	cmd.Flags().StringVar(p, "project", ".", "project directory (holds .devcontainer/)")
	return p
}

func runtimeFlag(cmd *cobra.Command) *string {
	r := new(string)
	cmd.Flags().StringVar(r, "runtime", "auto", "container runtime: auto, docker or podman")
	return r
}

// planAndRuntime parses --runtime (a usage error when invalid), plans the
// project's sandbox and selects the container runtime.
func (a *app) planAndRuntime(ctx context.Context, project, runtimeFlag string) (*launcher.Plan, runtime.Runtime, error) {
	kind, err := runtime.ParseKind(runtimeFlag)
	if err != nil {
		return nil, nil, usageError(err)
	}
	plan, err := launcher.NewPlan(project, a.planOptions())
	if err != nil {
		return nil, nil, err
	}
	rt, err := runtime.New(ctx, runtime.Config{Kind: kind, Logger: a.consoleLogger()})
	if err != nil {
		return nil, nil, err
	}
	return plan, rt, nil
}

func newSandboxInitCmd(a *app) *cobra.Command {
	var force bool
	var agent string
	cmd := &cobra.Command{
		Use:   "init [--project DIR] [--agent NAME] [--force]",
		Short: "Scaffold .devcontainer/devcontainer.json and a Dockerfile",
		Long: `Write .devcontainer/devcontainer.json (JSON with comments) and .devcontainer/Dockerfile,
which extends aileron/sandbox-base:` + launcher.BaseVersion + ` and carries commented snippets for
common tools (git, gh, Node.js, Python, kubectl). Existing files are left alone unless --force is given.

With --agent (` + strings.Join(launcher.AgentNames(), ", ") + `) the Dockerfile installs Node.js and that
agent from npm, versions pinned, and containerEnv sets the placeholder key the agent needs to start
plus its telemetry-off settings. It also configures the agent's MCP server "aileron", which
runs aileron-proxy mcp in the sandbox (.mcp.json and .claude/settings.json for claude,
.gemini/settings.json for gemini, opencode.json for opencode, the image's config for codex),
adding its entries to existing files and keeping the rest; see docs/agents.md and docs/mcp.md.`,
		Example: `  aileron-proxy sandbox init
  aileron-proxy sandbox init --agent claude
  aileron-proxy sandbox init --project ../agent-repo --force`,
		Args: usageArgs(cobra.NoArgs),
	}
	project := projectFlag(cmd)
	cmd.Flags().BoolVar(&force, "force", false, "overwrite existing files")
	cmd.Flags().StringVar(&agent, "agent", "", "agent recipe: "+strings.Join(launcher.AgentNames(), ", ")+" (empty: generic starter files)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if agent != "" {
			if _, err := launcher.LookupAgent(agent); err != nil {
				return usageError(fmt.Errorf("--agent: %w", err))
			}
		}
		written, err := launcher.Init(*project, launcher.InitOptions{Force: force, Agent: agent})
		if err != nil {
			return err
		}
		for _, p := range written {
			fmt.Fprintf(a.stdout, "wrote %s\n", p)
		}
		return nil
	}
	return cmd
}

func newSandboxPlanCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "plan [--project DIR] [--runtime auto|docker|podman] [--learn HOSTGLOB]... [--json]",
		Short: "Show how the sandbox image would be composed",
		Long: `Print the normalized sandbox plan: tier, image, Dockerfile, build context, base image,
devcontainer settings and the container runtime that would be used. Nothing is built.
Settings the sandbox refuses (privileged, capAdd, runArgs off the allow-list, ...) are listed
with their reason, and the command then exits 1: launch, build and check refuse the same plan.
With --runtime auto (the default) this runs ` + "`docker info`" + ` to see whether Docker answers.
With --learn, the plan also says which hosts a learn session of launch or sandbox up
with the same --learn would learn.`,
		Example: `  aileron-proxy sandbox plan
  aileron-proxy sandbox plan --json --runtime podman`,
		Args: usageArgs(cobra.NoArgs),
	}
	project := projectFlag(cmd)
	rtFlag := runtimeFlag(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	var learnHosts []string
	learnFlag(cmd.Flags(), &learnHosts)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		kind, err := runtime.ParseKind(*rtFlag)
		if err != nil {
			return usageError(err)
		}
		learnGlobs, err := hostport.ParseGlobs(learnHosts, "learn pattern")
		if err != nil {
			return usageError(fmt.Errorf("--learn: %w", err))
		}
		plan, err := launcher.NewPlan(*project, a.planOptions())
		if err != nil {
			return err
		}
		var info launcher.RuntimeInfo
		rt, err := runtime.New(cmd.Context(), runtime.Config{Kind: kind, Logger: a.consoleLogger()})
		if err != nil {
			info.Selection = err.Error()
		} else {
			info = launcher.RuntimeInfo{Kind: rt.Kind().String(), Selection: rt.Selection()}
		}
		if asJSON {
			err = launcher.WritePlanJSON(a.stdout, plan, info)
		} else {
			err = launcher.WritePlanText(a.stdout, plan, info)
			if err == nil && len(learnGlobs) > 0 {
				names := make([]string, len(learnGlobs))
				for i, g := range learnGlobs {
					names[i] = g.String()
				}
				_, err = fmt.Fprintf(a.stdout, "learn: %s\n", launcher.LearnSummary(names))
			}
		}
		if err != nil {
			return err
		}
		// The plan is shown in full; a refused setting still fails the command.
		return plan.Refusal()
	}
	return cmd
}

func newSandboxBuildCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "build [--project DIR] [--runtime auto|docker|podman]",
		Short: "Build the sandbox image",
		Long: `Build the plan's image: tier 0 from the sandbox-base definition embedded in this binary,
tier 1 from the devcontainer's Dockerfile (after sandbox-base when the Dockerfile extends it).
Images always rebuild; tier 2 and devcontainer "image" references are pulled only when missing.
Build output goes to stderr; the images built are listed on stdout.`,
		Example: `  aileron-proxy sandbox build
  aileron-proxy sandbox build --runtime podman`,
		Args: usageArgs(cobra.NoArgs),
	}
	project := projectFlag(cmd)
	rtFlag := runtimeFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		plan, rt, err := a.planAndRuntime(cmd.Context(), *project, *rtFlag)
		if err != nil {
			return err
		}
		fmt.Fprintf(a.stderr, "building tier %s image %s with %s (%s)\n", plan.Tier, plan.Image, rt.Kind(), rt.Selection())
		res, err := launcher.Prepare(cmd.Context(), rt, plan, launcher.PrepareOptions{Policy: launcher.BuildAlways, Output: a.stderr})
		if err != nil {
			return err
		}
		for _, img := range res.Built {
			fmt.Fprintf(a.stdout, "built %s\n", img)
		}
		for _, img := range res.Pulled {
			fmt.Fprintf(a.stdout, "pulled %s\n", img)
		}
		if len(res.Built)+len(res.Pulled) == 0 {
			fmt.Fprintf(a.stdout, "present %s\n", res.Image)
		}
		return nil
	}
	return cmd
}

func newSandboxCheckCmd(a *app) *cobra.Command {
	var agent, buildFlag string
	var shims bool
	cmd := &cobra.Command{
		Use:   "check --agent=CMD [--project DIR] [--runtime auto|docker|podman] [--sandbox-build auto|always|never]",
		Short: "Check that the sandbox image can run an agent",
		Long: `Prepare the sandbox image with launch's build policy (--sandbox-build, default auto: build
tier 0/1 only when missing), then validate it in a throwaway container without network:
/bin/sh runs, ` + launcher.WorkspacePath + ` is writable when mounted, the agent command is on PATH,
and wget (used by connector shims) is present. For an agent with a recipe (` + strings.Join(launcher.AgentNames(), ", ") + `)
it also checks that the agent's --version runs, that its model connector is installed and
has a credential, that containerEnv sets its placeholder key, and that the agent's MCP
configuration starts aileron-proxy mcp. Each failure names its fix.

Exit status: 0 when every check passes, 1 when one fails or the image cannot be prepared, 2 on usage errors.`,
		Example: `  aileron-proxy sandbox check --agent=claude
  aileron-proxy sandbox check --agent=codex --sandbox-build=never --runtime podman
  aileron-proxy sandbox check --agent=my-agent --shims=false`,
		Args: usageArgs(cobra.NoArgs),
	}
	project := projectFlag(cmd)
	rtFlag := runtimeFlag(cmd)
	cmd.Flags().StringVar(&agent, "agent", "", "agent recipe ("+strings.Join(launcher.AgentNames(), ", ")+") or command the image must provide (required)")
	cmd.Flags().StringVar(&buildFlag, "sandbox-build", "auto", "build policy: auto (build when missing), always or never")
	cmd.Flags().BoolVar(&shims, "shims", true, "require wget, which mounted connector shims call")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if agent == "" {
			return usageError(errors.New("--agent is required (the command the agent runs, e.g. --agent=claude)"))
		}
		policy, err := launcher.ParseBuildPolicy(buildFlag)
		if err != nil {
			return usageError(err)
		}
		plan, rt, err := a.planAndRuntime(cmd.Context(), *project, *rtFlag)
		if err != nil {
			return err
		}
		if _, err := launcher.Prepare(cmd.Context(), rt, plan, launcher.PrepareOptions{Policy: policy, Output: a.stderr}); err != nil {
			return err
		}
		recipe, known := launcher.LookupAgent(agent)
		command := agent
		if known == nil {
			command = recipe.Command
		}
		rep, err := launcher.Check(cmd.Context(), rt, launcher.CheckOptions{Image: plan.RunImage(), Agent: command, Shims: shims, Workspace: runtime.Mount{Target: plan.Workspace.Target}, BaseImage: plan.BaseImage})
		if err != nil {
			return err
		}
		if known == nil {
			more, err := a.checkAgentRecipe(cmd.Context(), rt, plan, recipe)
			if err != nil {
				return err
			}
			rep.Results = append(rep.Results, more...)
		}
		fmt.Fprintf(a.stdout, "image %s: tier %s, runtime %s\n", plan.RunImage(), plan.Tier, rt.Kind())
		for _, r := range rep.Results {
			status := "ok"
			if !r.OK {
				status = "FAIL"
			}
			fmt.Fprintf(a.stdout, "%-4s  %-11s  %s\n", status, r.Name, r.Detail)
		}
		return rep.Err()
	}
	return cmd
}
