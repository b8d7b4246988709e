package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/api"
	"github.com/aileron-dev/aileron-proxy/approval"
	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
)

func TestHeldLine(t *testing.T) {
	p := approval.Pending{ID: "apr_1", Tool: "gh", Operation: "pr.merge"}
	const console = "http://127.0.0.1:7700/ui/approvals"
	for _, tc := range []struct {
		surface     devcontainer.ApprovalSurface
		consoleOpen bool
		want        []string // substrings; nil means no line
	}{
		{devcontainer.ApprovalSurfaceBoth, false, []string{"gh pr.merge", console, "aileron-proxy approvals approve apr_1"}},
		{devcontainer.ApprovalSurfaceBoth, true, nil},
		{devcontainer.ApprovalSurfaceCLI, true, []string{"aileron-proxy approvals approve apr_1"}},
		{devcontainer.ApprovalSurfaceAPI, false, nil},
	} {
		got := heldLine(tc.surface, p, console, tc.consoleOpen)
		if tc.want == nil {
			if got != "" {
				t.Errorf("heldLine(%s, open=%v) = %q, want none", tc.surface, tc.consoleOpen, got)
			}
			continue
		}
		if strings.Count(got, "\n") != 1 || !strings.HasSuffix(got, "\n") {
			t.Errorf("heldLine(%s, open=%v) = %q, want one line", tc.surface, tc.consoleOpen, got)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("heldLine(%s, open=%v) = %q, want %q in it", tc.surface, tc.consoleOpen, got, w)
			}
		}
		if tc.surface == devcontainer.ApprovalSurfaceCLI && strings.Contains(got, "http") {
			t.Errorf("the cli surface points at the console: %q", got)
		}
	}
}

// fakePending answers PendingApprovals from a fixed list.
type fakePending struct {
	list  []approval.Pending
	open  bool
	calls chan struct{}
}

func (f *fakePending) PendingApprovals(context.Context) (*api.ApprovalList, error) {
	select {
	case f.calls <- struct{}{}:
	default:
	}
	return &api.ApprovalList{Approvals: f.list, ConsoleOpen: f.open}, nil
}

// TestWatchTellsOncePerOwnRequest: a held request of the launch's session
// is told once, however often it is seen; other sessions' are not told.
func TestWatchTellsOncePerOwnRequest(t *testing.T) {
	for _, open := range []bool{false, true} {
		var out auditSyncBuffer // the package's goroutine-safe buffer
		n := &approvalNotifier{w: &out, surface: devcontainer.ApprovalSurfaceBoth, consoleURL: "http://127.0.0.1:1/ui/approvals"}
		src := &fakePending{list: []approval.Pending{
			{ID: "apr_mine", SessionID: "ses_me", Tool: "t", Operation: "o"},
			{ID: "apr_other", SessionID: "ses_other", Tool: "t", Operation: "o"},
		}, open: open, calls: make(chan struct{}, 1)}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { n.watch(ctx, src, func() string { return "ses_me" }, time.Millisecond); close(done) }()
		for range 5 {
			<-src.calls
		}
		cancel()
		<-done
		got := out.String()
		want := 1
		if open {
			want = 0
		}
		if strings.Count(got, "apr_mine") != want || strings.Contains(got, "apr_other") {
			t.Errorf("console open=%v: terminal got %q, want apr_mine told %d time(s) and apr_other never", open, got, want)
		}
	}
}
