package launcher

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/actions"
	"github.com/aileron-dev/aileron-proxy/api"
	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
	"github.com/aileron-dev/aileron-proxy/launcher/guard"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// Sandbox states of api.SandboxInfo.State.
const (
	SandboxRunning = "running"
	SandboxRemoved = "removed"
)

// sandboxHelperArgs are the hidden subcommands the sandbox's container
// runs from the helper binary mounted at GuardBinaryPath.
var sandboxHelperArgs = []string{guard.BinaryPath, "internal", "sandbox"}

// sandboxShell is what a long-lived sandbox runs for its caller: exec
// calls run through /bin/sh (sandboxhelper.RunExec). The composition
// names it as the session's agent, and the image check confirms the image
// has it, as it confirms a launch's agent command.
const sandboxShell = "sh"

// SandboxInputs are what a sandbox is composed from, loaded afresh for
// each one (the connector store may have changed).
type SandboxInputs struct {
	// Connectors are the active installed connectors; StoreDir the store
	// directory; Actions the installed actions (see LaunchConfig).
	Connectors []policy.Connector
	StoreDir   string
	Actions    []actions.Installed
}

// SandboxManagerConfig configures NewSandboxManager; every field but Now
// is required.
type SandboxManagerConfig struct {
	Logger *zap.Logger
	// Sessions creates and ends the sandboxes' sessions.
	Sessions SessionClient
	// Daemon is where the relays forward to (the daemon's own listeners).
	Daemon DaemonEndpoints
	// Inputs loads the connectors and actions.
	Inputs func() (SandboxInputs, error)
	// Runtime returns the container runtime of a kind.
	Runtime func(ctx context.Context, kind runtime.Kind) (runtime.Runtime, error)
	// GuardBinary returns the static helper binary's host path
	// (GuardHelper).
	GuardBinary func() (string, error)
	// Now is the clock that dates removals (optional; nil means
	// time.Now).
	Now func() time.Time
	// Store keeps a record of each sandbox, so that a restarted daemon
	// finds it again (Recover); nil keeps none, and Close then removes
	// every sandbox, since nothing could find them again.
	Store SandboxStore
	// Replica names this daemon in the records; Recover takes up only
	// its own replica's sandboxes (the relays run on its host).
	Replica string
	// ShutdownSandboxes makes Close remove every sandbox, as a daemon
	// without a Store does; false leaves them running for the next start.
	ShutdownSandboxes bool
}

// SandboxManager owns the daemon's long-lived sandboxes: each has
// launch's composition (session, shims, CA, environment, image, egress
// guard, hardening) with a keep-alive process instead of the agent, and
// lives until RemoveSandbox, its TTL, a call that finds its container
// gone, or Close. It implements api.SandboxManager.
type SandboxManager struct {
	cfg SandboxManagerConfig
	log *zap.Logger

	mu sync.Mutex
	// boxes are the sandboxes not yet removed, by ID.
	boxes map[string]*sandbox
	// removed are the sandboxes removed within RemovedRetention, by ID:
	// their tokens keep getting 410, not 401 (see Sandbox).
	removed map[string]*sandbox
	closed  bool
}

// RemovedRetention is how long a removed sandbox is remembered: its calls
// answer api.ErrSandboxGone (410) for that long after its removal, then
// its ID is unknown. A removed sandbox keeps only its ID, token digest and
// info (teardown drops the rest), so this bounds memory by the removals
// of one day, never by a count that would forget recent ones.
const RemovedRetention = 24 * time.Hour

var _ api.SandboxManager = (*SandboxManager)(nil)

// NewSandboxManager checks cfg and returns an empty manager.
func NewSandboxManager(cfg SandboxManagerConfig) (*SandboxManager, error) {
	if cfg.Logger == nil || cfg.Sessions == nil || cfg.Inputs == nil || cfg.Runtime == nil || cfg.GuardBinary == nil ||
		cfg.Daemon.APIURL == "" || cfg.Daemon.ProxyAddr == "" {
		return nil, errors.New("creating the sandbox manager: SandboxManagerConfig needs Logger, Sessions, Daemon, Inputs, Runtime and GuardBinary")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &SandboxManager{cfg: cfg, log: cfg.Logger.Named("sandboxes"), boxes: map[string]*sandbox{}, removed: map[string]*sandbox{}}, nil
}

// sandbox is one long-lived sandbox.
type sandbox struct {
	m     *SandboxManager
	info  api.SandboxInfo
	token [sha256.Size]byte
	rt    runtime.Runtime
	// l holds the undo steps of the composition; teardown runs them.
	l *launch
	// relays are the proxy and API relays; detach closes them alone.
	relays []*Relay
	timer  *time.Timer
	// removedAt is when forget moved it to the removed ones (under the
	// manager's mu).
	removedAt time.Time

	mu   sync.Mutex
	gone bool
	// detached is set once Close left the sandbox running for the next
	// start: calls are refused from then on.
	detached bool
	// removed closes when teardown has finished.
	removed chan struct{}
	// calls are the in-flight calls' cancel functions, ended on teardown.
	calls map[int]context.CancelFunc
	next  int
}

// CreateSandbox composes and starts a sandbox (see SandboxManager).
func (m *SandboxManager) CreateSandbox(ctx context.Context, req api.CreateSandboxRequest) (*api.CreatedSandbox, error) {
	kind := runtime.Auto
	if req.Runtime != "" {
		k, err := runtime.ParseKind(req.Runtime)
		if err != nil {
			return nil, fmt.Errorf("sandbox runtime: %w", err)
		}
		kind = k
	}
	build := BuildAuto
	if req.Build != "" {
		b, err := ParseBuildPolicy(req.Build)
		if err != nil {
			return nil, fmt.Errorf("sandbox build: %w", err)
		}
		build = b
	}
	if _, err := api.ParseTTL(req.TTL); err != nil {
		return nil, err
	}
	// ${localEnv:...} resolves from the caller's environment (sent in the
	// request), never the daemon's.
	localEnv := func(name string) (string, bool) {
		v, ok := req.LocalEnv[name]
		return v, ok
	}
	plan, err := NewPlan(req.Project, PlanOptions{LocalEnv: localEnv})
	if err != nil {
		return nil, err
	}
	in, err := m.cfg.Inputs()
	if err != nil {
		return nil, err
	}
	rt, err := m.cfg.Runtime(ctx, kind)
	if err != nil {
		return nil, err
	}
	bin, err := m.cfg.GuardBinary()
	if err != nil {
		return nil, err
	}
	id, token, err := newSandboxID()
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return nil, errors.New("creating a sandbox: the daemon is shutting down")
	}
	log := m.log.With(zap.String("sandbox_id", id))
	cfg := LaunchConfig{
		Logger: log, Runtime: rt, Plan: plan, BuildPolicy: build, Sessions: m.cfg.Sessions, Daemon: m.cfg.Daemon,
		Connectors: in.Connectors, ConnectorFQNs: req.Connectors, StoreDir: in.StoreDir, Actions: in.Actions,
		Agent: []string{sandboxShell}, GuardBinary: bin, Stderr: &logWriter{log: log}, LocalEnv: localEnv, Learn: req.Learn,
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	sb := m.newSandbox(rt)
	sb.token = sha256.Sum256([]byte(token))
	l := &launch{cfg: cfg, rt: rt, log: log, ttl: req.TTL}
	c, err := l.compose(ctx)
	if err == nil {
		sb.info, err = startSandbox(ctx, l, c, id, bin)
	}
	if err == nil {
		sb.relays = c.relays
		err = m.record(ctx, sb, newSandboxSpec(sb.info, c))
	}
	if err != nil {
		l.cleanup(ctx)
		return nil, err
	}
	sb.l = l
	m.mu.Lock()
	closed = m.closed
	if !closed {
		m.boxes[id] = sb
	}
	m.mu.Unlock()
	if closed {
		// Close ran while this one was being composed.
		sb.teardown(ctx, false)
		return nil, errors.New("creating a sandbox: the daemon is shutting down")
	}
	m.expireAt(sb)
	log.Info("sandbox up", zap.String("session_id", sb.info.SessionID), zap.String("container", sb.info.Container))
	return &api.CreatedSandbox{
		ID: id, APIURL: strings.TrimSuffix(m.cfg.Daemon.APIURL, "/"), Token: token, Workdir: sb.info.Workdir,
		SessionID: sb.info.SessionID, Runtime: sb.info.Runtime, Image: sb.info.Image,
	}, nil
}

// LabelSandbox records, on a sandbox's container, its ID.
const LabelSandbox = "dev.aileron.sandbox"

// ListSandboxes lists the running sandboxes, oldest first.
func (m *SandboxManager) ListSandboxes() []api.SandboxInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []api.SandboxInfo
	for _, sb := range m.boxes {
		if i := sb.Info(); i.State == SandboxRunning {
			out = append(out, i)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// Sandbox returns the sandbox id, also one of the last
// removed within RemovedRetention (whose calls then answer api.ErrSandboxGone).
func (m *SandboxManager) Sandbox(id string) (api.Sandbox, bool) {
	if sb := m.find(id); sb != nil {
		return sb, true
	}
	return nil, false
}

// find returns the sandbox id, also a recently removed one; nil if none.
func (m *SandboxManager) find(id string) *sandbox {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sb, ok := m.boxes[id]; ok {
		return sb
	}
	return m.removed[id]
}

// RemoveSandbox tears sandbox id down: in-flight calls end (SANDBOX_GONE),
// then the container, the guard's holder, the network, the relays and the
// files are removed and the session is ended. Removing a recently removed
// sandbox again waits for that removal to finish.
func (m *SandboxManager) RemoveSandbox(ctx context.Context, id string) error {
	sb := m.find(id)
	if sb == nil {
		return api.ErrSandboxNotFound
	}
	sb.teardown(ctx, false)
	return nil
}

// expireAt arms sb's TTL: the sandbox lives as long as its session
// (--ttl, else the default). One whose TTL ended while it was being
// composed is removed at once.
func (m *SandboxManager) expireAt(sb *sandbox) {
	id := sb.info.ID
	if sb.info.ExpiresAt.IsZero() {
		return
	}
	life := max(sb.info.ExpiresAt.Sub(m.cfg.Now()), 0)
	timer := time.AfterFunc(life, func() {
		m.log.Info("the sandbox's TTL is over; removing it", zap.String("sandbox_id", id))
		_ = m.RemoveSandbox(context.Background(), id)
	})
	sb.mu.Lock()
	sb.timer = timer
	sb.mu.Unlock()
}

// newSandbox returns an empty sandbox on rt; CreateSandbox fills it in.
func (m *SandboxManager) newSandbox(rt runtime.Runtime) *sandbox {
	return &sandbox{m: m, rt: rt, calls: map[int]context.CancelFunc{}, removed: make(chan struct{})}
}

// forget moves sb from boxes to the removed ones, dating its removal, and
// drops the removed ones older than RemovedRetention; a sandbox never
// added is left out.
func (m *SandboxManager) forget(sb *sandbox) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.boxes[sb.info.ID] != sb {
		return
	}
	delete(m.boxes, sb.info.ID)
	now := m.cfg.Now()
	sb.removedAt = now
	m.keepRemoved(sb, now)
}

// keepRemoved adds sb to the removed ones and drops those removed more
// than RemovedRetention before now; m.mu is held.
func (m *SandboxManager) keepRemoved(sb *sandbox, now time.Time) {
	m.removed[sb.info.ID] = sb
	for id, old := range m.removed {
		if now.Sub(old.removedAt) > RemovedRetention {
			delete(m.removed, id)
			m.log.Debug("forgetting a removed sandbox", zap.String("sandbox_id", id), zap.Time("removed_at", old.removedAt))
		}
	}
}

// Close refuses new sandboxes and calls; the daemon calls it on
// shutdown. With a Store (and without ShutdownSandboxes) it leaves the
// sandboxes running for the next start, closing only their relays (an
// agent's connection through one is reset); otherwise it removes them.
// Removals under way (a TTL, a dead container) finish first.
func (m *SandboxManager) Close(ctx context.Context) {
	if m.cfg.Store != nil && !m.cfg.ShutdownSandboxes {
		m.detachAll(ctx)
		return
	}
	m.mu.Lock()
	m.closed = true
	boxes := make([]*sandbox, 0, len(m.boxes)+len(m.removed))
	for _, sb := range m.boxes {
		boxes = append(boxes, sb)
	}
	for _, sb := range m.removed {
		boxes = append(boxes, sb)
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, sb := range boxes {
		wg.Add(1)
		go func() { defer wg.Done(); sb.teardown(ctx, false) }()
	}
	wg.Wait()
}

// teardown marks the sandbox gone, moves it to the manager's removed
// ones, ends its calls and removes what its composition created, then
// its record: deleted after a removal, marked gone when its container was
// found gone (lost, so its token keeps getting 410 after a restart). A
// second call waits for the first to finish (or ctx to end).
func (sb *sandbox) teardown(ctx context.Context, lost bool) {
	sb.mu.Lock()
	if sb.gone {
		sb.mu.Unlock()
		select {
		case <-sb.removed:
		case <-ctx.Done():
		}
		return
	}
	sb.gone = true
	sb.info.State = SandboxRemoved
	for _, cancel := range sb.calls {
		cancel()
	}
	timer := sb.timer
	sb.mu.Unlock()
	sb.m.forget(sb)
	if timer != nil {
		timer.Stop()
	}
	sb.l.cleanup(ctx)
	sb.m.unrecord(ctx, sb.info.ID, lost)
	sb.m.log.Info("sandbox removed", zap.String("sandbox_id", sb.info.ID))
	// What is kept of a removed sandbox answers 410; the rest can go.
	sb.mu.Lock()
	sb.l = nil
	sb.mu.Unlock()
	close(sb.removed)
}

// Info describes the sandbox.
func (sb *sandbox) Info() api.SandboxInfo {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.info
}

// CheckToken reports whether tok is the sandbox's control token.
func (sb *sandbox) CheckToken(tok string) bool {
	d := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(d[:], sb.token[:]) == 1
}

// begin registers an in-flight call: its context ends with ctx or on
// teardown. It fails with api.ErrSandboxGone once the sandbox is gone.
func (sb *sandbox) begin(ctx context.Context) (context.Context, func(), error) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.gone {
		return nil, nil, api.ErrSandboxGone
	}
	if sb.detached {
		return nil, nil, errShuttingDown
	}
	cctx, cancel := context.WithCancel(ctx)
	n := sb.next
	sb.next++
	sb.calls[n] = cancel
	return cctx, func() {
		sb.mu.Lock()
		delete(sb.calls, n)
		sb.mu.Unlock()
		cancel()
	}, nil
}

// failed turns a helper run that produced no status into
// api.ErrSandboxGone when the sandbox was removed or its container is gone
// or stopped (then the sandbox is removed, in the background), else an
// error with what the runtime said.
func (sb *sandbox) failed(err error, stderr string) error {
	sb.mu.Lock()
	gone := sb.gone
	sb.mu.Unlock()
	if gone {
		return api.ErrSandboxGone
	}
	if runtime.ContainerStateOf(stderr).IsUnusable() {
		sb.m.log.Warn("the sandbox's container is gone or stopped; removing the sandbox", zap.String("sandbox_id", sb.info.ID))
		go sb.teardown(context.Background(), true)
		return api.ErrSandboxGone
	}
	if err == nil {
		err = errors.New("the helper printed no result")
	}
	return fmt.Errorf("running the sandbox helper in %s: %w: %s", sb.info.Container, err, runtime.LastLines(stderr, 3))
}

// newSandboxID returns a sandbox ID and a control token.
func newSandboxID() (id, token string, err error) {
	b := make([]byte, 8+32)
	if _, err := rand.Read(b); err != nil {
		return "", "", fmt.Errorf("creating a sandbox ID: %w", err)
	}
	return "sbx_" + hex.EncodeToString(b[:8]), "aps_" + hex.EncodeToString(b[8:]), nil
}

// logWriter writes build and runtime output to the daemon log, line by
// line, at debug level.
type logWriter struct {
	log *zap.Logger
}

func (w *logWriter) Write(p []byte) (int, error) {
	if ce := w.log.Check(zap.DebugLevel, "sandbox output"); ce != nil {
		ce.Write(zap.String("output", strings.TrimRight(string(p), "\n")))
	}
	return len(p), nil
}

// startSandbox is sandbox up's ending: the composed container starts
// detached, running the helper's keep-alive (`internal sandbox hold`,
// from the helper binary bin mounted read-only) instead of an agent, then
// the devcontainer's lifecycle commands run once in it. It returns the
// sandbox's description; what it started is undone by l's cleanup.
func startSandbox(ctx context.Context, l *launch, c *composed, id, bin string) (api.SandboxInfo, error) {
	rt, log, run := l.rt, l.log, c.run
	run.Entrypoint = sandboxHelperArgs[0]
	run.Cmd = append(slices.Clone(sandboxHelperArgs[1:]), "hold")
	run.Mounts = append(slices.Clone(run.Mounts), runtime.Mount{Source: bin, Target: guard.BinaryPath, ReadOnly: true})
	run.Detach, run.Interactive, run.TTY = true, false, false
	run.Stdin, run.Stdout, run.Stderr = nil, io.Discard, &logWriter{log: log}
	run.Labels = map[string]string{LabelManaged: "true", LabelSession: c.sess.ID, LabelSandbox: id}
	l.onExit("removing container "+run.Name, func(ctx context.Context) error { return rt.ContainerRemove(ctx, run.Name) })
	code, err := rt.Run(ctx, run)
	if err == nil && code != 0 {
		err = fmt.Errorf("%s run exited %d (see the daemon log)", rt.Kind(), code)
	}
	if err != nil {
		return api.SandboxInfo{}, fmt.Errorf("starting the sandbox container: %w", err)
	}
	if err := runLifecycleOnce(ctx, rt, run, c.lifecycle, log); err != nil {
		return api.SandboxInfo{}, err
	}
	return api.SandboxInfo{
		ID: id, Workdir: run.Workdir, State: SandboxRunning, SessionID: c.sess.ID, Runtime: rt.Kind().String(),
		Image: c.user.Image, Project: c.plan.ProjectDir, Container: run.Name, User: c.user.User, CreatedAt: time.Now().UTC(), ExpiresAt: c.sess.ExpiresAt,
	}, nil
}

// runLifecycleOnce runs a long-lived sandbox's devcontainer lifecycle
// commands (create-time and start-time) once, in its running container,
// as its user, under its egress guard: what a one-shot launch runs before
// the agent. The script goes on stdin, not argv (substituted ${localEnv}
// values may be private); its output goes to the daemon log. A failure
// names the exit status, and the caller removes the sandbox.
func runLifecycleOnce(ctx context.Context, rt runtime.Runtime, run runtime.RunRequest, steps []devcontainer.LifecycleStep, log *zap.Logger) error {
	if len(steps) == 0 {
		return nil
	}
	tail := runtime.NewTailBuffer(4096)
	out := io.MultiWriter(&logWriter{log: log}, tail)
	code, err := rt.Exec(ctx, runtime.ExecRequest{
		Container: run.Name, User: run.User, Workdir: run.Workdir,
		Cmd:   []string{"/bin/sh", "-s", "true"},
		Stdin: strings.NewReader(devcontainer.LifecycleScript(steps, true)), Stdout: out, Stderr: out,
	})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit status %d: %s", code, runtime.LastLines(tail.String(), 3))
	}
	if err != nil {
		return fmt.Errorf("running the devcontainer's lifecycle commands (%s) in the sandbox: %w; fix them or remove them from the file", devcontainer.Path, err)
	}
	return nil
}
