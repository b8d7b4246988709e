package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// This file reads the JSON-RPC messages a client POSTs to a Streamable HTTP
// MCP endpoint (one message, or a batch) and decides each against the mcp
// rules of an Inspection. It is pure: the proxy reads the bounded body,
// answers refused requests with JSON-RPC errors and filters tools/list
// answers.

// MCPMessageKind says what a JSON-RPC message is.
type MCPMessageKind uint8

// Message kinds. The zero value is not a message.
const (
	MCPInvalid MCPMessageKind = iota
	MCPRequest
	MCPNotification
	MCPResponse
)

// MCPMessage is one JSON-RPC message of a request body: what the policy
// needs of it. Arguments are never read.
type MCPMessage struct {
	Kind MCPMessageKind
	// ID is the request's id as sent (raw JSON); nil for a notification.
	ID json.RawMessage
	// Method is the JSON-RPC method; "" for a response.
	Method string
	// Name is params.name of tools/call and prompts/get, or params.uri of
	// resources/read, resources/subscribe and resources/unsubscribe; ""
	// otherwise.
	Name string
}

// MCPError is a refused MCP message body or header: Code is the JSON-RPC
// error code the proxy answers with, Message says what and how to fix it.
type MCPError struct {
	Code    int
	Message string
}

func (e *MCPError) Error() string { return e.Message }

// JSON-RPC error codes the proxy answers with.
const (
	JSONRPCParseError     = -32700
	JSONRPCInvalidRequest = -32600
	JSONRPCMethodNotFound = -32601
	JSONRPCInvalidParams  = -32602
)

// mcpNameMethods are the methods whose target Mcp-Name mirrors, and the
// params key it comes from.
var mcpNameMethods = map[string]string{
	"tools/call": "name", "prompts/get": "name",
	"resources/read": "uri", "resources/subscribe": "uri", "resources/unsubscribe": "uri",
}

// ParseMCPBody reads a POST body of JSON-RPC 2.0: one message, or an array
// of them (batch true). Keys are matched exactly; a repeated key, or a
// variant in case of a known one, is refused, as upstream readers disagree
// on which wins.
func ParseMCPBody(body []byte) (msgs []MCPMessage, batch bool, err error) {
	if !utf8.Valid(body) {
		return nil, false, &MCPError{JSONRPCParseError, "the MCP request body is not valid UTF-8"}
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var elems []json.RawMessage
		if err := json.Unmarshal(body, &elems); err != nil {
			return nil, true, &MCPError{JSONRPCParseError, "the JSON-RPC batch is not a JSON array: " + jsonProblem(err)}
		}
		if len(elems) == 0 {
			return nil, true, &MCPError{JSONRPCInvalidRequest, "the JSON-RPC batch is empty"}
		}
		for i, el := range elems {
			m, err := parseMCPMessage(el)
			if err != nil {
				err.Message = fmt.Sprintf("batch element %d: %s", i, err.Message)
				return nil, true, err
			}
			msgs = append(msgs, m)
		}
		return msgs, true, nil
	}
	m, merr := parseMCPMessage(body)
	if merr != nil {
		return nil, false, merr
	}
	return []MCPMessage{m}, false, nil
}

var mcpKeys = []string{"jsonrpc", "id", "method", "params", "result", "error"}

// readStrictObject reads one JSON object's members in order, refusing a
// repeated key and a case variant of one of known.
func readStrictObject(raw []byte, known []string) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("it is not a JSON object")
	}
	out := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("it repeats the key %q", key)
		}
		for _, k := range known {
			if key != k && strings.EqualFold(key, k) {
				return nil, fmt.Errorf("it has the key %q; spell it %q", key, k)
			}
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out[key] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("it has data after the object")
	}
	return out, nil
}

func isJSONNull(v json.RawMessage) bool { return v == nil || bytes.Equal(v, []byte("null")) }

// parseMCPMessage reads one JSON-RPC message.
func parseMCPMessage(raw []byte) (MCPMessage, *MCPError) {
	var m MCPMessage
	obj, err := readStrictObject(raw, mcpKeys)
	if err != nil {
		return m, &MCPError{JSONRPCInvalidRequest, "the JSON-RPC message is refused: " + jsonProblem(err)}
	}
	var version string
	if err := json.Unmarshal(obj["jsonrpc"], &version); err != nil || version != "2.0" {
		return m, &MCPError{JSONRPCInvalidRequest, `the JSON-RPC message needs "jsonrpc": "2.0"`}
	}
	if id, ok := obj["id"]; ok {
		var v any
		_ = json.Unmarshal(id, &v)
		switch v.(type) {
		case string, float64:
		default:
			if !isJSONNull(id) {
				return m, &MCPError{JSONRPCInvalidRequest, "the JSON-RPC id must be a string or a number"}
			}
		}
		m.ID = id
	}
	rawMethod, hasMethod := obj["method"]
	_, hasResult := obj["result"]
	_, hasError := obj["error"]
	switch {
	case hasMethod && (hasResult || hasError):
		return m, &MCPError{JSONRPCInvalidRequest, "a JSON-RPC message is a request or a response, not both"}
	case !hasMethod && (hasResult || hasError):
		if m.ID == nil {
			return m, &MCPError{JSONRPCInvalidRequest, "a JSON-RPC response needs an id"}
		}
		m.Kind = MCPResponse
		return m, nil
	case !hasMethod:
		return m, &MCPError{JSONRPCInvalidRequest, "the JSON-RPC message has no method"}
	}
	if err := json.Unmarshal(rawMethod, &m.Method); err != nil || m.Method == "" {
		return m, &MCPError{JSONRPCInvalidRequest, "the JSON-RPC method must be a non-empty string"}
	}
	m.Kind = MCPRequest
	if m.ID == nil {
		m.Kind = MCPNotification
	}
	params := obj["params"]
	if key, named := mcpNameMethods[m.Method]; named {
		if isJSONNull(params) {
			return m, &MCPError{JSONRPCInvalidParams, fmt.Sprintf("%s needs params.%s", m.Method, key)}
		}
		p, err := readStrictObject(params, []string{key})
		if err != nil {
			return m, &MCPError{JSONRPCInvalidParams, fmt.Sprintf("the params of %s are refused: %s", m.Method, jsonProblem(err))}
		}
		if err := json.Unmarshal(p[key], &m.Name); err != nil || m.Name == "" {
			return m, &MCPError{JSONRPCInvalidParams, fmt.Sprintf("%s needs params.%s as a non-empty string", m.Method, key)}
		}
	}
	return m, nil
}

// CheckMCPHeaders checks the Mcp-Method and Mcp-Name headers of the
// 2026-07-28 framing against the body: when sent, they must agree with the
// one message it holds. Empty header values mean not sent.
func CheckMCPHeaders(msgs []MCPMessage, batch bool, method, name string, hasMethod, hasName bool) *MCPError {
	if !hasMethod && !hasName {
		return nil
	}
	if batch || len(msgs) != 1 {
		return &MCPError{JSONRPCInvalidRequest, "Mcp-Method and Mcp-Name go with one JSON-RPC message, not a batch"}
	}
	m := msgs[0]
	if !hasMethod || method != m.Method {
		return &MCPError{JSONRPCInvalidRequest, fmt.Sprintf("the Mcp-Method header %q does not agree with the body's method %q; send the same method in both", printable(method), printable(m.Method))}
	}
	_, named := mcpNameMethods[m.Method]
	switch {
	case named && (!hasName || name != m.Name):
		return &MCPError{JSONRPCInvalidRequest, fmt.Sprintf("the Mcp-Name header %q does not agree with the body's %q; send the same name in both", printable(name), printable(m.Name))}
	case !named && hasName:
		return &MCPError{JSONRPCInvalidRequest, fmt.Sprintf("the Mcp-Name header is set, but %s names nothing; drop the header", m.Method)}
	}
	return nil
}

// MCPDecision is the answer for the messages of one MCP request body.
type MCPDecision struct {
	// Match is the operation whose credential and audit apply.
	Match *Match
	// Approval reports whether a tool call needs a person's approval.
	Approval bool
	// Refused holds, per message index, why it is refused; empty when
	// everything passes.
	Refused map[int]*MCPError
	// Plan is the matched operation's mcp rule, for filtering tools/list.
	Plan *MCPPlan
}

// DecideMCP checks each message: tools/call of a tool in the operation's
// tools (or approval_tools, which sets Approval) passes; so do initialize,
// ping, notifications, responses, tools/list, completion, logging and
// tasks, and resources/* and prompts/* unless the rule switches them off.
// Anything else is refused.
func (in *Inspection) DecideMCP(msgs []MCPMessage) MCPDecision {
	var d MCPDecision
	for _, m := range in.cands {
		if m.Compiled.mcp != nil {
			d.Match, d.Plan = m, m.Compiled.mcp
			break
		}
	}
	if d.Match == nil {
		d.Refused = map[int]*MCPError{0: {JSONRPCInvalidRequest, "no MCP operation matched"}}
		return d
	}
	for i, msg := range msgs {
		if err := in.checkMCP(&d, msg); err != nil {
			if d.Refused == nil {
				d.Refused = map[int]*MCPError{}
			}
			d.Refused[i] = err
		}
	}
	return d
}

func (in *Inspection) checkMCP(d *MCPDecision, msg MCPMessage) *MCPError {
	if msg.Kind == MCPResponse {
		return nil
	}
	p := d.Plan
	method := msg.Method
	switch {
	case method == "tools/call":
		for _, c := range in.cands {
			if cp := c.Compiled.mcp; cp != nil {
				if ok, approval := cp.Tool(msg.Name); ok {
					if c != d.Match && (c.ConnectorFQN != d.Match.ConnectorFQN || c.Compiled.op.Credential != d.Match.Compiled.op.Credential) {
						d.Match, d.Plan = c, cp
					}
					d.Approval = d.Approval || approval
					return nil
				}
			}
		}
		return &MCPError{JSONRPCInvalidParams, fmt.Sprintf("tool %q is not allowed by this session's policy, so the proxy did not send the call; tools allowed here: %s",
			printable(msg.Name), in.mcpTools())}
	case method == "initialize", method == "ping", method == "tools/list", method == "logging/setLevel",
		method == "completion/complete", method == "server/discover", method == "subscriptions/listen",
		strings.HasPrefix(method, "notifications/"), strings.HasPrefix(method, "tasks/"):
		return nil
	case strings.HasPrefix(method, "resources/"):
		if p.resources {
			return nil
		}
		return &MCPError{JSONRPCMethodNotFound, fmt.Sprintf("%s is switched off for this MCP endpoint (\"resources\": false)", method)}
	case strings.HasPrefix(method, "prompts/"):
		if p.prompts {
			return nil
		}
		return &MCPError{JSONRPCMethodNotFound, fmt.Sprintf("%s is switched off for this MCP endpoint (\"prompts\": false)", method)}
	}
	return &MCPError{JSONRPCMethodNotFound, fmt.Sprintf("method %q is not one the proxy lets through to an MCP endpoint", printable(method))}
}

// mcpTools lists the tools of every candidate for a refusal.
func (in *Inspection) mcpTools() string {
	var out []string
	for _, c := range in.cands {
		if p := c.Compiled.mcp; p != nil {
			out = append(out, p.tools...)
			for _, a := range p.approval {
				out = append(out, a+" (with approval)")
			}
		}
	}
	return capList(out)
}

// MCPToolVisible reports whether a tools/list answer may show the tool:
// whether some operation of the inspection lets tools/call name it.
func (in *Inspection) MCPToolVisible(name string) bool {
	for _, c := range in.cands {
		if p := c.Compiled.mcp; p != nil {
			if ok, _ := p.Tool(name); ok {
				return true
			}
		}
	}
	return false
}
