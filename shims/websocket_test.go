package shims

import (
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/policy"
)

// TestHelpShowsWebSocket checks that help says when an operation may be
// opened as a WebSocket, and says nothing about it otherwise.
func TestHelpShowsWebSocket(t *testing.T) {
	op := policy.Operation{Name: "responses.socket", Method: "GET", Path: "/v1/responses", Hosts: []string{"api.openai.com"}, WebSocket: true}
	var b strings.Builder
	writeOperation(&b, &op, "  ")
	if !strings.Contains(b.String(), "  websocket: yes (") {
		t.Fatalf("help of a websocket operation:\n%s\nlacks the websocket line", b.String())
	}
	op.WebSocket = false
	b.Reset()
	writeOperation(&b, &op, "  ")
	if strings.Contains(b.String(), "websocket") {
		t.Fatalf("help of a plain operation mentions websocket:\n%s", b.String())
	}
}
