package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// nodeWebSocket returns node and the flags under which it has the built-in
// WebSocket (global from Node 22, behind --experimental-websocket from 20.10).
func nodeWebSocket(t *testing.T) (string, []string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("node is required when CI=true")
		}
		t.Skip("node not installed")
	}
	for _, flags := range [][]string{nil, {"--experimental-websocket"}} {
		out, err := exec.Command(node, append(flags, "-e", "process.stdout.write(typeof WebSocket)")...).Output()
		if err == nil && string(out) == "function" {
			return node, flags
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("this node has no built-in WebSocket (Node 20.10 or later is required when CI=true)")
	}
	t.Skip("this node has no built-in WebSocket")
	return "", nil
}

// TestWebSocketNode runs Node's built-in WebSocket client (undici) through
// the proxy: it offers permessage-deflate, which the proxy negotiates away;
// echoes pass; the upstream's fragmented echo of the credential arrives
// masked; a handshake to an undeclared operation is refused.
func TestWebSocketNode(t *testing.T) {
	node, flags := nodeWebSocket(t)
	e, u := newWSEnv(t)
	run := func(path string, messages ...string) []map[string]any {
		t.Helper()
		msgs, _ := json.Marshal(messages)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, append(flags, "testdata/ws-node-client.js")...)
		cmd.Env = append(curlEnv(), "PROXY_ADDR="+e.addr, "PROXY_USER="+e.sess.ID+":"+e.secret, "CA_FILE="+e.caFile,
			"WS_URL=wss://"+wsHost+path, "MESSAGES="+string(msgs))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("node: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
		}
		var events []map[string]any
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		for sc.Scan() {
			var ev map[string]any
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatalf("node printed %q: %v", sc.Text(), err)
			}
			events = append(events, ev)
		}
		return events
	}

	events := run("/ws", "hello from node", "auth", "split:node "+testToken+" end")
	var got []string
	for _, ev := range events {
		b, _ := json.Marshal(ev)
		got = append(got, string(b))
	}
	masked := strings.Repeat("*", len("Bearer "+testToken))
	want := []string{
		`{"extensions":[],"handshake":101}`, `{"open":true}`,
		`{"message":"hello from node"}`, `{"message":"` + masked + `"}`,
		`{"message":"node ` + strings.Repeat("*", len(testToken)) + ` end"}`, `{"close":1000}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("node client events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if a := <-u.auth; a != "Bearer "+testToken {
		t.Fatalf("upstream Authorization = %q", a)
	}
	if h := <-u.header; h.Get("Sec-Websocket-Extensions") != "" {
		t.Fatalf("upstream was offered %q; the proxy must drop permessage-deflate", h.Get("Sec-Websocket-Extensions"))
	}

	events = run("/plain")
	if len(events) == 0 || events[0]["handshake"] != float64(403) {
		t.Fatalf("node handshake to /plain: %v; want 403", events)
	}
}
