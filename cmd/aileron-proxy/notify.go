package main

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aileron-dev/aileron-proxy/api"
	"github.com/aileron-dev/aileron-proxy/approval"
	"github.com/aileron-dev/aileron-proxy/launcher"
	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
)

// approvalNotifier tells the person at launch's terminal about a held
// request, where customizations.aileron.approval_surface says:
//   - "cli": always one line on the terminal, no console link and no
//     desktop notification;
//   - "api": nothing on the terminal (the console or the API decide); a
//     desktop notification while the console is not open;
//   - "both" (default): one terminal line with the console link and a
//     desktop notification, both only while the console is not open.
type approvalNotifier struct {
	mu sync.Mutex
	w  io.Writer
	// surface is the project's approval_surface.
	surface devcontainer.ApprovalSurface
	// consoleURL is the console's Approvals page.
	consoleURL string
	// notifySend is the notify-send binary; empty means none.
	notifySend string
}

// held tells about one held request.
func (n *approvalNotifier) held(p approval.Pending, consoleOpen bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if line := heldLine(n.surface, p, n.consoleURL, consoleOpen); line != "" {
		_, _ = io.WriteString(n.w, line)
	}
	if n.notifySend != "" && n.surface != devcontainer.ApprovalSurfaceCLI && !consoleOpen {
		cmd := exec.Command(n.notifySend, "--app-name=aileron-proxy", "aileron-proxy: approval needed",
			fmt.Sprintf("%s %s (%s)\naileron-proxy approvals approve %s", p.Tool, p.Operation, p.ConnectorFQN, p.ID))
		if cmd.Start() == nil {
			go func() { _ = cmd.Wait() }()
		}
	}
}

// heldLine is the terminal line for a held request, or "" when the
// surface or an open console makes it unnecessary.
func heldLine(surface devcontainer.ApprovalSurface, p approval.Pending, consoleURL string, consoleOpen bool) string {
	switch surface {
	case devcontainer.ApprovalSurfaceAPI:
		return ""
	case devcontainer.ApprovalSurfaceCLI:
		return fmt.Sprintf("aileron-proxy: %s %s is waiting for approval: run `aileron-proxy approvals approve %s` (or deny)\n",
			p.Tool, p.Operation, p.ID)
	}
	if consoleOpen {
		return ""
	}
	return fmt.Sprintf("aileron-proxy: %s %s is waiting for approval: open %s or run `aileron-proxy approvals approve %s` (or deny)\n",
		p.Tool, p.Operation, consoleURL, p.ID)
}

// approvalPollInterval is how often launch asks the daemon for held
// requests of its session.
const approvalPollInterval = time.Second

// pendingSource lists held requests; *api.Client implements it.
type pendingSource interface {
	PendingApprovals(ctx context.Context) (*api.ApprovalList, error)
}

// watch tells about each held request of the session sessionID names (once
// it is known) once, until ctx ends. A daemon that does not answer is
// skipped silently: launch reports a daemon that went away elsewhere.
func (n *approvalNotifier) watch(ctx context.Context, src pendingSource, sessionID func() string, every time.Duration) {
	seen := map[string]bool{}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		id := sessionID()
		if id == "" {
			continue
		}
		list, err := src.PendingApprovals(ctx)
		if err != nil {
			continue
		}
		for _, p := range list.Approvals {
			if p.SessionID == id && !seen[p.ID] {
				seen[p.ID] = true
				n.held(p, list.ConsoleOpen)
			}
		}
	}
}

// sessionRecorder is the launcher's session client that remembers the ID
// of the session it created.
type sessionRecorder struct {
	launcher.SessionClient
	id atomic.Pointer[string]
}

// CreateSession creates the session and records its ID.
func (r *sessionRecorder) CreateSession(ctx context.Context, req api.CreateSessionRequest) (*api.CreatedSession, error) {
	s, err := r.SessionClient.CreateSession(ctx, req)
	if err == nil {
		r.id.Store(&s.ID)
	}
	return s, err
}

// ID is the created session's ID; empty before.
func (r *sessionRecorder) ID() string {
	if p := r.id.Load(); p != nil {
		return *p
	}
	return ""
}
