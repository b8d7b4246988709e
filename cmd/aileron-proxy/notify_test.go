package main

import (
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/approval"
	"github.com/aileron-dev/aileron-proxy/launcher"
)

func TestHeldLine(t *testing.T) {
	p := approval.Pending{ID: "apr_1", Tool: "gh", Operation: "pr.merge"}
	const console = "http://127.0.0.1:7700/ui/approvals"
	for _, tc := range []struct {
		surface     launcher.ApprovalSurface
		consoleOpen bool
		want        []string // substrings; nil means no line
	}{
		{launcher.ApprovalSurfaceBoth, false, []string{"gh pr.merge", console, "aileron-proxy approvals approve apr_1"}},
		{launcher.ApprovalSurfaceBoth, true, nil},
		{launcher.ApprovalSurfaceCLI, true, []string{"aileron-proxy approvals approve apr_1"}},
		{launcher.ApprovalSurfaceAPI, false, nil},
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
		if tc.surface == launcher.ApprovalSurfaceCLI && strings.Contains(got, "http") {
			t.Errorf("the cli surface points at the console: %q", got)
		}
	}
}
