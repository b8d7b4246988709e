package policy

import (
	"errors"
	"strings"
	"testing"
)

func mcpInspection(t testing.TB) *Inspection {
	t.Helper()
	spec, _, err := ParseSpec([]byte(specDoc(mcpOp("rpc", `{"tools": ["get_issue", "search_*"], "approval_tools": ["create_issue"], "resources": false}`))))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := Compile([]Connector{{Spec: spec}})
	if err != nil {
		t.Fatal(err)
	}
	d := snap.Decide(NewScope([]string{"github://acme/example"}), Request{Method: "POST", Host: "mcp.example.com", Path: "/mcp"})
	if d.Inspect == nil || d.Inspect.Kind() != BodyMCP {
		t.Fatalf("Decide(POST /mcp) = %+v, want an MCP inspection", d)
	}
	return d.Inspect
}

func TestDecideMCP(t *testing.T) {
	in := mcpInspection(t)
	tests := []struct {
		name, body string
		refused    bool
		approval   bool
	}{
		{"initialize", `{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}`, false, false},
		{"initialized", `{"jsonrpc": "2.0", "method": "notifications/initialized"}`, false, false},
		{"tools/list", `{"jsonrpc": "2.0", "id": "a", "method": "tools/list"}`, false, false},
		{"allowed tool", `{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "get_issue", "arguments": {"n": 1}}}`, false, false},
		{"glob tool", `{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "search_code"}}`, false, false},
		{"approval tool", `{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "create_issue"}}`, false, true},
		{"forbidden tool", `{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "delete_repo"}}`, true, false},
		{"resources off", `{"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": "file:///etc/passwd"}}`, true, false},
		{"prompts on", `{"jsonrpc": "2.0", "id": 3, "method": "prompts/list"}`, false, false},
		{"unknown method", `{"jsonrpc": "2.0", "id": 3, "method": "admin/shutdown"}`, true, false},
		{"response", `{"jsonrpc": "2.0", "id": 9, "result": {}}`, false, false},
		{"batch one forbidden", `[{"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "delete_repo"}}]`, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msgs, _, err := ParseMCPBody([]byte(tc.body))
			if err != nil {
				t.Fatalf("ParseMCPBody(%s): %v", tc.body, err)
			}
			d := in.DecideMCP(msgs)
			if (len(d.Refused) > 0) != tc.refused || d.Approval != tc.approval {
				t.Errorf("DecideMCP(%s) = refused %v approval %v; want refused %v approval %v", tc.body, d.Refused, d.Approval, tc.refused, tc.approval)
			}
			for _, e := range d.Refused {
				if strings.Contains(tc.body, "delete_repo") && !strings.Contains(e.Message, `"delete_repo"`) && !strings.Contains(e.Message, "ping") {
					t.Errorf("refusal %q does not name the tool", e.Message)
				}
			}
		})
	}
}

func TestParseMCPBodyRefuses(t *testing.T) {
	for _, body := range []string{
		``, `[]`, `{}`, `{"jsonrpc": "1.0", "id": 1, "method": "ping"}`,
		`{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_issue", "name": "delete_repo"}}`,
		`{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_issue", "Name": "delete_repo"}}`,
		`{"jsonrpc": "2.0", "id": 1, "method": "ping", "method": "tools/call"}`,
		`{"jsonrpc": "2.0", "id": 1, "method": "ping", "Method": "tools/call"}`,
		`{"jsonrpc": "2.0", "id": 1, "method": "tools/call"}`,
		`{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": 5}}`,
		`{"jsonrpc": "2.0", "id": {}, "method": "ping"}`,
		`{"jsonrpc": "2.0", "id": 1, "method": "ping", "result": {}}`,
		`{"jsonrpc": "2.0", "id": 1, "method": "ping"} {}`,
	} {
		if _, _, err := ParseMCPBody([]byte(body)); err == nil {
			t.Errorf("ParseMCPBody(%s) succeeded, want a refusal", body)
		}
	}
}

func TestCheckMCPHeaders(t *testing.T) {
	msgs, _, _ := ParseMCPBody([]byte(`{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_issue"}}`))
	for _, tc := range []struct {
		method, name       string
		hasMethod, hasName bool
		ok                 bool
	}{
		{"", "", false, false, true},
		{"tools/call", "get_issue", true, true, true},
		{"tools/call", "delete_repo", true, true, false},
		{"tools/list", "get_issue", true, true, false},
		{"tools/call", "", true, false, false},
		{"", "get_issue", false, true, false},
	} {
		err := CheckMCPHeaders(msgs, false, tc.method, tc.name, tc.hasMethod, tc.hasName)
		var me *MCPError
		if (err == nil) != tc.ok || (err != nil && !errors.As(error(err), &me)) {
			t.Errorf("CheckMCPHeaders(%q, %q) = %v, want ok %v", tc.method, tc.name, err, tc.ok)
		}
	}
}

// FuzzMCPBody feeds arbitrary bodies through the JSON-RPC framing: it
// never panics, and a tools/call that passes names an allowed tool.
func FuzzMCPBody(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_issue"}}`,
		`[{"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "delete_repo"}}]`,
		`{"jsonrpc": "2.0", "method": "notifications/initialized"}`,
		`{"jsonrpc": "2.0", "id": 9, "result": {"tools": []}}`,
	} {
		f.Add([]byte(s))
	}
	in := mcpInspection(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		msgs, _, err := ParseMCPBody(body)
		if err != nil {
			return
		}
		d := in.DecideMCP(msgs)
		for i, m := range msgs {
			if d.Refused[i] != nil || m.Method != "tools/call" {
				continue
			}
			if m.Name != "get_issue" && m.Name != "create_issue" && !strings.HasPrefix(m.Name, "search_") {
				t.Fatalf("tools/call %q passed from %q", m.Name, body)
			}
			if m.Name == "create_issue" && !d.Approval {
				t.Fatalf("create_issue passed without approval")
			}
		}
	})
}
