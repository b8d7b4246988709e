package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// These tests drive the real `aileron-proxy mcp` (stdio) against a real
// `aileron-proxy serve`, with the SDK's own client and a raw line client.

func (e *env) mcpCommand(ctx context.Context) *exec.Cmd {
	cmd := exec.CommandContext(ctx, binPath, "mcp")
	cmd.Env = testkit.CleanEnv(
		"AILERON_API_URL="+e.d.APIURL+"/v1",
		"AILERON_TOKEN="+e.s.APIToken,
		"AILERON_SESSION_ID="+e.s.ID,
	)
	return cmd
}

// tee records every byte read from r.
type tee struct {
	io.ReadCloser
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (t tee) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	t.mu.Lock()
	t.buf.Write(p[:n])
	t.mu.Unlock()
	return n, err
}

type teeW struct {
	io.WriteCloser
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (t teeW) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.buf.Write(p)
	t.mu.Unlock()
	return t.WriteCloser.Write(p)
}

// pendingApproval waits for a pending approval and returns its id.
func pendingApproval(t *testing.T, home string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var list []map[string]any
		if json.Unmarshal([]byte(mustCLI(t, home, "", "approvals", "list", "--json")), &list) == nil {
			for _, p := range list {
				if p["state"] == "pending" {
					return fmt.Sprint(p["id"])
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("no pending approval appeared")
	return ""
}

func TestMCPStdioSDKClient(t *testing.T) {
	e := newEnv(t, "--approval-timeout", "60s")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := e.mcpCommand(ctx)
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	var mu sync.Mutex
	var seen bytes.Buffer
	cl := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	sess, err := cl.Connect(ctx, &mcp.IOTransport{Reader: tee{stdout, &mu, &seen}, Writer: teeW{stdin, &mu, &seen}}, nil)
	if err != nil {
		t.Fatalf("initialize over stdio: %v\n%s", err, stderr.String())
	}
	defer sess.Close()

	tools, err := sess.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	want := "testapi__download testapi__events testapi__items_create testapi__items_get testapi__items_list testapi__items_send testapi__token_echo"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("tools = %s\n want %s", got, want)
	}

	// Allowed: the upstream receives the injected credential.
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "testapi__items_list", Arguments: map[string]any{"q": "x"}})
	if err != nil || res.IsError || res.StructuredContent == nil {
		t.Fatalf("items.list = %v %+v", err, res)
	}
	if got := e.up.last(t); got.Header.Get("Authorization") != "Bearer "+canary {
		t.Errorf("upstream Authorization = %q, want the injected credential", got.Header.Get("Authorization"))
	}
	// A reflecting upstream: the answer is scrubbed.
	if _, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "testapi__token_echo"}); err != nil {
		t.Fatalf("token.echo: %v", err)
	}
	// Upstream 404: isError with the body.
	res, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: "testapi__items_get", Arguments: map[string]any{"id": "404"}})
	if err != nil || !res.IsError {
		t.Errorf("upstream 404 = %v %+v, want isError", err, res)
	}
	// Argument error: JSON-RPC invalid params naming the argument.
	_, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: "testapi__items_create", Arguments: map[string]any{"count": 2}})
	var we *jsonrpc.Error
	if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams || !strings.Contains(we.Message, `"name"`) {
		t.Errorf("missing argument = %v, want invalid params naming \"name\"", err)
	}

	type out struct {
		res *mcp.CallToolResult
		err error
	}
	held := func(ctx context.Context) <-chan out {
		ch := make(chan out, 1)
		go func() {
			r, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "testapi__items_send", Arguments: map[string]any{"to": "bob"}})
			ch <- out{r, err}
		}()
		return ch
	}
	before := len(e.up.requests())
	ch := held(ctx)
	mustCLI(t, e.home, "", "approvals", "approve", pendingApproval(t, e.home))
	if o := <-ch; o.err != nil || o.res.IsError {
		t.Fatalf("approved call = %v %+v", o.err, o.res)
	}
	if n := len(e.up.requests()); n != before+1 {
		t.Errorf("upstream got %d requests after approval, want 1", n-before)
	}

	ch = held(ctx)
	mustCLI(t, e.home, "", "approvals", "deny", pendingApproval(t, e.home))
	o := <-ch
	if o.err != nil || !o.res.IsError {
		t.Fatalf("denied call = %v %+v", o.err, o.res)
	}
	if txt := o.res.Content[0].(*mcp.TextContent).Text; !strings.Contains(txt, "Do not retry") {
		t.Errorf("denied text = %q, want it to tell the model not to retry", txt)
	}

	cctx, ccancel := context.WithCancel(ctx)
	ch = held(cctx)
	pendingApproval(t, e.home)
	ccancel()
	if o := <-ch; o.err == nil {
		t.Errorf("cancelled call = %+v, want an error", o.res)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var list []map[string]any
		_ = json.Unmarshal([]byte(mustCLI(t, e.home, "", "approvals", "list", "--json")), &list)
		if len(list) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled call's approval is still listed: %v", list)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := len(e.up.requests()); n != before+1 {
		t.Errorf("denied or cancelled calls reached the upstream (%d requests)", n-before-1)
	}

	mu.Lock()
	all := seen.String()
	mu.Unlock()
	if strings.Contains(all, canary) {
		t.Error("the canary appears in an MCP message")
	}
	if !strings.Contains(all, "testapi__token_echo") {
		t.Error("the recording holds no MCP traffic")
	}
}

// TestMCPStdioRawLines speaks the line format by hand: one JSON-RPC message
// per line, for each protocol version an agent may ask for.
func TestMCPStdioRawLines(t *testing.T) {
	e := newEnv(t)
	for _, version := range []string{"2025-06-18", "2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := e.mcpCommand(ctx)
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = stdin.Close(); _ = cmd.Wait() }()
			lines := bufio.NewScanner(stdout)
			lines.Buffer(nil, 1<<20)
			send := func(s string) { fmt.Fprintln(stdin, s) }
			recv := func() map[string]any {
				for lines.Scan() {
					var m map[string]any
					if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
						t.Fatalf("a stdout line is not one JSON message: %q", lines.Text())
					}
					if _, ok := m["id"]; ok {
						return m
					}
				}
				t.Fatalf("stdout ended: %v", lines.Err())
				return nil
			}
			send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + version + `","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
			init := recv()
			result, _ := init["result"].(map[string]any)
			got, _ := result["protocolVersion"].(string)
			if version != "2026-07-28" && got != version {
				t.Errorf("initialize %s = %v", version, init)
			}
			if got == "" {
				t.Fatalf("initialize %s answered %v", version, init)
			}
			send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
			list := recv()
			if !strings.Contains(fmt.Sprint(list["result"]), "testapi__items_list") {
				t.Errorf("tools/list = %v", list)
			}
			send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"testapi__items_get","arguments":{"id":"7"},"_meta":{"progressToken":5,"claudecode/toolUseId":"toolu_x"}}}`)
			call := recv()
			r, _ := call["result"].(map[string]any)
			if r == nil || r["isError"] == true || !strings.Contains(fmt.Sprint(r["structuredContent"]), "7") {
				t.Errorf("tools/call = %v", call)
			}
		})
	}
}
