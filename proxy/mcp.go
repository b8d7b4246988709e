package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// This file holds the checks of a Streamable HTTP MCP endpoint (an
// operation with an mcp rule): each JSON-RPC message the client POSTs is
// decided by policy; a refused tools/call is answered by the proxy with a
// JSON-RPC error and never sent; a tool a person must approve is held; and
// the answers to tools/list, JSON or SSE, are filtered so the agent sees
// only the tools it may call. Both framings are served: 2025-11-25
// (Mcp-Session-Id, GET streams, which are plain operations) and
// 2026-07-28 (POST only, Mcp-Method and Mcp-Name headers that must agree
// with the body).

// Header names of the MCP framings.
const (
	headerMCPMethod = "Mcp-Method"
	headerMCPName   = "Mcp-Name"
)

// maxFilteredAnswer bounds a JSON tools/list answer the proxy rewrites, and
// one SSE event of an answer it filters.
const maxFilteredAnswer = 16 << 20

// mcpExchange is what an allowed MCP request needs to filter its answer:
// the ids of its tools/list requests.
type mcpExchange struct {
	in      *policy.Inspection
	listIDs [][]byte // compact JSON ids
}

// inspectMCP decides the JSON-RPC messages of an MCP POST.
func (s *Server) inspectMCP(x *exchange, in *policy.Inspection, data []byte) (*policy.Match, inspected, *decision) {
	var body inspected
	r := x.r
	msgs, batch, err := policy.ParseMCPBody(data)
	if err != nil {
		return nil, body, rpcRefusal(in, http.StatusBadRequest, nil, false, err)
	}
	body.fields = mcpAuditFields(msgs)
	mh, hasM := r.Header[headerMCPMethod]
	nh, hasN := r.Header[headerMCPName]
	if len(mh) > 1 || len(nh) > 1 {
		return nil, body, rpcRefusal(in, http.StatusBadRequest, msgs, batch, &policy.MCPError{Code: policy.JSONRPCInvalidRequest,
			Message: "Mcp-Method and Mcp-Name may each be sent once"})
	}
	if err := policy.CheckMCPHeaders(msgs, batch, first(mh), first(nh), hasM, hasN); err != nil {
		return nil, body, rpcRefusal(in, http.StatusBadRequest, msgs, batch, err)
	}
	d := in.DecideMCP(msgs)
	if len(d.Refused) > 0 {
		return nil, body, mcpRefusal(in, msgs, batch, d.Refused)
	}
	body.approval = d.Approval
	var ids [][]byte
	for _, m := range msgs {
		if m.Kind == policy.MCPRequest && m.Method == "tools/list" {
			ids = append(ids, compactJSON(m.ID))
		}
	}
	if len(ids) > 0 {
		// The transport passes Accept-Encoding through; without it the
		// answer comes uncompressed, so the proxy can rewrite it.
		r.Header.Del("Accept-Encoding")
		x.mcp = &mcpExchange{in: in, listIDs: ids}
	}
	return d.Match, body, nil
}

func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

func compactJSON(raw []byte) []byte {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw
	}
	return b.Bytes()
}

// Audit field names of an MCP request.
const (
	auditMCPMethod = "mcp.method"
	auditMCPTool   = "mcp.tool"
)

// mcpAuditFields records the methods of the messages and the tools they
// call, in order, ";"-separated; never arguments.
func mcpAuditFields(msgs []policy.MCPMessage) map[string]string {
	var methods, tools []string
	for _, m := range msgs {
		switch {
		case m.Kind == policy.MCPResponse:
			methods = append(methods, "response")
		default:
			methods = append(methods, m.Method)
		}
		if m.Method == "tools/call" {
			tools = append(tools, m.Name)
		}
	}
	out := map[string]string{auditMCPMethod: strings.Join(methods, ";")}
	if len(tools) > 0 {
		out[auditMCPTool] = strings.Join(tools, ";")
	}
	return out
}

// rpcError is a JSON-RPC 2.0 error response.
type rpcError struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   rpcErrorBody    `json:"error"`
}

type rpcErrorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func newRPCError(id json.RawMessage, e *policy.MCPError) rpcError {
	if id == nil {
		id = json.RawMessage("null")
	}
	return rpcError{JSONRPC: "2.0", ID: id, Error: rpcErrorBody{Code: e.Code, Message: e.Message}}
}

// rpcRefusal refuses the whole body with one JSON-RPC error (for the
// first request's id, or null).
func rpcRefusal(in *policy.Inspection, status int, msgs []policy.MCPMessage, batch bool, err error) *decision {
	var me *policy.MCPError
	if !errors.As(err, &me) {
		me = &policy.MCPError{Code: policy.JSONRPCInvalidRequest, Message: err.Error()}
	}
	var id json.RawMessage
	for _, m := range msgs {
		if m.Kind == policy.MCPRequest {
			id = m.ID
			break
		}
	}
	b, _ := json.Marshal(newRPCError(id, me))
	d := inspectRefusal(in, status, contract.CodeMCPNotAllowed, me.Message)
	d.rpc = b
	return d
}

// mcpRefusal answers a body with refused messages: every request gets an
// error, the refused ones saying why, the others that they were not sent
// with it. A body of notifications alone is refused with the proxy's JSON
// error.
func mcpRefusal(in *policy.Inspection, msgs []policy.MCPMessage, batch bool, refused map[int]*policy.MCPError) *decision {
	var errs []rpcError
	var why []string
	for i, m := range msgs {
		e := refused[i]
		if e != nil {
			why = append(why, e.Message)
		}
		if m.Kind != policy.MCPRequest {
			continue
		}
		if e == nil {
			e = &policy.MCPError{Code: policy.JSONRPCInvalidRequest, Message: "not sent: another message of this batch was refused; resend it on its own"}
		}
		errs = append(errs, newRPCError(m.ID, e))
	}
	d := inspectRefusal(in, http.StatusForbidden, contract.CodeMCPNotAllowed, strings.Join(why, "; "))
	switch {
	case len(errs) == 0:
		return d
	case batch:
		d.rpc, _ = json.Marshal(errs)
	default:
		d.rpc, _ = json.Marshal(errs[0])
	}
	d.status = http.StatusOK
	return d
}

// denyRPC answers a refused MCP request with its JSON-RPC error body and
// records the refusal as deny does.
func (s *Server) denyRPC(w http.ResponseWriter, x *exchange, status int, d errorDetail, body []byte) {
	id := audit.NewID()
	h := w.Header()
	h.Set("Content-Type", contentTypeJSON)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h.Set(contract.HeaderDecision, contract.DecisionDenied)
	h.Set(contract.HeaderAuditID, id)
	w.WriteHeader(status)
	_, _ = w.Write(body)
	x.ev.Event = audit.EventDenied
	x.ev.Decision = contract.DecisionDenied
	x.ev.Reason = d.Code.String()
	x.ev.Status = status
	x.ev.AuditID = id
	s.record(x, zapcore.WarnLevel, "request denied")
	s.metrics.decision(false, d.Code.String())
}

// filterMCPAnswer rewrites the tools/list answers of resp, JSON or SSE, to
// the tools the session may call.
func (s *Server) filterMCPAnswer(x *exchange, resp *http.Response) {
	mx := x.mcp
	if mx == nil || resp.StatusCode != http.StatusOK {
		return
	}
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		// Asked for without Accept-Encoding: an encoded answer cannot be
		// filtered, so it is not passed on.
		s.log.Warn("refusing an encoded tools/list answer", zap.String("host", x.t.target), zap.String("content_encoding", ce))
		resp.Body.Close()
		resp.Body = io.NopCloser(strings.NewReader(""))
		resp.StatusCode = http.StatusBadGateway
		resp.Header = http.Header{}
		resp.ContentLength = 0
		return
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch mt {
	case "application/json":
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxFilteredAnswer+1))
		resp.Body.Close()
		var out []byte
		if err != nil || len(data) > maxFilteredAnswer {
			// Never pass an answer unfiltered: the client gets an error
			// for its (first) tools/list request instead.
			out, _ = json.Marshal(newRPCError(mx.listIDs[0], &policy.MCPError{Code: -32603,
				Message: fmt.Sprintf("the tools/list answer could not be read whole (at most %d MiB) for the proxy to filter it", maxFilteredAnswer>>20)}))
		} else {
			out = mx.filterJSON(data)
		}
		resp.Body = io.NopCloser(bytes.NewReader(out))
		resp.ContentLength = int64(len(out))
		resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	case "text/event-stream":
		resp.Body = &sseFilter{src: resp.Body, br: bufio.NewReaderSize(resp.Body, 4096), mx: mx}
		resp.ContentLength = -1
		resp.Header.Del("Content-Length")
	}
}

// filterJSON filters a JSON answer: one message or a batch of them.
func (mx *mcpExchange) filterJSON(data []byte) []byte {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var elems []json.RawMessage
		if json.Unmarshal(trimmed, &elems) != nil {
			return data
		}
		changed := false
		for i, el := range elems {
			if out, ok := mx.filterMessage(el); ok {
				elems[i], changed = out, true
			}
		}
		if !changed {
			return data
		}
		out, _ := json.Marshal(elems)
		return out
	}
	if out, ok := mx.filterMessage(trimmed); ok {
		return out
	}
	return data
}

// filterMessage rewrites one JSON-RPC response to a tools/list request of
// the exchange; ok is false when it is not one.
func (mx *mcpExchange) filterMessage(raw []byte) ([]byte, bool) {
	var msg map[string]json.RawMessage
	if json.Unmarshal(raw, &msg) != nil {
		return nil, false
	}
	id, hasID := msg["id"]
	res, hasResult := msg["result"]
	if !hasID || !hasResult || !mx.isList(id) {
		return nil, false
	}
	var result map[string]json.RawMessage
	if json.Unmarshal(res, &result) != nil {
		return nil, false
	}
	var tools []json.RawMessage
	if json.Unmarshal(result["tools"], &tools) != nil {
		return nil, false
	}
	kept := make([]json.RawMessage, 0, len(tools))
	for _, t := range tools {
		var named struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(t, &named) == nil && mx.in.MCPToolVisible(named.Name) {
			kept = append(kept, t)
		}
	}
	result["tools"], _ = json.Marshal(kept)
	msg["result"], _ = json.Marshal(result)
	out, err := json.Marshal(msg)
	if err != nil {
		return nil, false
	}
	return out, true
}

func (mx *mcpExchange) isList(id json.RawMessage) bool {
	c := compactJSON(id)
	for _, l := range mx.listIDs {
		if bytes.Equal(l, c) {
			return true
		}
	}
	return false
}

// sseFilter passes a text/event-stream through event by event, rewriting
// the data of events that answer the exchange's tools/list requests. An
// event is flushed as soon as its blank line arrives, so streaming is kept.
type sseFilter struct {
	src io.Closer
	br  *bufio.Reader
	mx  *mcpExchange
	out bytes.Buffer
	err error
}

func (f *sseFilter) Close() error { return f.src.Close() }

func (f *sseFilter) Read(p []byte) (int, error) {
	for f.out.Len() == 0 && f.err == nil {
		f.err = f.nextEvent()
	}
	if f.out.Len() > 0 {
		return f.out.Read(p)
	}
	return 0, f.err
}

// nextEvent reads one event (up to its blank line) into out, filtered.
func (f *sseFilter) nextEvent() error {
	var lines []string
	size := 0
	for {
		line, err := f.br.ReadString('\n')
		if line != "" {
			lines = append(lines, line)
			size += len(line)
		}
		if size > maxFilteredAnswer {
			return fmt.Errorf("an MCP event is larger than %d MiB", maxFilteredAnswer>>20)
		}
		if err != nil {
			f.emit(lines)
			return err
		}
		if strings.TrimRight(line, "\r\n") == "" {
			f.emit(lines)
			return nil
		}
	}
}

// emit writes one event, its data rewritten when it answers tools/list.
func (f *sseFilter) emit(lines []string) {
	var data []string
	for _, l := range lines {
		if v, ok := strings.CutPrefix(l, "data:"); ok {
			data = append(data, strings.TrimPrefix(strings.TrimRight(v, "\r\n"), " "))
		}
	}
	if len(data) > 0 {
		if out, ok := f.mx.filterMessage([]byte(strings.Join(data, "\n"))); ok {
			wrote := false
			for _, l := range lines {
				if strings.HasPrefix(l, "data:") {
					if !wrote {
						f.out.WriteString("data: ")
						f.out.Write(out)
						f.out.WriteString("\n")
						wrote = true
					}
					continue
				}
				f.out.WriteString(l)
			}
			return
		}
	}
	for _, l := range lines {
		f.out.WriteString(l)
	}
}

// isEventStream reports whether the header announces text/event-stream.
func isEventStream(h http.Header) bool {
	ct := h.Get("Content-Type")
	return len(ct) >= len("text/event-stream") && strings.EqualFold(ct[:len("text/event-stream")], "text/event-stream")
}
