package proxy

import (
	"bufio"
	"io"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/policy"
)

func mcpTestInspection(t *testing.T) *policy.Inspection {
	t.Helper()
	spec, _, err := policy.ParseSpec([]byte(mcpSpec))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := policy.Compile([]policy.Connector{{Spec: spec}})
	if err != nil {
		t.Fatal(err)
	}
	d := snap.Decide(policy.NewScope([]string{testFQN}), policy.Request{Method: "POST", Host: mcpHost, Path: "/mcp"})
	if d.Inspect == nil {
		t.Fatalf("no inspection: %+v", d)
	}
	return d.Inspect
}

// TestSSEFilter rewrites only the event answering the tools/list request,
// whatever its framing (multi-line data, CRLF, other fields), and passes
// every other event byte for byte.
func TestSSEFilter(t *testing.T) {
	mx := &mcpExchange{in: mcpTestInspection(t), listIDs: [][]byte{[]byte(`"L1"`)}}
	stream := ": keepalive\r\n\r\n" +
		"event: message\nid: 1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"data\":\"read_secrets\"}}\n\n" +
		"event: message\r\nid: 2\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"L1\",\r\ndata: \"result\":{\"tools\":[{\"name\":\"echo\"},{\"name\":\"read_secrets\"},{\"name\":\"search_x\"}],\"nextCursor\":\"c2\"}}\r\n\r\n" +
		"data: {\"jsonrpc\":\"2.0\",\"id\":\"L2\",\"result\":{\"tools\":[{\"name\":\"read_secrets\"}]}}\n" // no final blank line
	f := &sseFilter{src: io.NopCloser(nil), br: newBufReader(stream), mx: mx}
	out, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	want := ": keepalive\r\n\r\n" +
		"event: message\nid: 1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"data\":\"read_secrets\"}}\n\n" +
		"event: message\r\nid: 2\r\ndata: {\"id\":\"L1\",\"jsonrpc\":\"2.0\",\"result\":{\"nextCursor\":\"c2\",\"tools\":[{\"name\":\"echo\"},{\"name\":\"search_x\"}]}}\n\r\n" +
		"data: {\"jsonrpc\":\"2.0\",\"id\":\"L2\",\"result\":{\"tools\":[{\"name\":\"read_secrets\"}]}}\n"
	if got != want {
		t.Fatalf("filtered stream:\n%q\nwant:\n%q", got, want)
	}
}

func TestFilterJSONBatch(t *testing.T) {
	mx := &mcpExchange{in: mcpTestInspection(t), listIDs: [][]byte{[]byte(`3`)}}
	in := `[{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"read_secrets"}]}},{"jsonrpc":"2.0","id": 3,"result":{"tools":[{"name":"read_secrets"},{"name":"create_issue"}]}}]`
	got := string(mx.filterJSON([]byte(in)))
	if !strings.Contains(got, `"id":2,"result":{"tools":[{"name":"read_secrets"}]}`) || strings.Count(got, "read_secrets") != 1 || !strings.Contains(got, "create_issue") {
		t.Fatalf("filterJSON = %s", got)
	}
}

func newBufReader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }
