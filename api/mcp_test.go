package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aileron-dev/aileron-proxy/actions"
	"github.com/aileron-dev/aileron-proxy/audit"
)

// recordingTransport keeps every byte of every MCP message in both
// directions, so a test can check the canary never appears in one.
type recordingTransport struct {
	token string
	mu    sync.Mutex
	seen  bytes.Buffer
}

type teeBody struct {
	io.ReadCloser
	rt *recordingTransport
}

func (b teeBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.rt.mu.Lock()
	b.rt.seen.Write(p[:n])
	b.rt.mu.Unlock()
	return n, err
}

func (rt *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+rt.token)
	if r.Body != nil {
		raw, _ := io.ReadAll(r.Body)
		rt.mu.Lock()
		rt.seen.Write(raw)
		rt.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(raw))
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = teeBody{resp.Body, rt}
	return resp, nil
}

func (rt *recordingTransport) all() string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.seen.String()
}

func connectMCP(t *testing.T, h *harness, token string, opts *mcp.ClientOptions) (*mcp.ClientSession, *recordingTransport) {
	t.Helper()
	rt := &recordingTransport{token: token}
	cl := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.url + MCPPath, HTTPClient: &http.Client{Transport: rt}}, nil)
	if err != nil {
		t.Fatalf("connecting to %s: %v", MCPPath, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, rt
}

func textOf(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestMCPOverStreamableHTTP(t *testing.T) {
	h := newHarness(t, harnessOptions{withProxy: true})
	cs := h.createSession(fqnGH)
	progress := make(chan *mcp.ProgressNotificationParams, 16)
	sess, rt := connectMCP(t, h, cs.APIToken, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			progress <- r.Params
		},
	})
	ctx := context.Background()

	tools, err := sess.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	byName := map[string]*mcp.Tool{}
	for _, tl := range tools.Tools {
		byName[tl.Name] = tl
	}
	list := byName["gh__issues_list"]
	if list == nil {
		t.Fatalf("no gh__issues_list among %v", tools.Tools)
	}
	if list.Annotations == nil || !list.Annotations.ReadOnlyHint || !list.Annotations.IdempotentHint {
		t.Errorf("gh__issues_list annotations = %+v, want read-only and idempotent", list.Annotations)
	}
	schema, _ := json.Marshal(list.InputSchema)
	if !strings.Contains(string(schema), `"required":["owner","repo"]`) {
		t.Errorf("gh__issues_list schema = %s, want owner and repo required", schema)
	}

	// Allowed: the upstream gets the injected credential; the JSON body
	// comes back as structured content.
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "gh__issues_list", Arguments: map[string]any{"owner": "acme", "repo": "widgets"}})
	if err != nil {
		t.Fatalf("tools/call: %v", err)
	}
	if res.IsError || res.StructuredContent == nil {
		t.Errorf("allowed call = isError %v structured %v: %s", res.IsError, res.StructuredContent, textOf(res))
	}
	if got := h.up.last(t); got.Auth != "Bearer "+canary || got.Path != "/repos/acme/widgets/issues" {
		t.Errorf("upstream got %s with auth %q", got.Path, got.Auth)
	}

	// An argument error is a JSON-RPC error naming the argument.
	_, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: "gh__issues_list", Arguments: map[string]any{"owner": "acme", "repo": "w", "per_page": "many"}})
	var we *jsonrpc.Error
	if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams || !strings.Contains(we.Message, `"per_page"`) {
		t.Errorf("argument error = %v, want invalid params naming per_page", err)
	}

	// Approval held, then approved through the API; progress is reported.
	type out struct {
		res *mcp.CallToolResult
		err error
	}
	hold := func(ctx context.Context) (<-chan out, string) {
		ch := make(chan out, 1)
		go func() {
			p := &mcp.CallToolParams{Name: "gh__issues_delete", Arguments: map[string]any{"owner": "acme", "repo": "w", "number": 7}}
			p.SetProgressToken("tok-1")
			r, err := sess.CallTool(ctx, p)
			ch <- out{r, err}
		}()
		e := h.audit.waitFor(t, audit.EventApprovalRequested)
		return ch, e.Fields["approval_id"]
	}
	ch, id := hold(ctx)
	if r := h.do(http.MethodPost, "/v1/approvals/"+id, adminToken, DecideRequest{Decision: "approve"}); r.status != http.StatusOK {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	o := <-ch
	if o.err != nil || o.res.IsError {
		t.Fatalf("approved call = %v %+v", o.err, o.res)
	}
	if got := h.up.last(t); got.Method != http.MethodDelete {
		t.Errorf("upstream got %s after approval", got.Method)
	}

	// Denied: an isError result telling the model not to retry.
	before := h.up.count.Load()
	ch, id = hold(ctx)
	if r := h.do(http.MethodPost, "/v1/approvals/"+id, adminToken, DecideRequest{Decision: "deny"}); r.status != http.StatusOK {
		t.Fatalf("deny: %d %s", r.status, r.body)
	}
	o = <-ch
	if o.err != nil || !o.res.IsError || !strings.Contains(textOf(o.res), "Do not retry") || !strings.Contains(textOf(o.res), "approval_denied") {
		t.Errorf("denied call = %v %+v %q", o.err, o.res, textOf(o.res))
	}
	if h.up.count.Load() != before {
		t.Error("a denied call reached the upstream")
	}

	// Cancelled by the client: the held request is withdrawn.
	cctx, cancel := context.WithCancel(ctx)
	ch, _ = hold(cctx)
	cancel()
	if o := <-ch; o.err == nil {
		t.Errorf("cancelled call returned %+v", o.res)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := h.do(http.MethodGet, "/v1/approvals", adminToken, nil)
		var l ApprovalList
		if err := json.Unmarshal(r.body, &l); err != nil {
			t.Fatal(err)
		}
		if len(l.Approvals) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled call is still pending: %s", r.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if h.up.count.Load() != before {
		t.Error("a cancelled call reached the upstream")
	}

	if strings.Contains(rt.all(), canary) {
		t.Error("the canary appears in an MCP message")
	}
}

func TestMCPRefusals(t *testing.T) {
	h := newHarness(t, harnessOptions{withProxy: true})
	// conn-other has no credential: the call is refused.
	cs := h.createSession(fqnOther)
	sess, _ := connectMCP(t, h, cs.APIToken, nil)
	tools, err := sess.ListTools(context.Background(), nil)
	if err != nil || len(tools.Tools) == 0 {
		t.Fatalf("tools/list = %v, %v", tools, err)
	}
	for _, tl := range tools.Tools {
		if strings.HasPrefix(tl.Name, "gh__") {
			t.Errorf("a tool of a connector outside the session is listed: %s", tl.Name)
		}
	}
	// A tool of a connector outside the session is not callable by name.
	_, err = sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "gh__issues_list", Arguments: map[string]any{"owner": "acme", "repo": "w"}})
	if err == nil || !strings.Contains(err.Error(), `unknown tool "gh__issues_list"`) {
		t.Errorf("calling a tool of a connector outside the session = %v, want an unknown tool error", err)
	}
	res, err := sess.CallTool(context.Background(), &mcp.CallToolParams{Name: "other__secure"})
	if err != nil {
		t.Fatalf("tools/call: %v", err)
	}
	if !res.IsError || !strings.Contains(textOf(res), "refused by Aileron (credential_") {
		t.Errorf("refused call = isError %v %q, want an isError refusal with its code", res.IsError, textOf(res))
	}
	if n := h.up.count.Load(); n != 0 {
		t.Errorf("a refused call reached the upstream (%d)", n)
	}
	if _, err := connectNoToken(h); err == nil {
		t.Error("connecting without the session token succeeded")
	}
}

func connectNoToken(h *harness) (*mcp.ClientSession, error) {
	cl := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.url + MCPPath, MaxRetries: -1}, nil)
}

// TestMCPThroughRelayHost: a sandbox reaches the API through a relay on
// its network's gateway, so its MCP requests carry that address as Host
// on the loopback listener. With the session token they are served;
// without it they are refused whatever the Host.
func TestMCPThroughRelayHost(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	cs := h.createSession(fqnOther)
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"relay","version":"1"}}}`
	post := func(token string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, h.url+MCPPath, strings.NewReader(initialize))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "192.168.48.1:33653"
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post(cs.APIToken); code != http.StatusOK || !strings.Contains(body, `"protocolVersion":"2025-06-18"`) {
		t.Errorf("initialize through the relay's Host = %d %s, want 200 and the negotiated version", code, body)
	}
	if code, _ := post(""); code != http.StatusUnauthorized {
		t.Errorf("initialize without the token = %d, want 401", code)
	}
}

// TestMCPProgressNamesTheHeldRequest: while a call waits for a person, its
// progress notifications say which approval holds it and what it sends.
func TestMCPProgressNamesTheHeldRequest(t *testing.T) {
	h := newHarness(t, harnessOptions{withProxy: true, mutate: func(c *Config) { c.MCP.ProgressInterval = 20 * time.Millisecond }})
	cs := h.createSession(fqnGH)
	progress := make(chan *mcp.ProgressNotificationParams, 64)
	sess, _ := connectMCP(t, h, cs.APIToken, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			select {
			case progress <- r.Params:
			default:
			}
		},
	})
	done := make(chan error, 1)
	go func() {
		p := &mcp.CallToolParams{Name: "gh__issues_delete", Arguments: map[string]any{"owner": "acme", "repo": "w", "number": 7}}
		p.SetProgressToken("tok-held")
		_, err := sess.CallTool(context.Background(), p)
		done <- err
	}()
	id := h.audit.waitFor(t, audit.EventApprovalRequested).Fields["approval_id"]
	deadline := time.After(10 * time.Second)
	for found := false; !found; {
		select {
		case p := <-progress:
			found = strings.Contains(p.Message, "held: "+id+": DELETE ") && strings.Contains(p.Message, "/repos/acme/w/issues/7")
		case <-deadline:
			t.Fatalf("no progress notification named the held request %s", id)
		}
	}
	if r := h.do(http.MethodPost, "/v1/approvals/"+id, adminToken, DecideRequest{Decision: "deny"}); r.status != http.StatusOK {
		t.Fatalf("deny: %d %s", r.status, r.body)
	}
	if err := <-done; err != nil {
		t.Fatalf("denied call: %v", err)
	}
}

// TestMCPToolListChanged: installing an action while a client is connected
// is announced with notifications/tools/list_changed by the session's poll
// (no request of the client triggers it), and the next tools/list has the
// new tool.
func TestMCPToolListChanged(t *testing.T) {
	const poll = 50 * time.Millisecond
	var installed atomic.Bool
	var h *harness
	h = newHarness(t, harnessOptions{withProxy: true, mutate: func(c *Config) {
		c.MCP.Poll = poll
		c.Actions = func() map[string]actions.Installed {
			if !installed.Load() {
				return nil
			}
			return testActions(t, h, actionListOpen)
		}
	}})
	cs := h.createSession(fqnGH)
	changed := make(chan struct{}, 16)
	sess, _ := connectMCP(t, h, cs.APIToken, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
	has := func(name string) bool {
		t.Helper()
		tools, err := sess.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		for _, tl := range tools.Tools {
			if tl.Name == name {
				return true
			}
		}
		return false
	}
	if has("list-open") {
		t.Fatal("the action is listed before it is installed")
	}
	// Nothing changed yet: no notification across several polls.
	select {
	case <-changed:
		t.Fatal("notifications/tools/list_changed before the catalog changed")
	case <-time.After(5 * poll):
	}

	installed.Store(true)
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no notifications/tools/list_changed within 10s of installing an action")
	}
	if !has("list-open") {
		t.Error("the installed action is not in the tools/list after the notification")
	}
}

// TestMCPActionTool: an installed action is a tool whose call goes through
// the action endpoint: its presets are applied, the upstream receives the
// injected credential, and a preset cannot be overridden by an argument.
func TestMCPActionTool(t *testing.T) {
	h := newActionHarness(t)
	cs := h.createSession(fqnGH)
	sess, rt := connectMCP(t, h, cs.APIToken, nil)
	ctx := context.Background()
	tools, err := sess.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var tool *mcp.Tool
	for _, tl := range tools.Tools {
		if tl.Name == "list-open" {
			tool = tl
		}
	}
	if tool == nil {
		t.Fatalf("no list-open action tool among %d tools", len(tools.Tools))
	}
	schema, _ := json.Marshal(tool.InputSchema)
	if !strings.Contains(string(schema), `"required":["owner","repo"]`) || strings.Contains(string(schema), `"state"`) {
		t.Errorf("list-open schema = %s, want owner and repo required and no preset", schema)
	}
	if !strings.Contains(tool.Description, "Action list-open: runs GET /repos/{owner}/{repo}/issues") {
		t.Errorf("list-open description = %q", tool.Description)
	}

	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "list-open", Arguments: map[string]any{"owner": "acme", "repo": "widgets"}})
	if err != nil {
		t.Fatalf("tools/call list-open: %v", err)
	}
	if res.IsError || res.StructuredContent == nil {
		t.Errorf("action call = isError %v structured %v: %s", res.IsError, res.StructuredContent, textOf(res))
	}
	got := h.up.last(t)
	if got.Method != http.MethodGet || got.Path != "/repos/acme/widgets/issues" || got.RawQuery != "per_page=5&state=open" {
		t.Errorf("upstream got %s %s?%s, want GET /repos/acme/widgets/issues?per_page=5&state=open", got.Method, got.Path, got.RawQuery)
	}
	if got.Auth != "Bearer "+canary {
		t.Errorf("upstream Authorization = %q, want the injected credential", got.Auth)
	}
	// The call went through the action endpoint: it is audited as the action.
	ev := h.audit.waitFor(t, audit.EventActionRun)
	if ev.Action != "list-open" || ev.Operation != "issues.list" || ev.SessionID != cs.ID {
		t.Errorf("action.run event = %+v", ev)
	}

	before := h.up.count.Load()
	_, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: "list-open", Arguments: map[string]any{"owner": "acme", "repo": "widgets", "state": "closed"}})
	var we *jsonrpc.Error
	if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams || !strings.Contains(we.Message, `"state"`) {
		t.Errorf("overriding a preset = %v, want invalid params naming state", err)
	}
	if h.up.count.Load() != before {
		t.Error("a call overriding a preset reached the upstream")
	}
	if strings.Contains(rt.all(), canary) {
		t.Error("the canary appears in an MCP message")
	}
}

// TestMCPTextAndBinaryBodies: a non-JSON text body longer than the cap is
// cut with a visible note saying how much was shown, and a binary body is
// described by its content type and size instead of being dumped.
func TestMCPTextAndBinaryBodies(t *testing.T) {
	h := newHarness(t, harnessOptions{withProxy: true, mutate: func(c *Config) { c.MaxResponseBytes = 1 << 20; c.MCP.MaxText = 1000 }})
	cs := h.createSession(fqnGH)
	sess, _ := connectMCP(t, h, cs.APIToken, nil)
	ctx := context.Background()

	// /big answers smallResponses+1 bytes of text/plain "x".
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "gh__big_get"})
	if err != nil {
		t.Fatalf("tools/call gh__big_get: %v", err)
	}
	text := textOf(res)
	body, note, ok := strings.Cut(text, "\n[truncated by Aileron: ")
	if res.IsError || !ok || body != strings.Repeat("x", 1000) || note != fmt.Sprintf("1000 of %d bytes shown]", smallResponses+1) {
		t.Errorf("large text body = isError %v, %d chars ending %q; want 1000 x and the truncation note", res.IsError, len(text), text[max(0, len(text)-60):])
	}
	if res.StructuredContent != nil {
		t.Errorf("a text body has structured content %v", res.StructuredContent)
	}

	// /bin answers 4 bytes of application/octet-stream with a NUL.
	res, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: "gh__bin_get"})
	if err != nil {
		t.Fatalf("tools/call gh__bin_get: %v", err)
	}
	text = textOf(res)
	if res.IsError || text != "HTTP 200: a binary body of 4 bytes (application/octet-stream), not shown" {
		t.Errorf("binary body = isError %v %q, want it described by size and content type", res.IsError, text)
	}
	for _, c := range res.Content {
		if _, ok := c.(*mcp.TextContent); !ok {
			t.Errorf("binary body returned as %T, want only a text description", c)
		}
	}

	// A short text body comes back whole, without a note.
	res, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: "gh__text_get"})
	if err != nil {
		t.Fatalf("tools/call gh__text_get: %v", err)
	}
	if text = textOf(res); res.IsError || text != "héllo" {
		t.Errorf("short text body = isError %v %q, want héllo", res.IsError, text)
	}
}
