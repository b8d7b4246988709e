package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The MCP round trip with real agent CLIs: the model stand-in's first
// reply asks for the MCP tool of the demo connector's items.get; the agent
// calls it through `aileron-proxy mcp` in the sandbox; the demo upstream
// gets the call with the injected credential; the stand-in finds the tool
// result in the agent's next request and answers with what it read; the
// agent prints that answer.

const (
	mcpItemID   = "mcp-7"
	mcpItemName = "mcp-demo-item-5150"
	// mcpAnswer is the stand-in's final answer, followed by the item name
	// it read in the tool result.
	mcpAnswer = "AILERON-MCP-ANSWER:"
	mcpPrompt = "Look up item mcp-7 with the demo tool and report its name."
)

// mcpAgentCase is one agent CLI of the round trip.
type mcpAgentCase struct {
	name, connector, fqn string
	credential           []string
	host                 string
	// tool is the name the agent gives the demo tool in its model request.
	tool string
	argv []string
	// broken, when set, skips the case with the reason (a known failure).
	broken string
}

var mcpAgentCases = []mcpAgentCase{
	{
		name: "claude", connector: "anthropic", fqn: "github://aileron-dev/aileron-connector-anthropic",
		credential: []string{"--kind", "api_key", "--header", "x-api-key"}, host: "api.anthropic.com",
		// Claude Code: mcp__<server>__<tool>.
		tool: "mcp__aileron__demo__items_get",
		argv: []string{"claude", "-p", mcpPrompt},
	},
	{
		name: "gemini", connector: "google", fqn: "github://acme/aileron-connector-google",
		credential: []string{"--kind", "api_key", "--header", "x-goog-api-key"}, host: "generativelanguage.googleapis.com",
		// Gemini CLI: mcp_<server>_<tool>.
		tool: "mcp_aileron_demo__items_get",
		argv: []string{"gemini", "-p", mcpPrompt},
	},
}

// mcpStandIn records what the tool-calling stand-in saw.
type mcpStandIn struct {
	tool string
	mu   sync.Mutex
	// declared are the tool names of the requests that declared tools.
	declared [][]string
	named    bool   // a request named the tool
	asked    int    // tool calls requested
	result   string // the tool result the agent sent back
}

// handler answers the agent's main requests (those declaring tools) with
// a tool call, then, once the result is in a request, with mcpAnswer and
// the item name it found; everything else goes to modelStandIn.
func (s *mcpStandIn) handler() http.Handler {
	plain := modelStandIn()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		r.Body = io.NopCloser(strings.NewReader(string(raw)))
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		switch {
		case r.Host == "api.anthropic.com" && r.URL.Path == "/v1/messages" && s.declares(anthropicTools(body), raw):
			stream, _ := body["stream"].(bool)
			names := anthropicTools(body)
			if result, ok := anthropicToolResult(body, "toolu_standin_mcp"); ok {
				s.gotResult(result)
				anthropicText(w, body, stream, s.answer())
				return
			}
			_, searched := anthropicToolResult(body, "toolu_standin_search")
			if !searched && !slices.Contains(names, s.tool) && slices.Contains(names, "ToolSearch") {
				// Claude Code defers MCP tools: their names are in the system
				// prompt, and the model loads a schema with ToolSearch first,
				// as the real model does.
				anthropicToolUse(w, body, stream, "toolu_standin_search", "ToolSearch", map[string]any{"query": "select:" + s.tool, "max_results": 5})
				return
			}
			s.mu.Lock()
			s.asked++
			s.mu.Unlock()
			anthropicToolUse(w, body, stream, "toolu_standin_mcp", s.tool, map[string]any{"id": mcpItemID})
		case r.Host == "generativelanguage.googleapis.com" && strings.HasSuffix(r.URL.Path, ":streamGenerateContent") && s.declares(geminiTools(body), raw):
			w.Header().Set("Content-Type", "text/event-stream")
			if result, ok := geminiToolResult(body); ok {
				s.gotResult(result)
				fmt.Fprintf(w, "data: %s\r\n\r\n", mustJSON(geminiResponse(s.answer())))
				return
			}
			s.mu.Lock()
			s.asked++
			s.mu.Unlock()
			call := map[string]any{"functionCall": map[string]any{"name": s.tool, "args": map[string]any{"id": mcpItemID}}}
			fmt.Fprintf(w, "data: %s\r\n\r\n", mustJSON(map[string]any{
				"candidates":    []any{map[string]any{"content": map[string]any{"role": "model", "parts": []any{call}}, "finishReason": "STOP", "index": 0}},
				"usageMetadata": map[string]any{"promptTokenCount": 12, "candidatesTokenCount": 6, "totalTokenCount": 18},
				"modelVersion":  "gemini-2.5-flash",
			}))
		default:
			plain.ServeHTTP(w, r)
		}
	})
}

// declares records the tools a request declared, and whether it named
// the tool anywhere (Claude Code lists deferred tools in its system
// prompt); it reports whether the request declared tools at all.
func (s *mcpStandIn) declares(names []string, raw []byte) bool {
	if len(names) == 0 {
		return false
	}
	s.mu.Lock()
	s.declared = append(s.declared, names)
	if strings.Contains(string(raw), `"`+s.tool+`"`) || strings.Contains(string(raw), `\n`+s.tool+`\n`) {
		s.named = true
	}
	s.mu.Unlock()
	return true
}

func (s *mcpStandIn) gotResult(result string) {
	s.mu.Lock()
	s.result = result
	s.mu.Unlock()
}

// answer is mcpAnswer plus the item name when the tool result holds it.
func (s *mcpStandIn) answer() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if strings.Contains(s.result, mcpItemName) {
		return mcpAnswer + mcpItemName
	}
	return mcpAnswer + "no-item-in-the-tool-result"
}

func anthropicTools(body map[string]any) []string {
	var names []string
	tools, _ := body["tools"].([]any)
	for _, t := range tools {
		if m, ok := t.(map[string]any); ok {
			n, _ := m["name"].(string)
			names = append(names, n)
		}
	}
	return names
}

// anthropicToolResult is the content of the last message's tool_result
// for the tool_use id.
func anthropicToolResult(body map[string]any, id string) (string, bool) {
	msgs, _ := body["messages"].([]any)
	if len(msgs) == 0 {
		return "", false
	}
	last, _ := msgs[len(msgs)-1].(map[string]any)
	content, _ := last["content"].([]any)
	for _, c := range content {
		if m, ok := c.(map[string]any); ok && m["type"] == "tool_result" && m["tool_use_id"] == id {
			return string(mustJSON(m["content"])), true
		}
	}
	return "", false
}

func geminiTools(body map[string]any) []string {
	var names []string
	tools, _ := body["tools"].([]any)
	for _, t := range tools {
		m, _ := t.(map[string]any)
		decls, _ := m["functionDeclarations"].([]any)
		for _, d := range decls {
			if dm, ok := d.(map[string]any); ok {
				n, _ := dm["name"].(string)
				names = append(names, n)
			}
		}
	}
	return names
}

// geminiToolResult is the functionResponse of the last content.
func geminiToolResult(body map[string]any) (string, bool) {
	contents, _ := body["contents"].([]any)
	if len(contents) == 0 {
		return "", false
	}
	last, _ := contents[len(contents)-1].(map[string]any)
	parts, _ := last["parts"].([]any)
	for _, p := range parts {
		if m, ok := p.(map[string]any); ok && m["functionResponse"] != nil {
			return string(mustJSON(m["functionResponse"])), true
		}
	}
	return "", false
}

// anthropicToolUse answers with one tool_use block.
func anthropicToolUse(w http.ResponseWriter, body map[string]any, stream bool, id, name string, input map[string]any) {
	model, _ := body["model"].(string)
	usage := map[string]any{"input_tokens": 12, "output_tokens": 6, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	block := map[string]any{"type": "tool_use", "id": id, "name": name, "input": input}
	msg := map[string]any{"id": "msg_standin_tool", "type": "message", "role": "assistant", "model": model,
		"content": []any{block}, "stop_reason": "tool_use", "stop_sequence": nil, "usage": usage}
	if !stream {
		writeJSON(w, msg)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	start := map[string]any{}
	for k, v := range msg {
		start[k] = v
	}
	start["content"], start["stop_reason"] = []any{}, nil
	sse(w, "message_start", map[string]any{"type": "message_start", "message": start})
	sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0,
		"content_block": map[string]any{"type": "tool_use", "id": id, "name": name, "input": map[string]any{}}})
	sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
		"delta": map[string]any{"type": "input_json_delta", "partial_json": string(mustJSON(input))}})
	sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	sse(w, "message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "tool_use", "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 6}})
	sse(w, "message_stop", map[string]any{"type": "message_stop"})
}

// anthropicText answers with one text block.
func anthropicText(w http.ResponseWriter, body map[string]any, stream bool, text string) {
	model, _ := body["model"].(string)
	usage := map[string]any{"input_tokens": 12, "output_tokens": 6, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	msg := map[string]any{"id": "msg_standin_answer", "type": "message", "role": "assistant", "model": model,
		"content": []any{map[string]any{"type": "text", "text": text}}, "stop_reason": "end_turn", "stop_sequence": nil, "usage": usage}
	if !stream {
		writeJSON(w, msg)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	start := map[string]any{}
	for k, v := range msg {
		start[k] = v
	}
	start["content"], start["stop_reason"] = []any{}, nil
	sse(w, "message_start", map[string]any{"type": "message_start", "message": start})
	sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
	sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": text}})
	sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	sse(w, "message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 6}})
	sse(w, "message_stop", map[string]any{"type": "message_stop"})
}

// demoUpstream stands in for the demo API: items.get answers the item.
func demoUpstream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, ok := strings.CutPrefix(r.URL.Path, "/v1/items/"); ok && r.Method == http.MethodGet {
			writeJSON(w, map[string]any{"id": id, "name": mcpItemName})
			return
		}
		http.Error(w, `{"error":"not served"}`, http.StatusNotFound)
	})
}

// TestAgentsMCPInSandbox runs the round trip with Claude Code (Docker and
// Podman) and Gemini CLI (Docker).
func TestAgentsMCPInSandbox(t *testing.T) {
	if testing.Short() {
		t.Skip("agent images skipped with -short")
	}
	t.Cleanup(removeSharedImages)
	runtimes := map[string][]string{"claude": {"docker", "podman"}}
	for _, ac := range mcpAgentCases {
		kinds := runtimes[ac.name]
		if kinds == nil {
			kinds = []string{"docker"}
		}
		for _, kind := range kinds {
			t.Run(ac.name+"/"+kind, func(t *testing.T) {
				if ac.broken != "" {
					t.Skip(ac.broken)
				}
				requireRuntime(t, kind)
				runMCPAgentCase(t, ac, kind)
			})
		}
	}
}

func runMCPAgentCase(t *testing.T, ac mcpAgentCase, kind string) {
	bundle := hostBundleWithMarker(t)
	project := buildAgentImage(t, ac.name, kind, []string{"SSL_CERT_FILE=" + bundle.path})

	home := t.TempDir()
	standIn := &mcpStandIn{tool: ac.tool}
	model := newUpstream(t, []string{ac.host}, standIn.handler())
	demo := newUpstream(t, []string{"api.demo.localhost"}, demoUpstream())
	mustCLI(t, home, "", "connector", "install", filepath.Join("..", "configs", "connectors", ac.connector+".aileron.connector.v1.json"))
	mustCLI(t, home, "", "connector", "install", filepath.Join("..", "configs", "connectors", "demo.aileron.connector.v1.json"))
	mustCLI(t, home, canary+"\n", append([]string{"credential", "set", ac.fqn}, append(ac.credential, "--stdin")...)...)
	mustCLI(t, home, canary+"\n", "credential", "set", "local://aileron/demo", "--kind", "bearer", "--stdin")
	d := startServe(t, home, nil, "--resolve", ac.host+":443="+model.addr, "--resolve", "api.demo.localhost:8443="+demo.addr,
		"--upstream-ca", model.certFile, "--upstream-ca", demo.certFile)
	t.Cleanup(func() { removeSandboxes(t, kind, home) })

	args := append([]string{"launch", "--sandbox=" + kind, "--sandbox-build=never", "--project", project, "--",
		"sh", "-c", inSandboxScript, "agent", canaryPattern()}, ac.argv...)
	stdout, stderr, code := launchCLI(t, home, nil, 6*time.Minute, args...)
	t.Logf("agent output:\n%s", redactCanary(stdout))
	if code != 0 || !strings.Contains(stdout, "aileron-agent-exit:0\n") {
		t.Errorf("launch exited %d; want the agent to exit 0\nstderr:\n%s", code, redactCanary(lastN(stderr, 4000)))
	}

	standIn.mu.Lock()
	declared, named, asked, result := standIn.declared, standIn.named, standIn.asked, standIn.result
	standIn.mu.Unlock()
	t.Logf("tools declared: %v", declared)
	if !named {
		t.Fatalf("no request of %s named the tool %s; declared: %v", ac.name, ac.tool, declared)
	}
	if asked == 0 {
		t.Fatal("the stand-in never asked for the tool call")
	}
	// The demo upstream got the call, with the injected credential.
	var calls []recorded
	for _, r := range demo.requests() {
		calls = append(calls, r)
		if r.Method != http.MethodGet || r.Path != "/v1/items/"+mcpItemID || r.Header.Get("Authorization") != "Bearer "+canary {
			t.Errorf("demo upstream got %s %s with Authorization %q; want GET /v1/items/%s with the injected credential",
				r.Method, r.Path, redactCanary(r.Header.Get("Authorization")), mcpItemID)
		}
	}
	if len(calls) != 1 {
		t.Errorf("demo upstream got %d calls, want 1", len(calls))
	}
	if !strings.Contains(result, mcpItemName) {
		t.Errorf("the agent's next request carried the tool result %q; want the item %s", result, mcpItemName)
	}
	if !strings.Contains(stdout, mcpAnswer+mcpItemName) {
		t.Errorf("the agent did not print the stand-in's answer %q", mcpAnswer+mcpItemName)
	}
	if !strings.Contains(stdout, "aileron-canary-found:0\n") {
		t.Error("the canary is in the sandbox (or the scan did not run)")
	}
	for _, r := range model.requests() {
		if strings.Contains(string(r.Body), canary) {
			t.Errorf("the model stand-in's %s %s body holds the credential", r.Method, r.Path)
		}
	}
	if strings.Contains(stdout+stderr+d.stderr.String(), canary) {
		t.Error("launch's output or serve's log holds the credential")
	}
	ev := waitAudit(t, home, map[string]any{"operation": "items.get", "source": "run_endpoint"})
	if ev["decision"] != "allowed" {
		t.Errorf("audit of the tool call = %v", ev)
	}
}
