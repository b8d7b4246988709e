package main

import (
	"fmt"
	"io"
	"os/exec"
	"sync"

	"github.com/aileron-dev/aileron-proxy/approval"
	"github.com/aileron-dev/aileron-proxy/launcher"
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
	surface launcher.ApprovalSurface
	// consoleURL is the console's Approvals page; set once the daemon
	// listens.
	consoleURL string
	// notifySend is the notify-send binary; empty means none.
	notifySend string
}

// held is the daemon's OnApprovalRequested hook.
func (n *approvalNotifier) held(p approval.Pending, consoleOpen bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if line := heldLine(n.surface, p, n.consoleURL, consoleOpen); line != "" {
		_, _ = io.WriteString(n.w, line)
	}
	if n.notifySend != "" && n.surface != launcher.ApprovalSurfaceCLI && !consoleOpen {
		cmd := exec.Command(n.notifySend, "--app-name=aileron-proxy", "aileron-proxy: approval needed",
			fmt.Sprintf("%s %s (%s)\naileron-proxy approvals approve %s", p.Tool, p.Operation, p.ConnectorFQN, p.ID))
		if cmd.Start() == nil {
			go func() { _ = cmd.Wait() }()
		}
	}
}

// heldLine is the terminal line for a held request, or "" when the
// surface or an open console makes it unnecessary.
func heldLine(surface launcher.ApprovalSurface, p approval.Pending, consoleURL string, consoleOpen bool) string {
	switch surface {
	case launcher.ApprovalSurfaceAPI:
		return ""
	case launcher.ApprovalSurfaceCLI:
		return fmt.Sprintf("aileron-proxy: %s %s is waiting for approval: run `aileron-proxy approvals approve %s` (or deny)\n",
			p.Tool, p.Operation, p.ID)
	}
	if consoleOpen {
		return ""
	}
	return fmt.Sprintf("aileron-proxy: %s %s is waiting for approval: open %s or run `aileron-proxy approvals approve %s` (or deny)\n",
		p.Tool, p.Operation, consoleURL, p.ID)
}
