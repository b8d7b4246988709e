package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/api"
	"github.com/aileron-dev/aileron-proxy/launcher/guard"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"github.com/aileron-dev/aileron-proxy/state"
)

// A long-lived sandbox outlives the daemon that made it: its record in
// the state store (the sandbox's ID, session, token digest and a
// sandboxSpec) lets the next start of the daemon find its containers by
// name and label, re-check its egress guard, open its relays again on the
// same gateway addresses and serve its exec/files calls with the same
// token (Recover).

// SandboxStore is the part of the state store the manager keeps its
// sandboxes' records in; state.Store implements it.
type SandboxStore interface {
	PutSandbox(ctx context.Context, s state.Sandbox) error
	MarkSandboxGone(ctx context.Context, id string, at time.Time) error
	DeleteSandbox(ctx context.Context, id string) error
	Sandboxes(ctx context.Context) ([]state.Sandbox, error)
}

var _ SandboxStore = (state.Store)(nil)

// sandboxSpecVersion is the version of sandboxSpec this build writes and
// reads; a record of a newer version is left alone.
const sandboxSpecVersion = 1

// sandboxSpec is what the daemon needs to find a sandbox again: the
// record's Spec (JSON). It holds no secret: the session's credentials
// live in the container's environment and the session store, the
// sandbox's token only as the record's digest.
type sandboxSpec struct {
	Version int `json:"version"`
	// Runtime is "docker" or "podman".
	Runtime string `json:"runtime"`
	// Container is the sandbox container's name (labelled LabelSandbox
	// with the sandbox's ID); Holder the egress guard's holder container,
	// whose network namespace the sandbox shares.
	Container string `json:"container"`
	Holder    string `json:"holder"`
	// Network is the internal network; Gateway its gateway address, on
	// which the relays listen.
	Network string `json:"network"`
	Subnet  string `json:"subnet,omitempty"`
	Gateway string `json:"gateway"`
	// ProxyRelay and APIRelay are the relays' gateway ip:port: the
	// sandbox's environment names them and its guard admits only them.
	ProxyRelay string `json:"proxy_relay"`
	APIRelay   string `json:"api_relay"`
	// FilesDir is the host directory of the mounted files (shims, CA),
	// removed with the sandbox.
	FilesDir string `json:"files_dir,omitempty"`
	// Labels are the containers' and network's labels.
	Labels map[string]string `json:"labels,omitempty"`
	// What exec/files and listings need: the image, project, user and
	// working directory.
	Image   string `json:"image,omitempty"`
	Project string `json:"project,omitempty"`
	User    string `json:"user,omitempty"`
	Workdir string `json:"workdir"`
}

// newSandboxSpec describes a sandbox just started from c.
func newSandboxSpec(info api.SandboxInfo, c *composed) sandboxSpec {
	spec := sandboxSpec{
		Version: sandboxSpecVersion, Runtime: info.Runtime, Container: info.Container, Holder: c.guard.Container,
		Network: c.network.Name, Subnet: c.network.Subnet, Gateway: c.network.Gateway,
		FilesDir: c.filesDir, Labels: c.run.Labels,
		Image: info.Image, Project: info.Project, User: info.User, Workdir: info.Workdir,
	}
	if len(c.relays) == 2 {
		spec.ProxyRelay, spec.APIRelay = c.relays[0].Addr(), c.relays[1].Addr()
	}
	return spec
}

// parseSandboxSpec reads a record's Spec.
func parseSandboxSpec(raw []byte) (sandboxSpec, error) {
	var spec sandboxSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return spec, fmt.Errorf("reading the sandbox record: %w", err)
	}
	if spec.Version > sandboxSpecVersion {
		return spec, fmt.Errorf("the sandbox record has version %d, newer than this build's %d (run the newer aileron-proxy)", spec.Version, sandboxSpecVersion)
	}
	if spec.Version < 1 || spec.Container == "" || spec.Holder == "" || spec.Network == "" {
		return spec, errors.New("the sandbox record names no container, holder or network")
	}
	if _, err := runtime.ParseKind(spec.Runtime); err != nil || spec.Runtime == string(runtime.Auto) {
		return spec, fmt.Errorf("the sandbox record's runtime %q is not docker or podman", spec.Runtime)
	}
	if _, err := spec.allow(); err != nil {
		return spec, err
	}
	return spec, nil
}

// allow returns the relays' endpoints, which the guard admits.
func (s sandboxSpec) allow() ([]netip.AddrPort, error) {
	out := make([]netip.AddrPort, 0, 2)
	for _, a := range []string{s.ProxyRelay, s.APIRelay} {
		ap, err := netip.ParseAddrPort(a)
		if err != nil {
			return nil, fmt.Errorf("the sandbox record's relay address %q is not ip:port", a)
		}
		out = append(out, ap)
	}
	return out, nil
}

// info is the sandbox's description from its record.
func (s sandboxSpec) info(rec state.Sandbox) api.SandboxInfo {
	return api.SandboxInfo{
		ID: rec.ID, Workdir: s.Workdir, State: SandboxRunning, SessionID: rec.SessionID, Runtime: s.Runtime,
		Image: s.Image, Project: s.Project, Container: s.Container, User: s.User,
		CreatedAt: rec.CreatedAt.UTC(), ExpiresAt: rec.ExpiresAt,
	}
}

// record writes sb's record; without a Store it does nothing.
func (m *SandboxManager) record(ctx context.Context, sb *sandbox, spec sandboxSpec) error {
	if m.cfg.Store == nil {
		return nil
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("recording the sandbox: %w", err)
	}
	err = m.cfg.Store.PutSandbox(ctx, state.Sandbox{
		ID: sb.info.ID, SessionID: sb.info.SessionID, TokenDigest: sb.token, Replica: m.cfg.Replica,
		Spec: raw, CreatedAt: sb.info.CreatedAt, ExpiresAt: sb.info.ExpiresAt,
	})
	if err != nil {
		return fmt.Errorf("recording the sandbox in the state store: %w", err)
	}
	return nil
}

// unrecord deletes a removed sandbox's record, or marks it gone when the
// sandbox was lost (its container gone); errors are logged.
func (m *SandboxManager) unrecord(ctx context.Context, id string, lost bool) {
	if m.cfg.Store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultCleanupTimeout)
	defer cancel()
	var err error
	if lost {
		err = m.cfg.Store.MarkSandboxGone(ctx, id, m.cfg.Now())
	} else {
		err = m.cfg.Store.DeleteSandbox(ctx, id)
	}
	if err != nil && !errors.Is(err, state.ErrNotFound) {
		m.log.Warn("updating the sandbox's record failed", zap.String("sandbox_id", id), zap.Bool("lost", lost), zap.Error(err))
	}
}

// errShuttingDown refuses calls to a sandbox Close left running.
var errShuttingDown = errors.New("the daemon is shutting down; the sandbox stays up and answers again once `aileron-proxy serve` has started")

// detachAll is Close that leaves the sandboxes running: their calls end
// and are refused, their TTL timers stop, their relays close. Removals
// under way finish first.
func (m *SandboxManager) detachAll(ctx context.Context) {
	m.mu.Lock()
	m.closed = true
	var live, removed []*sandbox
	for _, sb := range m.boxes {
		live = append(live, sb)
	}
	for _, sb := range m.removed {
		removed = append(removed, sb)
	}
	m.mu.Unlock()
	for _, sb := range removed {
		sb.teardown(ctx, false) // waits for a removal under way
	}
	for _, sb := range live {
		sb.detach()
	}
	m.log.Info("sandboxes left running for the next start", zap.Int("sandboxes", len(live)))
}

// detach ends sb's calls and closes its relays, leaving its containers,
// network and record for the next start.
func (sb *sandbox) detach() {
	sb.mu.Lock()
	if sb.gone || sb.detached {
		sb.mu.Unlock()
		return
	}
	sb.detached = true
	for _, cancel := range sb.calls {
		cancel()
	}
	timer, relays := sb.timer, sb.relays
	sb.mu.Unlock()
	if timer != nil {
		timer.Stop()
	}
	for _, r := range relays {
		if err := r.Close(); err != nil {
			sb.m.log.Warn("closing a sandbox relay failed", zap.String("sandbox_id", sb.info.ID), zap.Error(err))
		}
	}
}

// recovery is what Recover does with one record.
type recovery int

const (
	// recoverSkip leaves the record alone (another replica's, unreadable,
	// or its runtime does not answer now).
	recoverSkip recovery = iota
	// recoverForget deletes the record of a sandbox lost longer ago than
	// RemovedRetention.
	recoverForget
	// recoverGoneKnown keeps a lost sandbox known, so its token gets 410.
	recoverGoneKnown
	// recoverExpire removes a sandbox whose TTL ended while the daemon
	// was down.
	recoverExpire
	// recoverLost removes what is left of a sandbox whose container is
	// gone or stopped, and marks its record gone.
	recoverLost
	// recoverResume takes the sandbox up again.
	recoverResume
)

func (r recovery) String() string {
	return [...]string{"skip", "forget", "gone", "expire", "lost", "resume"}[r]
}

// decideRecovery is the pure part of Recover: what to do with rec, given
// the containers of its runtime by name (nil: the runtime could not be
// listed) and now.
func decideRecovery(rec state.Sandbox, spec sandboxSpec, containers map[string]runtime.Container, now time.Time) (recovery, string) {
	if rec.GoneAt != nil {
		if now.Sub(*rec.GoneAt) > RemovedRetention {
			return recoverForget, "lost longer ago than the removed-sandbox retention"
		}
		return recoverGoneKnown, "lost before this start"
	}
	if containers == nil {
		return recoverSkip, "the runtime could not be listed"
	}
	c, ok := containers[spec.Container]
	switch {
	case !ok:
		return recoverLost, "its container is gone"
	case c.Labels[LabelSandbox] != rec.ID:
		// The name was taken by another container: ours is gone.
		return recoverLost, "its container name belongs to another container"
	case !c.IsRunning():
		return recoverLost, "its container is " + c.Status
	}
	if !rec.ExpiresAt.IsZero() && !now.Before(rec.ExpiresAt) {
		return recoverExpire, "its TTL ended while the daemon was down"
	}
	h, ok := containers[spec.Holder]
	switch {
	case !ok:
		return recoverLost, "its guard's holder container is gone"
	case h.Labels[LabelSession] != rec.SessionID:
		return recoverLost, "its holder's name belongs to another container"
	case !h.IsRunning():
		return recoverLost, "its guard's holder container is " + h.Status
	}
	return recoverResume, "its containers run"
}

// Recover finds this replica's sandboxes again after a start: each
// record in the Store is matched with the runtime's containers (by name
// and label) and then its sandbox is taken up again (guard re-checked,
// relays open on the recorded addresses, calls served with the same
// token), or removed because its TTL ended, or marked gone because its
// container (or the guard's holder) is gone or stopped, or because its
// guard or relays could not be restored (fail closed). Gone sandboxes
// answer 410 for RemovedRetention. The daemon calls it once, after the
// sessions are restored; without a Store it does nothing.
func (m *SandboxManager) Recover(ctx context.Context) error {
	if m.cfg.Store == nil {
		return nil
	}
	recs, err := m.cfg.Store.Sandboxes(ctx)
	if err != nil {
		return fmt.Errorf("reading the long-lived sandboxes from the state store: %w", err)
	}
	now := m.cfg.Now()
	type listing struct {
		rt         runtime.Runtime
		containers map[string]runtime.Container
	}
	listings := map[string]*listing{}
	list := func(kind string) *listing {
		if l, ok := listings[kind]; ok {
			return l
		}
		l := &listing{}
		listings[kind] = l
		rt, err := m.cfg.Runtime(ctx, runtime.Kind(kind))
		if err != nil {
			m.log.Error("the runtime of recorded sandboxes does not answer; they stay recorded, untouched, until a later start", zap.String("runtime", kind), zap.Error(err))
			return l
		}
		cs, err := rt.Containers(ctx, LabelManaged)
		if err != nil {
			m.log.Error("listing the runtime's containers failed; its recorded sandboxes stay untouched until a later start", zap.String("runtime", kind), zap.Error(err))
			return l
		}
		l.rt, l.containers = rt, map[string]runtime.Container{}
		for _, c := range cs {
			l.containers[c.Name] = c
		}
		return l
	}
	var wg sync.WaitGroup
	resumed := 0
	for _, rec := range recs {
		if rec.Replica != m.cfg.Replica {
			continue
		}
		log := m.log.With(zap.String("sandbox_id", rec.ID), zap.String("session_id", rec.SessionID))
		spec, err := parseSandboxSpec(rec.Spec)
		if err != nil {
			log.Error("leaving a sandbox record this build cannot read", zap.Error(err))
			continue
		}
		var l *listing
		var containers map[string]runtime.Container
		if rec.GoneAt == nil {
			l = list(spec.Runtime)
			containers = l.containers
		}
		what, why := decideRecovery(rec, spec, containers, now)
		log.Info("recovering a sandbox", zap.Stringer("action", what), zap.String("reason", why))
		switch what {
		case recoverSkip:
		case recoverForget:
			if err := m.cfg.Store.DeleteSandbox(ctx, rec.ID); err != nil && !errors.Is(err, state.ErrNotFound) {
				log.Warn("deleting the record of a long-gone sandbox failed", zap.Error(err))
			}
		case recoverGoneKnown:
			m.addGone(rec, spec)
		case recoverExpire, recoverLost:
			sb := m.adopt(rec, spec, l.rt, log)
			wg.Add(1)
			go func() { defer wg.Done(); sb.teardown(context.WithoutCancel(ctx), what == recoverLost) }()
		case recoverResume:
			sb := m.adopt(rec, spec, l.rt, log)
			if err := m.resume(ctx, sb, spec); err != nil {
				log.Error("the sandbox could not be taken up again; removing it (it answers 410 SANDBOX_GONE)", zap.Error(err))
				wg.Add(1)
				go func() { defer wg.Done(); sb.teardown(context.WithoutCancel(ctx), true) }()
				continue
			}
			resumed++
			log.Info("sandbox up again", zap.String("container", spec.Container), zap.String("proxy_relay", spec.ProxyRelay), zap.String("api_relay", spec.APIRelay))
		}
	}
	wg.Wait()
	m.log.Info("sandboxes recovered", zap.Int("records", len(recs)), zap.Int("resumed", resumed))
	return nil
}

// adopt registers a recorded sandbox among the live ones, with undo
// steps that remove what its composition created, in its order (session,
// files, network, relays, holder, container), so teardown removes it as
// it would have before the restart. Its relays are not open yet.
func (m *SandboxManager) adopt(rec state.Sandbox, spec sandboxSpec, rt runtime.Runtime, log *zap.Logger) *sandbox {
	sb := m.newSandbox(rt)
	sb.info = spec.info(rec)
	sb.token = rec.TokenDigest
	l := &launch{cfg: LaunchConfig{Sessions: m.cfg.Sessions, Daemon: m.cfg.Daemon, CleanupTimeout: DefaultCleanupTimeout}, rt: rt, log: log}
	sess := rec.SessionID
	l.onExit("ending session "+sess, func(ctx context.Context) error { return m.cfg.Sessions.EndSession(ctx, sess) })
	if dir := spec.FilesDir; dir != "" {
		l.onExit("removing "+dir, func(context.Context) error { return os.RemoveAll(dir) })
	}
	l.onExit("removing network "+spec.Network, func(ctx context.Context) error { return l.removeNetwork(ctx, spec.Network) })
	l.onExit("removing the guard's holder "+spec.Holder, func(ctx context.Context) error { return rt.ContainerRemove(ctx, spec.Holder) })
	l.onExit("removing container "+spec.Container, func(ctx context.Context) error { return rt.ContainerRemove(ctx, spec.Container) })
	sb.l = l
	m.mu.Lock()
	m.boxes[rec.ID] = sb
	m.mu.Unlock()
	return sb
}

// resume takes an adopted sandbox up again: its egress guard is
// re-checked (and installed again if the namespace no longer holds
// exactly it), its relays listen again on the recorded gateway addresses,
// its TTL is armed.
func (m *SandboxManager) resume(ctx context.Context, sb *sandbox, spec sandboxSpec) error {
	allow, err := spec.allow()
	if err != nil {
		return err
	}
	reapplied, err := guard.Verify(ctx, sb.rt, spec.Holder, allow)
	if err != nil {
		return err
	}
	if reapplied {
		sb.l.log.Warn("the sandbox's egress guard had changed; it was installed again", zap.String("holder", spec.Holder))
	}
	// The relays close with the sandbox: a step after the containers'
	// removal in the undo order does not matter for them.
	proxyRelay, apiRelay, err := sb.l.startRelays(spec.ProxyRelay, spec.APIRelay)
	if err != nil {
		return fmt.Errorf("opening the sandbox's relays again on %s and %s: %w", spec.ProxyRelay, spec.APIRelay, err)
	}
	sb.mu.Lock()
	sb.relays = []*Relay{proxyRelay, apiRelay}
	sb.mu.Unlock()
	m.expireAt(sb)
	return nil
}

// addGone keeps a sandbox lost before this start known, so its token
// gets 410 SANDBOX_GONE until RemovedRetention after its loss.
func (m *SandboxManager) addGone(rec state.Sandbox, spec sandboxSpec) {
	sb := m.newSandbox(nil)
	sb.info = spec.info(rec)
	sb.info.State = SandboxRemoved
	sb.token = rec.TokenDigest
	sb.gone = true
	sb.removedAt = *rec.GoneAt
	close(sb.removed)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keepRemoved(sb, m.cfg.Now())
}
