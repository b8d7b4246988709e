package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"path"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/actions"
	"github.com/aileron-dev/aileron-proxy/api"
	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
	"github.com/aileron-dev/aileron-proxy/launcher/guard"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"github.com/aileron-dev/aileron-proxy/policy"
	"github.com/aileron-dev/aileron-proxy/shims"
)

// LabelSession records, on the containers and networks launch creates, the
// session they belong to.
const LabelSession = "dev.aileron.session"

// Defaults for LaunchConfig fields left zero.
const (
	DefaultStopGrace      = 10 * time.Second
	DefaultCleanupTimeout = 30 * time.Second
	// DefaultPidsLimit caps the agent container's processes and threads.
	DefaultPidsLimit = 4096
)

// SessionClient is the part of the daemon's operator API that Launch uses;
// *api.Client implements it.
type SessionClient interface {
	CreateSession(ctx context.Context, req api.CreateSessionRequest) (*api.CreatedSession, error)
	// EndSession ends a session without an exit status (the agent never ran).
	EndSession(ctx context.Context, id string) error
	// EndSessionWithExitCode ends a session, recording the agent's exit
	// status in the session.ended audit event.
	EndSessionWithExitCode(ctx context.Context, id string, code int) error
}

var _ SessionClient = (*api.Client)(nil)

// DaemonEndpoints are where the daemon listens on the host (daemon.json).
// Launch never hands them to the sandbox: it relays them through the
// sandbox network's gateway.
type DaemonEndpoints struct {
	// ProxyAddr is the proxy's host:port, e.g. "127.0.0.1:3128".
	ProxyAddr string
	// APIURL is the control API's base URL without /v1, e.g.
	// "http://127.0.0.1:7700".
	APIURL string
}

// LaunchConfig configures Launch. Required fields say so.
type LaunchConfig struct {
	// Logger is required.
	Logger *zap.Logger
	// Runtime runs the containers; required. Build it with SignalExecutor
	// so signals reach the agent.
	Runtime runtime.Runtime
	// Plan is the project's sandbox plan (NewPlan); required. Its
	// ProjectDir is mounted at WorkspacePath, read-write.
	Plan *Plan
	// BuildPolicy is how the image is prepared (see Prepare); required.
	BuildPolicy BuildPolicy
	// Sessions creates and ends the session; required.
	Sessions SessionClient
	// Daemon is where the relays forward to; both fields required.
	Daemon DaemonEndpoints
	// Connectors are the active installed connectors (policy.Store.Load's
	// Active); their tools become shims.
	Connectors []policy.Connector
	// ConnectorFQNs restricts the session to these connectors; empty means
	// every connector in Connectors.
	ConnectorFQNs []string
	// StoreDir is the connector store directory (policy.Store.Dir); the
	// session's packages are copied from it and mounted read-only at
	// SandboxManifestsDir. Empty mounts no manifests.
	StoreDir string
	// Actions are the installed actions (actions.Store.List); the active
	// ones on the session's connectors become action shims and are mounted
	// read-only at SandboxActionsDir.
	Actions []actions.Installed
	// Agent is the command and its arguments; Agent[0] is required and runs
	// as the container's entrypoint, looked up on the image's PATH.
	Agent []string
	// Stdin, Stdout and Stderr connect to the agent; nil means none.
	// Banner, warnings and build output go to Stderr.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// TTY allocates a terminal for the agent (set it when Stdin is one).
	TTY bool
	// AuditLog is the daemon's audit file, named in the banner; optional.
	AuditLog string
	// StopGrace is how long the agent has to exit after ctx ends (the
	// signal itself reaches it through SignalExecutor) before its
	// container is removed; zero means DefaultStopGrace.
	StopGrace time.Duration
	// GuardBinary is the host path of a static aileron-proxy (see
	// GuardHelper) that the egress guard's holder runs; required.
	GuardBinary string
	// LocalEnv resolves ${localEnv:VAR} in containerEnv and remoteEnv: the
	// environment of the process that asked for the launch; nil means
	// os.LookupEnv.
	LocalEnv func(string) (string, bool)
	// AllowHostCommands lets the devcontainer's initializeCommand run on
	// the host (launch --allow-host-commands); without it a plan with one
	// is refused.
	AllowHostCommands bool
	// Learn are host patterns that make the session a learn session
	// (api.CreateSessionRequest.Learn); the banner names them. Empty means
	// an ordinary session.
	Learn []string
	// CleanupTimeout bounds each teardown step (removing the container,
	// the network, ending the session); zero means DefaultCleanupTimeout.
	CleanupTimeout time.Duration
}

// validate checks the required fields and fills in the defaults.
func (cfg *LaunchConfig) validate() error {
	var missing []string
	for _, f := range []struct {
		name string
		ok   bool
	}{
		{"Logger", cfg.Logger != nil}, {"Runtime", cfg.Runtime != nil}, {"Plan", cfg.Plan != nil},
		{"Sessions", cfg.Sessions != nil}, {"Daemon.ProxyAddr", cfg.Daemon.ProxyAddr != ""},
		{"Daemon.APIURL", cfg.Daemon.APIURL != ""}, {"BuildPolicy", cfg.BuildPolicy != ""},
		{"GuardBinary", cfg.GuardBinary != ""},
	} {
		if !f.ok {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("launching: LaunchConfig is missing required fields: %s", strings.Join(missing, ", "))
	}
	if cfg.Plan.Tier == TierUnset {
		return errors.New("launching: the plan has no tier (use NewPlan)")
	}
	if err := cfg.Plan.Refusal(); err != nil {
		return err
	}
	if err := cfg.Plan.HostCommandsRefusal(cfg.AllowHostCommands); err != nil {
		return err
	}
	if len(cfg.Agent) == 0 || strings.TrimSpace(cfg.Agent[0]) == "" {
		return errors.New("launching: no agent command given (pass it after --, e.g. `aileron-proxy launch -- claude`)")
	}
	if a := cfg.Agent[0]; !isAgentCommand(a) {
		return fmt.Errorf("launching: agent command %q is not a command name or path (pass it after --, e.g. `aileron-proxy launch -- claude`)", a)
	}
	if cfg.Stdout == nil {
		cfg.Stdout = io.Discard
	}
	if cfg.Stderr == nil {
		cfg.Stderr = io.Discard
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = DefaultStopGrace
	}
	if cfg.CleanupTimeout <= 0 {
		cfg.CleanupTimeout = DefaultCleanupTimeout
	}
	return nil
}

// launch is one Launch in progress: what it created, to undo in reverse.
type launch struct {
	cfg  LaunchConfig
	rt   runtime.Runtime
	log  *zap.Logger
	undo []undoStep
	// exitCode is the agent's exit status once it ran.
	exitCode *int
	// ttl is the session's TTL ("" = the default).
	ttl string
}

// composed is a sandbox composed and guarded whose container is not yet
// started: what compose hands to one of its two endings, attachAgent
// (launch: run the agent, wait) or startSandbox (sandbox up: keep the
// container alive, register it).
type composed struct {
	sess     *api.CreatedSession
	plan     *Plan
	user     AgentUser
	rendered *shims.Rendered
	network  runtime.Network
	proxy    string
	// relays are the proxy and API relays, in that order; filesDir holds
	// the mounted files (both undone by cleanup).
	relays   []*Relay
	filesDir string
	guard    *guard.Guard
	// lifecycle is the devcontainer's in-sandbox commands, resolved.
	lifecycle []devcontainer.LifecycleStep
	// run is the container's run request, complete but for what it runs
	// (Entrypoint and Cmd), which the ending sets.
	run runtime.RunRequest
}

type undoStep struct {
	what string
	fn   func(ctx context.Context) error
}

func (l *launch) onExit(what string, fn func(ctx context.Context) error) {
	l.undo = append(l.undo, undoStep{what, fn})
}

// Launch runs the agent in a one-shot sandbox container and returns its
// exit status. In order, it:
//
//  1. renders tools.txt and the shims of the session's connectors, so a
//     tool that would shadow the agent command (or another conflict) stops
//     the launch before anything is created;
//  2. creates a session on the daemon for cfg.ConnectorFQNs;
//  3. prepares the image with cfg.BuildPolicy, then in one run of it
//     (checkAndProbeUser) validates it with the project mounted (Check's
//     script) and finds its user, from which the agent's user is decided
//     (the image user remapped to the project owner's uid/gid, or root for
//     a root-owned project; a remapped user is checked again);
//  4. creates a per-session internal network (no route off the host) and
//     two relays on its gateway to the daemon's proxy and API;
//  5. starts the egress guard (guard.Start): a holder container owning the
//     sandbox's network namespace, where only the two relays are reachable;
//     it fails closed, the agent never runs unguarded;
//  6. runs the agent in that namespace, with every capability dropped,
//     no-new-privileges and a pids limit, the session's environment and
//     read-only mounts (see SandboxEnv and docs/launcher.md).
//
// Whatever happens, everything it created is removed on return: the
// container, the guard's holder, the network, the relays, the temporary files, and the session
// is ended (with the agent's exit status once it ran). err is non-nil when
// the agent could not be run; the status is then 0.
func Launch(ctx context.Context, cfg LaunchConfig) (code int, err error) {
	if err := cfg.validate(); err != nil {
		return 0, err
	}
	l := &launch{cfg: cfg, rt: cfg.Runtime, log: cfg.Logger.Named("launch")}
	defer l.cleanup(ctx)
	c, err := l.compose(ctx)
	if err != nil {
		return 0, err
	}
	return l.attachAgent(ctx, c)
}

// cleanup runs the undo steps in reverse, each even when ctx has ended
// and each with its own CleanupTimeout, so a slow step cannot starve the
// session's end.
func (l *launch) cleanup(ctx context.Context) {
	for i := len(l.undo) - 1; i >= 0; i-- {
		s := l.undo[i]
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.CleanupTimeout)
		err := s.fn(cctx)
		cancel()
		if err != nil {
			l.log.Warn("cleaning up after the sandbox failed", zap.String("step", s.what), zap.Error(err))
		}
	}
}

// compose turns the plan into a guarded sandbox ready to start: session,
// shims and files, image, user and checks, network and relays,
// environment, egress guard, hardened run request. Every step it takes
// is undone by cleanup. It is long because it is the pipeline itself,
// read top to bottom; each step is a call.
func (l *launch) compose(ctx context.Context) (*composed, error) {
	cfg := &l.cfg
	agent := cfg.Agent[0]
	conns, err := policy.SelectConnectors(cfg.Connectors, cfg.ConnectorFQNs)
	if err != nil {
		return nil, fmt.Errorf("selecting connectors (check --connector): %w", err)
	}
	acts := sessionActions(cfg.Actions, conns)
	rendered, err := shims.Render(shims.RenderOptions{Connectors: conns, AgentCommand: path.Base(agent), Actions: acts})
	if err != nil {
		return nil, fmt.Errorf("%w\nnothing was started", err)
	}

	req := api.CreateSessionRequest{Agent: path.Base(agent), Project: cfg.Plan.ProjectDir, ApprovalSurface: cfg.Plan.ApprovalSurface.String(), TTL: l.ttl, Learn: cfg.Learn}
	for _, c := range conns {
		req.Connectors = append(req.Connectors, c.Spec.Connector.FQN)
	}
	sess, err := cfg.Sessions.CreateSession(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("creating the session: %w", err)
	}
	l.onExit("ending session "+sess.ID, func(ctx context.Context) error {
		if l.exitCode != nil {
			return l.cfg.Sessions.EndSessionWithExitCode(ctx, sess.ID, *l.exitCode)
		}
		return l.cfg.Sessions.EndSession(ctx, sess.ID)
	})
	l.log = l.log.With(zap.String("session_id", sess.ID))
	warnUnrendered(l.log, sess.Connectors, conns)

	files, err := writeSandboxFiles(sess, rendered, conns, cfg.StoreDir, l.log)
	if files != nil {
		l.onExit("removing "+files.dir, func(context.Context) error { return os.RemoveAll(files.dir) })
	}
	if err == nil {
		err = files.writeActions(acts)
	}
	if err != nil {
		return nil, err
	}

	plan := cfg.Plan
	if cfg.AllowHostCommands {
		if err := RunInitializeCommand(ctx, plan, cfg.LocalEnv, cfg.Stderr); err != nil {
			return nil, err
		}
	}
	if _, err := Prepare(ctx, l.rt, plan, PrepareOptions{Policy: cfg.BuildPolicy, Output: cfg.Stderr}); err != nil {
		return nil, err
	}
	user, rep, err := checkAndProbeUser(ctx, l.rt, plan, CheckOptions{
		Agent: agent, Shims: len(rendered.Shims) > 0, Workspace: plan.Workspace, BaseImage: plan.BaseImage,
	})
	if err != nil {
		return nil, err
	}
	if err := rep.Err(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("launching: %w", err)
	}

	name := "aileron-" + sess.ID
	labels := map[string]string{LabelManaged: "true", LabelSession: sess.ID}
	network, err := l.rt.NetworkCreate(ctx, runtime.NetworkRequest{Name: name, Internal: true, DisableDNS: true, Labels: labels})
	if err != nil {
		return nil, fmt.Errorf("creating the sandbox network: %w", err)
	}
	l.onExit("removing network "+name, func(ctx context.Context) error { return l.removeNetwork(ctx, name) })

	listen := net.JoinHostPort(network.Gateway, "0")
	proxyRelay, apiRelay, err := l.startRelays(listen, listen)
	if err != nil {
		return nil, err
	}
	resolved, err := resolveSandbox(ctx, l.rt, plan, user, cfg.LocalEnv)
	if err != nil {
		return nil, err
	}
	env, warnings, err := SandboxEnv(SandboxEnvInput{
		Session:      sess,
		ProxyAddr:    proxyRelay.Addr(),
		APIURL:       cfg.Daemon.APIURL,
		APIAddr:      apiRelay.Addr(),
		HostAlias:    l.rt.HostAlias(),
		ContainerEnv: resolved.containerEnv,
		RemoteEnv:    resolved.remoteEnv,
	})
	if err != nil {
		return nil, err
	}
	for _, w := range warnings {
		l.log.Warn(w)
	}
	guard, err := l.startGuard(ctx, name, network, labels, proxyRelay.Addr(), apiRelay.Addr())
	if err != nil {
		return nil, err
	}
	run := runtime.RunRequest{
		Image:           user.Image,
		User:            user.User,
		Name:            name,
		Network:         guard.NetworkMode,
		DropAllCaps:     true,
		NoNewPrivileges: true,
		PidsLimit:       DefaultPidsLimit,
		Workdir:         plan.WorkspaceFolder,
		Env:             env,
		Mounts:          append(files.mounts(plan, rendered), sandboxBinaryMount(cfg.GuardBinary)),
		Labels:          labels,
		ExtraArgs:       plan.RunArgs,
		Interactive:     true,
		TTY:             cfg.TTY,
		Stdin:           cfg.Stdin,
		Stdout:          cfg.Stdout,
		Stderr:          cfg.Stderr,
	}
	return &composed{
		sess: sess, plan: plan, user: user, rendered: rendered, network: network, proxy: proxyRelay.Addr(),
		relays: []*Relay{proxyRelay, apiRelay}, filesDir: files.dir, guard: guard, lifecycle: resolved.lifecycle, run: run,
	}, nil
}

// attachAgent is launch's ending: the agent runs in the composed
// container, after the devcontainer's lifecycle commands (agentCommand),
// attached to the terminal; its exit status is returned.
func (l *launch) attachAgent(ctx context.Context, c *composed) (int, error) {
	run := c.run
	entrypoint, cmd, scriptEnv := agentCommand(l.cfg.Agent, c.lifecycle)
	run.Entrypoint, run.Cmd = entrypoint, cmd
	run.Env = maps.Clone(run.Env)
	maps.Copy(run.Env, scriptEnv)
	writeBanner(l.cfg.Stderr, bannerInfo{
		session: c.sess.ID, plan: c.plan, rt: l.rt, tools: c.rendered.Shims,
		network: c.network, proxy: c.proxy, auditLog: l.cfg.AuditLog, guard: c.guard.Summary, user: c.user.Summary,
		learn: c.sess.Learn,
	})
	return l.runAgent(ctx, run)
}

// runAgent runs the container. The run is not tied to ctx: when ctx ends
// the agent gets StopGrace to exit on the signal SignalExecutor relayed,
// then its container is removed.
func (l *launch) runAgent(ctx context.Context, req runtime.RunRequest) (int, error) {
	l.onExit("removing container "+req.Name, func(ctx context.Context) error { return l.rt.ContainerRemove(ctx, req.Name) })
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRun()
	finished := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-finished:
			return
		case <-ctx.Done():
		}
		l.log.Info("stopping: waiting for the agent to exit", zap.Duration("grace", l.cfg.StopGrace))
		select {
		case <-finished:
			return
		case <-time.After(l.cfg.StopGrace):
		}
		l.log.Warn("the agent did not exit in time; removing its container", zap.String("container", req.Name))
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.CleanupTimeout)
		defer cancel()
		if err := l.rt.ContainerRemove(rctx, req.Name); err != nil {
			l.log.Warn("removing the container failed", zap.Error(err))
		}
		cancelRun()
	}()
	code, err := l.rt.Run(runCtx, req)
	close(finished)
	<-watched
	if err != nil {
		return 0, fmt.Errorf("running the agent: %w", err)
	}
	l.exitCode = &code
	l.log.Debug("agent exited", zap.Int("exit_code", code))
	return code, nil
}

// startGuard starts the egress guard's holder on network, allowing only the
// two relays, and registers its removal.
func (l *launch) startGuard(ctx context.Context, name string, network runtime.Network, labels map[string]string, relays ...string) (*guard.Guard, error) {
	allow := make([]netip.AddrPort, len(relays))
	for i, r := range relays {
		ap, err := netip.ParseAddrPort(r)
		if err != nil {
			return nil, fmt.Errorf("starting the egress guard: relay address %q is not ip:port: %w", r, err)
		}
		allow[i] = ap
	}
	guard, stop, err := guard.Start(ctx, l.rt, guard.Request{
		Name: name + "-guard", Image: l.cfg.Plan.Image, Network: network.Name, Binary: l.cfg.GuardBinary,
		Allow: allow, AddHosts: map[string]string{l.rt.HostAlias(): network.Gateway}, Labels: labels,
	})
	if stop != nil {
		l.onExit("removing the guard's holder "+name+"-guard", stop)
	}
	return guard, err
}

// startRelays starts the proxy and API relays on their listen addresses
// (the gateway's, port 0 for a new sandbox; the recorded ones for a
// sandbox found again after a restart).
func (l *launch) startRelays(proxyListen, apiListen string) (proxyRelay, apiRelay *Relay, err error) {
	proxyTarget, err := dialTarget(l.cfg.Daemon.ProxyAddr, l.log)
	if err != nil {
		return nil, nil, fmt.Errorf("relaying to the daemon's proxy: %w", err)
	}
	apiHost, err := apiHostPort(l.cfg.Daemon.APIURL)
	if err != nil {
		return nil, nil, err
	}
	apiTarget, err := dialTarget(apiHost, l.log)
	if err != nil {
		return nil, nil, fmt.Errorf("relaying to the daemon's API: %w", err)
	}
	proxyRelay, err = NewRelay(RelayConfig{Logger: l.log, Name: "proxy", Listen: proxyListen, Target: proxyTarget})
	if err != nil {
		return nil, nil, err
	}
	l.onExit("closing the proxy relay", func(context.Context) error { return proxyRelay.Close() })
	apiRelay, err = NewRelay(RelayConfig{Logger: l.log, Name: "api", Listen: apiListen, Target: apiTarget})
	if err != nil {
		return nil, nil, err
	}
	l.onExit("closing the API relay", func(context.Context) error { return apiRelay.Close() })
	return proxyRelay, apiRelay, nil
}

// removeNetwork removes the network, retrying while the runtime still
// detaches the container (--rm finishes asynchronously), bounded by ctx.
func (l *launch) removeNetwork(ctx context.Context, name string) error {
	delay := 100 * time.Millisecond
	for {
		err := l.rt.NetworkRemove(ctx, name)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (remove it with `%s network rm %s`)", err, l.rt.Kind(), name)
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

// warnUnrendered warns about session connectors that have no shims (an
// external daemon that loaded a connector the store no longer has).
func warnUnrendered(log *zap.Logger, sessionFQNs []string, rendered []policy.Connector) {
	have := map[string]bool{}
	for _, c := range rendered {
		have[c.Spec.Connector.FQN] = true
	}
	for _, f := range sessionFQNs {
		if !have[f] {
			log.Warn("the session includes a connector that is not active in the store; its tools have no shims", zap.String("connector", f))
		}
	}
}

// dialTarget turns a daemon listen address into one to dial: a wildcard
// address (which also exposes the daemon to every sandbox, through the
// gateway) is dialled on loopback.
func dialTarget(hostport string, log *zap.Logger) (string, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", fmt.Errorf("address %q is not host:port: %w (restart `aileron-proxy serve`)", hostport, err)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		log.Warn("the daemon listens on a wildcard address, which sandboxes can reach through their gateway; bind serve to 127.0.0.1 (--proxy-listen, --api-listen)", zap.String("addr", hostport))
		host = "127.0.0.1"
		if ip.To4() == nil {
			host = "::1"
		}
	}
	return net.JoinHostPort(host, port), nil
}
