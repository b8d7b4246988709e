package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/api"
	"github.com/aileron-dev/aileron-proxy/daemon"
	"github.com/aileron-dev/aileron-proxy/launcher"
	"github.com/aileron-dev/aileron-proxy/launcher/guard"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
)

// How long launch waits for an in-process daemon to start and to stop.
const (
	inProcessStartTimeout = 15 * time.Second
	inProcessStopTimeout  = 30 * time.Second
)

// composeFlags registers the flags launch and `sandbox up` share:
// --sandbox, --sandbox-build and --connector.
func composeFlags(f *pflag.FlagSet, sandbox, build *string, connectors *[]string) {
	f.StringVar(sandbox, "sandbox", "auto", "container runtime: auto (Docker when its engine answers, else Podman), docker or podman")
	f.StringVar(build, "sandbox-build", "auto", "build policy: auto (build tier 0/1 when missing), always or never")
	f.StringArrayVar(connectors, "connector", nil, "connector FQN the session may use (repeatable; default every active connector)")
}

// newLaunchCmd is `aileron-proxy launch`: run an agent in a sandbox whose
// only way out is the session's proxy and API.
func newLaunchCmd(a *app) *cobra.Command {
	var (
		sandbox, buildFlag string
		connectors         []string
		allowHostCommands  bool
	)
	cmd := &cobra.Command{
		Use:   "launch [--sandbox=auto|docker|podman] [--sandbox-build=auto|always|never] [--project DIR] [--connector FQN]... -- AGENT [ARGS...]",
		Short: "Run an agent in a sandbox whose only way out is the proxy",
		Long: `Run AGENT in a one-shot Docker or Podman container for a new session.

launch uses the running ` + "`aileron-proxy serve`" + ` (found through $AILERON_HOME/daemon.json);
when none runs it starts one in-process for its own lifetime. It then:
  1. renders tools.txt and one shim per tool of the session's connectors (--connector,
     default every active one); a tool named like AGENT, or another conflict, stops
     the launch before anything is created;
  2. creates the session, prepares the project's sandbox image (--sandbox-build: auto
     builds tier 0/1 images only when missing, always rebuilds, never fails when
     missing) and validates it in a throwaway container;
  3. creates an internal network for the session, with no route off the host, relays
     the proxy and the API on its gateway, and installs the egress guard (nftables in
     the sandbox's network namespace, held by a CAP_NET_ADMIN-only container): the
     sandbox reaches only those two relays, nothing else on the host; if the guard
     cannot be installed, launch stops;
  4. runs AGENT (the image's ENTRYPOINT is not used) with every capability dropped,
     no-new-privileges and a pids limit, as the image's user, with the
     project mounted read-write at ` + launcher.WorkspacePath + ` (its working directory),
     tools.txt at ` + launcher.SandboxToolsFile + `, the shims in ` + launcher.SandboxShimsDir + `,
     the session CA at ` + launcher.SandboxCAFile + ` and the CA bundle at ` + launcher.SandboxCABundle + `
     and over ` + launcher.SandboxSystemBundle + `, all read-only. The environment
     carries AILERON_API_URL, AILERON_TOKEN, AILERON_SESSION_ID, HTTPS_PROXY and the CA
     variables common clients read (see docs/launcher.md); secrets never go in argv.

When the project belongs to another uid/gid than the image's user, that user is
remapped to the owner's ids in a derived image (devcontainer updateRemoteUserUID,
default true), so the agent's files belong to the project owner; a root-owned project
runs the agent as uid 0, still with every capability dropped.

The devcontainer's lifecycle commands (onCreateCommand, updateContentCommand,
postCreateCommand, postStartCommand) run inside the sandbox, under the same lock and user,
before AGENT; a failing one stops the launch with its exit status. initializeCommand runs
on the host, and only with --allow-host-commands. See docs/launcher.md for every key.

The guard runs this binary inside a container, so it must be statically linked
(CGO_ENABLED=0, as make build does) or AILERON_GUARD_BINARY must name a static build.

A terminal is allocated when stdin is one. SIGINT and SIGTERM are passed to the agent;
when it has not exited 10s later its container is removed. On exit the container, the
guard's holder, the network, the relays and the temporary files are removed and the
session is ended, audited as session.ended with the agent's exit status.

With --learn 'api.example.com,*.example.org' the session is a learn session: the
agent's requests to matching hosts that no connector operation matches are forwarded
without any credential and recorded (the banner lists the patterns; TTL 1h). Then
` + "`aileron-proxy connector draft --session LAST --fqn FQN --install`" + ` turns them into a
connector, and the next launch enforces it. See docs/learn.md.

Exit status: the agent's; 1 when the sandbox could not be started; 2 on usage errors.`,
		Example: `  aileron-proxy launch -- claude
  aileron-proxy launch --sandbox=podman --connector github://acme/aileron-connector-github -- claude --model opus
  aileron-proxy launch --learn 'api.example.com,*.example.org' -- ./agent.sh`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError(fmt.Errorf("no agent command given; usage: %s", cmd.UseLine()))
			}
			return nil
		},
	}
	// Use spells out the syntax, flags included.
	cmd.DisableFlagsInUseLine = true
	project := projectFlag(cmd)
	f := cmd.Flags()
	composeFlags(f, &sandbox, &buildFlag, &connectors)
	f.BoolVar(&allowHostCommands, "allow-host-commands", false, "run the devcontainer's initializeCommand on the host (refused without it)")
	var learnHosts []string
	learnFlag(f, &learnHosts)
	// Everything after AGENT belongs to the agent, flags included.
	f.SetInterspersed(false)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		kind, err := runtime.ParseKind(sandbox)
		if err != nil {
			return usageError(fmt.Errorf("--sandbox: %w", err))
		}
		build, err := launcher.ParseBuildPolicy(buildFlag)
		if err != nil {
			return usageError(fmt.Errorf("--sandbox-build: %w", err))
		}
		if err := checkLearnFlag(learnHosts); err != nil {
			return err
		}
		return a.runLaunch(cmd.Context(), launchOptions{
			runtime: kind, build: build, project: *project, connectors: connectors, agent: args,
			allowHostCommands: allowHostCommands, learn: learnHosts,
		})
	}
	return cmd
}

type launchOptions struct {
	runtime    runtime.Kind
	build      launcher.BuildPolicy
	project    string
	connectors []string
	agent      []string
	// allowHostCommands is --allow-host-commands.
	allowHostCommands bool
	// learn is --learn.
	learn []string
}

func (a *app) runLaunch(ctx context.Context, o launchOptions) error {
	log := a.consoleLogger()
	defer log.Sync() //nolint:errcheck
	plan, err := launcher.NewPlan(o.project, a.planOptions())
	if err != nil {
		return err
	}
	if err := plan.Refusal(); err != nil {
		return err
	}
	if err := plan.HostCommandsRefusal(o.allowHostCommands); err != nil {
		return err
	}
	for _, w := range plan.Warnings {
		log.Warn(w)
	}
	store, loaded, err := a.loadConnectors(func(p string) { log.Warn(p) })
	if err != nil {
		return err
	}

	// Signals go to the agent; main's context still ends on the first one.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	rt, err := runtime.New(ctx, runtime.Config{Kind: o.runtime, Logger: log, Exec: runtime.SignalExecutor(sigs)})
	if err != nil {
		return err
	}
	guardBin, err := guard.Helper(a.getenv(guard.EnvBinary))
	if err != nil {
		return err
	}

	client, stop, err := a.launchDaemon(ctx, log)
	if err != nil {
		return err
	}
	defer stop()
	info := client.Info()
	acts, err := a.loadActions(loaded.Active)
	if err != nil {
		return err
	}
	// Held requests of this launch's session are told on the terminal.
	notify := &approvalNotifier{w: a.stderr, surface: plan.ApprovalSurface, consoleURL: info.APIURL + "/ui/approvals"}
	if hasDesktop() {
		notify.notifySend, _ = exec.LookPath("notify-send")
	}
	sessions := &sessionRecorder{SessionClient: client}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go notify.watch(watchCtx, client, sessions.ID, approvalPollInterval)
	code, err := launcher.Launch(ctx, launcher.LaunchConfig{
		Logger:        log,
		Runtime:       rt,
		Plan:          plan,
		BuildPolicy:   o.build,
		Sessions:      sessions,
		Daemon:        launcher.DaemonEndpoints{ProxyAddr: info.ProxyAddr, APIURL: info.APIURL},
		Connectors:    loaded.Active,
		ConnectorFQNs: o.connectors,
		Learn:         o.learn,
		StoreDir:      store.Dir(),
		Actions:       acts,
		Agent:         o.agent,
		Stdin:         a.stdin,
		Stdout:        a.stdout,
		Stderr:        a.stderr,
		TTY:           isTerminal(a.stdin),
		AuditLog:      a.homePath(daemon.AuditFile),
		GuardBinary:   guardBin,
		LocalEnv:      a.lookupEnv,

		AllowHostCommands: o.allowHostCommands,
	})
	if err != nil {
		return err
	}
	if code != 0 {
		return withCode(code, nil)
	}
	return nil
}

// launchDaemon returns a client for the daemon of a.home. When none runs
// (no daemon.json, or one naming a daemon that does not answer) it starts
// one in this process, on loopback only, and stop shuts it down.
func (a *app) launchDaemon(ctx context.Context, log *zap.Logger) (client *api.Client, stop func(), err error) {
	path := a.homePath(daemon.DaemonFile)
	client, err = api.NewClient(path)
	switch {
	case err == nil:
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, perr := client.ListSessions(pctx)
		cancel()
		if perr == nil {
			return client, func() {}, nil
		}
		var ae *api.APIError
		if errors.As(perr, &ae) {
			return nil, nil, fmt.Errorf("checking the daemon named in %s: %w", path, perr)
		}
		log.Warn("daemon.json names a daemon that does not answer; starting one in this process", zap.Error(perr))
	case !errors.Is(err, api.ErrNoDaemon):
		return nil, nil, err
	}
	return a.startInProcessDaemon(ctx, log, path)
}

// startInProcessDaemon runs serve's daemon in this process with the
// settings of $AILERON_HOME/config.json, except that both listeners are on
// 127.0.0.1 with free ports: sandboxes reach them only through launch's
// relays. It publishes daemon.json like serve, so other commands (approvals,
// audit tail) find it while launch runs. Its log goes to the rotated
// $AILERON_HOME/logs/daemon.log, not to the agent's terminal.
func (a *app) startInProcessDaemon(ctx context.Context, log *zap.Logger, daemonFile string) (*api.Client, func(), error) {
	cfg, err := daemon.LoadConfig(a.home, "")
	if err != nil {
		return nil, nil, err
	}
	cfg.ProxyListen, cfg.APIListen, cfg.AdvertiseProxyAddr = "127.0.0.1:0", "127.0.0.1:0", ""
	logFile, err := daemon.OpenRotatingFile(a.homePath(daemon.LogFile), 0, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("starting the daemon in this process: %w", err)
	}
	dlog, stopLog := a.jsonLoggerTo(logFile)
	closeLog := func() { stopLog(); _ = logFile.Close() }
	d, err := daemon.New(cfg, dlog)
	if err != nil {
		closeLog()
		return nil, nil, fmt.Errorf("starting the daemon in this process: %w", err)
	}
	// The daemon outlives ctx: the session is ended after a Ctrl-C.
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- d.Run(dctx) }()
	stop := func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				log.Warn("the in-process daemon stopped with an error", zap.Error(err), zap.String("log_file", logFile.Path()))
			}
		case <-time.After(inProcessStopTimeout):
			log.Warn("the in-process daemon did not stop in time", zap.String("log_file", logFile.Path()))
		}
		closeLog()
	}
	// Run publishes daemon.json first thing; wait until it names this daemon.
	deadline := time.NewTimer(inProcessStartTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if info, err := api.ReadDaemonInfo(daemonFile); err == nil && info.APIURL == d.APIURL() {
			break
		}
		select {
		case err := <-done:
			cancel()
			closeLog()
			return nil, nil, fmt.Errorf("starting the daemon in this process: %w (its log: %s)", errors.Join(err, errors.New("it stopped before publishing daemon.json")), logFile.Path())
		case <-deadline.C:
			stop()
			return nil, nil, fmt.Errorf("starting the daemon in this process: %s did not appear within %s", daemonFile, inProcessStartTimeout)
		case <-tick.C:
		}
	}
	client, err := api.NewClient(daemonFile)
	if err != nil {
		stop()
		return nil, nil, err
	}
	fields := []zap.Field{zap.String("api_url", d.APIURL()), zap.String("log_file", logFile.Path())}
	if u, err := d.ConsoleLoginURL(); err == nil {
		fields = append(fields, zap.String("console", u))
	}
	log.Info("no daemon was running; started one in this process for the launch", fields...)
	return client, stop, nil
}

// isTerminal reports whether r is a terminal.
func isTerminal(r any) bool {
	f, ok := r.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// lookupEnv resolves devcontainer ${localEnv:VAR} from this process's
// environment; an empty value counts as unset, as in the devcontainer CLI.
func (a *app) lookupEnv(name string) (string, bool) {
	v := a.getenv(name)
	return v, v != ""
}

// planOptions are the options of every NewPlan: variables from this
// process's environment, mounts checked against this home.
func (a *app) planOptions() launcher.PlanOptions {
	return launcher.PlanOptions{LocalEnv: a.lookupEnv, AileronHome: a.home}
}
