package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/aileron-dev/aileron-proxy/api"
	"github.com/aileron-dev/aileron-proxy/daemon"
	"github.com/aileron-dev/aileron-proxy/internal/envname"
	"github.com/aileron-dev/aileron-proxy/launcher"
	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
)

// Long-lived sandboxes: `sandbox up|ls|down|exec`. The running daemon owns
// them, so each command is a client of its API.

// sandboxDaemon returns a client for the running daemon; sandboxes live in
// it, so none running is an error saying to start one.
func (a *app) sandboxDaemon() (*api.Client, error) {
	c, err := api.NewClient(a.homePath(daemon.DaemonFile))
	if errors.Is(err, api.ErrNoDaemon) {
		return nil, errors.New("no aileron-proxy daemon is running; sandboxes live in the daemon: start `aileron-proxy serve` first")
	}
	return c, err
}

func newSandboxUpCmd(a *app) *cobra.Command {
	var (
		sandbox, buildFlag, ttl string
		connectors              []string
		asJSON                  bool
	)
	cmd := &cobra.Command{
		Use:   "up [--project DIR] [--connector FQN]... [--sandbox=auto|docker|podman] [--sandbox-build=auto|always|never] [--ttl DURATION] [--json]",
		Short: "Start a long-lived sandbox for the exec/files API",
		Long: `Start a long-lived sandbox in the running daemon (` + "`aileron-proxy serve`" + `; there is
none without it): launch's composition (session, shims, CA, environment, image, egress
guard, hardening, the project mounted read-write at ` + launcher.WorkspacePath + `), with a
keep-alive process instead of an agent. It stays up until ` + "`sandbox down`" + ` or its --ttl,
across restarts of the daemon (unless serve runs with --shutdown-sandboxes).

Commands and file operations then run in it through the daemon's API with the
sandbox's control token (POST /v1/sandboxes/{id}/exec, /files, /fs/*; see docs/api.md),
or with ` + "`sandbox exec`" + `. The token is printed once (--json) and never enters the sandbox.

--json prints {"id", "api_url", "token", "workdir", "session_id", "runtime", "image"}.`,
		Example: `  aileron-proxy sandbox up --json
  aileron-proxy sandbox up --project ../repo --sandbox=podman --ttl 2h`,
		Args: usageArgs(cobra.NoArgs),
	}
	cmd.DisableFlagsInUseLine = true
	project := projectFlag(cmd)
	f := cmd.Flags()
	composeFlags(f, &sandbox, &buildFlag, &connectors)
	f.StringVar(&ttl, "ttl", "", `lifetime of the sandbox and its session, e.g. "2h" or "1d" (default 8h)`)
	var learnHosts []string
	learnFlag(f, &learnHosts)
	f.BoolVar(&asJSON, "json", false, "print the sandbox, its token included, as JSON")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if _, err := runtime.ParseKind(sandbox); err != nil {
			return usageError(fmt.Errorf("--sandbox: %w", err))
		}
		if _, err := launcher.ParseBuildPolicy(buildFlag); err != nil {
			return usageError(fmt.Errorf("--sandbox-build: %w", err))
		}
		if _, err := api.ParseTTL(ttl); err != nil {
			return usageError(fmt.Errorf("--ttl: %w", err))
		}
		if err := checkLearnFlag(learnHosts); err != nil {
			return err
		}
		abs, err := filepath.Abs(*project)
		if err != nil {
			return fmt.Errorf("resolving --project %q: %w", *project, err)
		}
		c, err := a.sandboxDaemon()
		if err != nil {
			return err
		}
		names, err := devcontainer.LocalEnvNames(abs)
		if err != nil {
			return err
		}
		localEnv := map[string]string{}
		for _, n := range names {
			if v, ok := a.lookupEnv(n); ok {
				localEnv[n] = v
			}
		}
		sb, err := c.CreateSandbox(cmd.Context(), api.CreateSandboxRequest{Project: abs, Connectors: connectors, Runtime: sandbox, Build: buildFlag, TTL: ttl, LocalEnv: localEnv, Learn: learnHosts})
		if err != nil {
			return fmt.Errorf("starting the sandbox: %w", err)
		}
		if asJSON {
			return writeJSON(a.stdout, sb)
		}
		fmt.Fprintf(a.stdout, "sandbox %s is up (session %s, %s, image %s)\n  workdir  %s\n  api_url  %s\n  token    %s\n",
			sb.ID, sb.SessionID, sb.Runtime, sb.Image, sb.Workdir, sb.APIURL, sb.Token)
		return nil
	}
	return cmd
}

func newSandboxLsCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls [--json]",
		Short: "List the daemon's long-lived sandboxes",
		Long:  `List the running daemon's long-lived sandboxes (without their tokens).`,
		Example: `  aileron-proxy sandbox ls
  aileron-proxy sandbox ls --json`,
		Args: usageArgs(cobra.NoArgs),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := a.sandboxDaemon()
		if err != nil {
			return err
		}
		list, err := c.ListSandboxes(cmd.Context())
		if err != nil {
			return err
		}
		if asJSON {
			if list == nil {
				list = []api.SandboxInfo{}
			}
			return writeJSON(a.stdout, api.SandboxList{Sandboxes: list})
		}
		if len(list) == 0 {
			fmt.Fprintln(a.stdout, "no sandboxes (start one with `aileron-proxy sandbox up`)")
			return nil
		}
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSESSION\tRUNTIME\tIMAGE\tPROJECT\tEXPIRES")
		for _, s := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.SessionID, s.Runtime, s.Image, s.Project, s.ExpiresAt.Format("2006-01-02 15:04"))
		}
		return tw.Flush()
	}
	return cmd
}

func newSandboxDownCmd(a *app) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "down ID|--all",
		Short: "Remove a long-lived sandbox",
		Long: `Remove a long-lived sandbox: its in-flight calls fail with SANDBOX_GONE, then its
container, guard, network and relays are removed and its session is ended.`,
		Example: `  aileron-proxy sandbox down sbx_0123456789abcdef
  aileron-proxy sandbox down --all`,
		Args: usageArgs(func(_ *cobra.Command, args []string) error {
			if all != (len(args) == 0) || len(args) > 1 {
				return errors.New("give one sandbox ID or --all")
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&all, "all", false, "remove every sandbox")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := a.sandboxDaemon()
		if err != nil {
			return err
		}
		ids := args
		if all {
			list, err := c.ListSandboxes(cmd.Context())
			if err != nil {
				return err
			}
			for _, s := range list {
				ids = append(ids, s.ID)
			}
		}
		var errs []error
		for _, id := range ids {
			if err := c.RemoveSandbox(cmd.Context(), id); err != nil {
				errs = append(errs, fmt.Errorf("removing sandbox %s: %w", id, err))
				continue
			}
			fmt.Fprintf(a.stdout, "removed %s\n", id)
		}
		return errors.Join(errs...)
	}
	return cmd
}

func newSandboxExecCmd(a *app) *cobra.Command {
	var (
		cwd  string
		envs []string
	)
	cmd := &cobra.Command{
		Use:   "exec ID [--cwd DIR] [--env K=V]... -- CMD [ARGS...]",
		Short: "Run a command in a long-lived sandbox",
		Long: `Run CMD in sandbox ID as its user, in its working directory (--cwd to change it),
with its environment plus --env, under the same egress lock as everything in it.
stdin, stdout and stderr pass through, with a terminal when stdin is one; the exit
status is CMD's. The container runtime's CLI (docker or podman) runs it, so this needs
the same access to the runtime as the daemon.`,
		Example: `  aileron-proxy sandbox exec sbx_0123456789abcdef -- git status
  aileron-proxy sandbox exec sbx_0123456789abcdef --cwd sub --env DEBUG=1 -- sh -c 'make test'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 || cmd.ArgsLenAtDash() != 1 {
				return usageError(fmt.Errorf("give a sandbox ID, then the command after --; usage: %s", cmd.UseLine()))
			}
			return nil
		},
	}
	cmd.DisableFlagsInUseLine = true
	f := cmd.Flags()
	f.StringVar(&cwd, "cwd", "", "working directory in the sandbox (relative to its workdir)")
	f.StringArrayVar(&envs, "env", nil, "K=V set for the command (repeatable)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		env := make(map[string]string, len(envs))
		for _, kv := range envs {
			// Errors name the variable, never its value.
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return usageError(errors.New(`an --env value has no "="; use --env NAME=VALUE`))
			}
			if !envname.Valid(k) {
				return usageError(fmt.Errorf("--env: %q is not an environment variable name; use letters, digits and _, not starting with a digit (--env NAME=VALUE)", k))
			}
			env[k] = v
		}
		code, err := a.sandboxExec(cmd.Context(), args[0], cwd, env, args[1:])
		if err != nil {
			return err
		}
		if code != 0 {
			return withCode(code, nil)
		}
		return nil
	}
	return cmd
}

// sandboxExec runs argv in sandbox id through the runtime's CLI, with env
// set for it alone.
func (a *app) sandboxExec(ctx context.Context, id, cwd string, env map[string]string, argv []string) (int, error) {
	c, err := a.sandboxDaemon()
	if err != nil {
		return 0, err
	}
	list, err := c.ListSandboxes(ctx)
	if err != nil {
		return 0, err
	}
	var sb *api.SandboxInfo
	for i := range list {
		if list[i].ID == id {
			sb = &list[i]
		}
	}
	if sb == nil {
		return 0, fmt.Errorf("no sandbox %q; `aileron-proxy sandbox ls` lists them", id)
	}
	kind, err := runtime.ParseKind(sb.Runtime)
	if err != nil {
		return 0, err
	}
	rt, err := runtime.New(ctx, runtime.Config{Kind: kind, Logger: a.consoleLogger()})
	if err != nil {
		return 0, err
	}
	wd := sb.Workdir
	if cwd != "" {
		wd = cwd
		if !strings.HasPrefix(cwd, "/") {
			wd = sb.Workdir + "/" + cwd
		}
	}
	return rt.Exec(ctx, runtime.ExecRequest{
		Container: sb.Container, User: sb.User, Workdir: wd, Env: env, Cmd: argv,
		Stdin: a.stdin, TTY: isTerminal(a.stdin), Stdout: a.stdout, Stderr: a.stderr,
	})
}
