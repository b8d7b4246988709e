package proxy

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/policy"
)

const mcpHost = "mcp.example.test"

// mcpSpec declares a Streamable HTTP MCP endpoint on mcpHost: POST /mcp
// with its tools, and the GET stream and DELETE of the 2025-11-25
// framing as plain operations.
const mcpSpec = `{
  "schema_version": "aileron.connector.v1",
  "connector": {"fqn": "github://acme/aileron-connector-test", "version": "1.0.0"},
  "tools": [{"name": "mcp", "operations": [
    {"name": "rpc", "method": "POST", "path": "/mcp", "hosts": ["mcp.example.test"], "credential": "bearer",
     "mcp": {"tools": ["echo", "search_*"], "approval_tools": ["create_issue"], "prompts": false}},
    {"name": "stream", "method": "GET", "path": "/mcp", "hosts": ["mcp.example.test"], "credential": "bearer"},
    {"name": "end", "method": "DELETE", "path": "/mcp", "hosts": ["mcp.example.test"], "credential": "bearer"}
  ]}]
}`

// mcpUpstream is a real MCP server (the Go SDK's) behind TLS, counting the
// tool calls it receives.
type mcpUpstream struct {
	mu     sync.Mutex
	calls  map[string]int
	noCred int
	// methodHeaders and sessionHeaders count requests carrying Mcp-Method
	// (2026-07-28) and Mcp-Session-Id (2025-11-25).
	methodHeaders, sessionHeaders int
}

func (u *mcpUpstream) called(name string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls[name]
}

type textArgs struct {
	Text string `json:"text"`
}

// newMCPEnv is an env whose session holds mcpSpec, with an MCP server on
// mcpHost; jsonResponse makes it answer application/json instead of SSE,
// stateless serves the POST-only 2026-07-28 framing.
func newMCPEnv(t *testing.T, jsonResponse, stateless bool) (*env, *mcpUpstream) {
	t.Helper()
	spec, _, err := policy.ParseSpec([]byte(mcpSpec))
	if err != nil {
		t.Fatalf("ParseSpec: %v", err)
	}
	snap, err := policy.Compile([]policy.Connector{{Spec: spec, Hash: "sha256:mcp"}})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *Config) {
		c.Policy = func() *policy.Snapshot { return snap }
		c.Resolve[mcpHost+":443"] = ln.Addr().String()
	})
	e.useSession(t, snap)

	u := &mcpUpstream{calls: map[string]int{}}
	srv := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "1.0.0"}, nil)
	for _, name := range []string{"echo", "search_docs", "create_issue", "delete_everything", "read_secrets"} {
		mcp.AddTool(srv, &mcp.Tool{Name: name, Description: "test tool " + name},
			func(_ context.Context, _ *mcp.CallToolRequest, in textArgs) (*mcp.CallToolResult, any, error) {
				u.mu.Lock()
				u.calls[name]++
				u.mu.Unlock()
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name + ":" + in.Text}}}, nil, nil
			})
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{JSONResponse: jsonResponse, Stateless: stateless,
		// It listens on loopback for the test but is reached as mcpHost.
		DisableLocalhostProtection: true})
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testToken {
			u.mu.Lock()
			u.noCred++
			u.mu.Unlock()
			http.Error(w, "no credential", http.StatusUnauthorized)
			return
		}
		u.mu.Lock()
		if r.Header.Get("Mcp-Method") != "" {
			u.methodHeaders++
		}
		if r.Header.Get("Mcp-Session-Id") != "" {
			u.sessionHeaders++
		}
		u.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	up.Listener.Close()
	up.Listener = ln
	up.EnableHTTP2 = true
	up.TLS = &tls.Config{Certificates: []tls.Certificate{e.pki.leaf}}
	up.StartTLS()
	t.Cleanup(up.Close)
	return e, u
}

func mcpConnect(t *testing.T, e *env, version string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1.0.0"}, nil)
	tr := &mcp.StreamableClientTransport{Endpoint: "https://" + mcpHost + "/mcp", HTTPClient: e.client(true), MaxRetries: -1}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, tr, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("Connect(%s) through the proxy: %v (audit: %+v)", version, err, e.audit.All())
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func TestMCPThroughProxy(t *testing.T) {
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		for _, jsonResp := range []bool{false, true} {
			name := version + map[bool]string{false: "/sse", true: "/json"}[jsonResp]
			t.Run(name, func(t *testing.T) {
				e, u := newMCPEnv(t, jsonResp, version == "2026-07-28")
				cs := mcpConnect(t, e, version)
				if got := cs.InitializeResult().ProtocolVersion; got != version {
					t.Errorf("negotiated %s, want %s (audit %+v)", got, version, e.audit.All())
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()

				lt, err := cs.ListTools(ctx, nil)
				if err != nil {
					t.Fatalf("ListTools: %v", err)
				}
				var names []string
				for _, tl := range lt.Tools {
					names = append(names, tl.Name)
				}
				slices.Sort(names)
				if got := strings.Join(names, ","); got != "create_issue,echo,search_docs" {
					t.Errorf("tools/list shows %s, want only the allowed create_issue,echo,search_docs", got)
				}

				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
				if err != nil || res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "echo:hi" {
					t.Fatalf("CallTool(echo) = %+v, %v; want echo:hi", res, err)
				}

				_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_everything", Arguments: map[string]any{"text": "CANARY-ARG"}})
				if err == nil || !strings.Contains(err.Error(), `"delete_everything"`) || !strings.Contains(err.Error(), "not allowed") {
					t.Fatalf("CallTool(delete_everything) error = %v, want the proxy's JSON-RPC error naming the tool", err)
				}
				if n := u.called("delete_everything"); n != 0 {
					t.Fatalf("the server received delete_everything %d times; the proxy must answer it", n)
				}
				ev := e.audit.WaitFor(t, "the refused tool call", func(ev audit.Event) bool { return ev.Fields["mcp.tool"] == "delete_everything" })
				if ev.Decision != "denied" || ev.Reason != "mcp_not_allowed" {
					t.Errorf("audit = %s %s, want denied mcp_not_allowed", ev.Decision, ev.Reason)
				}
				if b, _ := json.Marshal(ev); strings.Contains(string(b), "CANARY-ARG") {
					t.Errorf("audit %s records a tool argument", b)
				}

				// The prompts methods are switched off: refused as not found.
				if _, err := cs.ListPrompts(ctx, nil); err == nil || !strings.Contains(err.Error(), "switched off") {
					t.Errorf("ListPrompts error = %v, want prompts switched off", err)
				}

				// An approval tool is held, then released.
				done := make(chan error, 1)
				go func() {
					res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "create_issue", Arguments: map[string]any{"text": "bug"}})
					if err == nil && (res.IsError || res.Content[0].(*mcp.TextContent).Text != "create_issue:bug") {
						err = errUnexpected(res)
					}
					done <- err
				}()
				select {
				case r := <-e.approver.requests:
					if r.Operation != "rpc" {
						t.Errorf("held operation %q, want rpc", r.Operation)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("create_issue was not held")
				}
				if n := u.called("create_issue"); n != 0 {
					t.Fatalf("create_issue reached the server before approval")
				}
				e.approver.outcomes <- ApprovalApproved
				if err := <-done; err != nil {
					t.Fatalf("approved create_issue: %v", err)
				}
				if u.called("create_issue") != 1 || u.called("echo") != 1 {
					t.Errorf("server calls = %v, want echo and create_issue once", u.calls)
				}
				if version == "2026-07-28" && (u.methodHeaders == 0 || u.sessionHeaders != 0) {
					t.Errorf("2026-07-28 framing: %d requests with Mcp-Method, %d with Mcp-Session-Id; want some, none", u.methodHeaders, u.sessionHeaders)
				}
				if version == "2025-11-25" && u.sessionHeaders == 0 {
					t.Errorf("2025-11-25 framing: no request carried Mcp-Session-Id")
				}
				if u.noCred != 0 {
					t.Errorf("the server got %d requests without the injected credential", u.noCred)
				}
			})
		}
	}
}

type errUnexpectedResult struct{ res *mcp.CallToolResult }

func (e errUnexpectedResult) Error() string {
	b, _ := json.Marshal(e.res)
	return "unexpected result " + string(b)
}

func errUnexpected(res *mcp.CallToolResult) error { return errUnexpectedResult{res} }

// TestMCPHeadersMustAgree sends the 2026-07-28 framing by hand: Mcp-Method
// and Mcp-Name that disagree with the body are refused before the server.
func TestMCPHeadersMustAgree(t *testing.T) {
	e, u := newMCPEnv(t, true, true)
	body := `{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "delete_everything", "arguments": {}}}`
	for _, tc := range []struct{ method, name string }{{"tools/call", "echo"}, {"tools/list", ""}, {"tools/call", ""}} {
		req, _ := http.NewRequest(http.MethodPost, "https://"+mcpHost+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", tc.method)
		if tc.name != "" {
			req.Header.Set("Mcp-Name", tc.name)
		}
		resp, err := e.client(true).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b := readAll(t, resp)
		var rpc struct {
			ID    int `json:"id"`
			Error struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(b, &rpc) != nil || rpc.ID != 7 || rpc.Error.Code != -32600 || !strings.Contains(rpc.Error.Message, "does not agree") {
			t.Errorf("Mcp-Method %q Mcp-Name %q: %d %s; want 400 with a JSON-RPC error for id 7", tc.method, tc.name, resp.StatusCode, b)
		}
	}
	if n := u.called("delete_everything") + u.called("echo"); n != 0 {
		t.Errorf("the server received %d calls", n)
	}
}

// TestMCPBatch refuses a batch with one forbidden call whole, answering
// each request.
func TestMCPBatch(t *testing.T) {
	e, u := newMCPEnv(t, true, true)
	body := `[{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "a"}}},
	          {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "read_secrets"}}]`
	req, _ := http.NewRequest(http.MethodPost, "https://"+mcpHost+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client(false).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b := readAll(t, resp)
	var answers []struct {
		ID    int `json:"id"`
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &answers); err != nil || len(answers) != 2 || !strings.Contains(answers[1].Error.Message, `"read_secrets"`) ||
		!strings.Contains(answers[0].Error.Message, "not sent") {
		t.Fatalf("batch answer = %d %s, want two JSON-RPC errors", resp.StatusCode, b)
	}
	if u.called("echo")+u.called("read_secrets") != 0 {
		t.Errorf("the server received part of a refused batch")
	}
}
