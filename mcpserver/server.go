package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aileron-dev/aileron-proxy/internal/contract"
)

// Protocol names shared with the run endpoint; they are the shims' (see
// docs/shims.md), repeated here so this package needs neither shims nor api.
const (
	headerOutput         = "X-Aileron-Output"
	outputBody           = "body"
	headerUpstreamStatus = "X-Aileron-Upstream-Status"
	headerAuditID        = "X-Aileron-Audit-Id"
	headerSessionID      = "X-Aileron-Session-Id"
	runPath              = "/connector-operations/run"
	actionPath           = "/actions/%s/run"
)

// Defaults of Options.
const (
	DefaultMaxText          = 64 << 10
	DefaultProgressInterval = 5 * time.Second
	// ListTTL is the ttlMs of tools/list results where the protocol
	// version has it: clients list again this soon, so a changed catalog
	// shows quickly without a notification.
	ListTTL = 10 * time.Second
)

// Options configure a Server.
type Options struct {
	// APIURL is the control API's base URL including /v1, as
	// AILERON_API_URL holds it.
	APIURL string
	// HTTP is the client of the run endpoint; nil means a client without
	// a timeout (a held call waits for a person).
	HTTP *http.Client
	// Token returns the session's API token to authenticate a call with.
	Token func(req *mcp.CallToolRequest) string
	// SessionID is sent as X-Aileron-Session-Id when set.
	SessionID string
	// Version is the server's version in the initialize answer.
	Version string
	// MaxText caps the text of a non-JSON body; 0 means DefaultMaxText.
	MaxText int
	// Held, when set, describes the session's requests now held for a
	// person, one line each (approval.Pending.HeldLine); a progress
	// notification of a waiting call carries it, so the agent's user sees
	// what is being asked.
	Held func() []string
	// ProgressInterval is the period of progress notifications while a
	// call waits; 0 means DefaultProgressInterval.
	ProgressInterval time.Duration
}

// Server serves one session's catalog as MCP tools.
type Server struct {
	opts Options
	srv  *mcp.Server

	mu      sync.Mutex
	current map[string]string // tool name -> fingerprint
}

// New returns a server with no tools; call Sync to publish a catalog.
func New(opts Options) *Server {
	if opts.HTTP == nil {
		opts.HTTP = &http.Client{}
	}
	if opts.MaxText <= 0 {
		opts.MaxText = DefaultMaxText
	}
	if opts.ProgressInterval <= 0 {
		opts.ProgressInterval = DefaultProgressInterval
	}
	s := &Server{opts: opts, current: map[string]string{}}
	s.srv = mcp.NewServer(&mcp.Implementation{Name: "aileron-proxy", Title: "Aileron connector operations", Version: opts.Version}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
		Instructions: "Tools of the Aileron session: each calls one connector operation or action through the Aileron proxy, " +
			"which injects credentials, applies policy and may hold a call until a person approves it.",
		SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) {
			c.TTLMs = int(ListTTL / time.Millisecond)
		},
	})
	return s
}

// MCP returns the SDK server, for a transport to run.
func (s *Server) MCP() *mcp.Server { return s.srv }

// Sync publishes entries as the server's tools: tools no longer in entries
// are removed and new or changed ones added, and the SDK tells connected
// clients the list changed. It reports whether anything changed.
func (s *Server) Sync(entries []*Entry) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[string]string, len(entries))
	var add []*Entry
	for _, e := range entries {
		fp := fingerprint(e)
		next[e.Name] = fp
		if s.current[e.Name] != fp {
			add = append(add, e)
		}
	}
	var remove []string
	for name := range s.current {
		if _, ok := next[name]; !ok {
			remove = append(remove, name)
		}
	}
	if len(remove) > 0 {
		s.srv.RemoveTools(remove...)
	}
	for _, e := range add {
		s.srv.AddTool(e.Def, s.handler(e))
	}
	s.current = next
	return len(add) > 0 || len(remove) > 0
}

func fingerprint(e *Entry) string {
	b, _ := json.Marshal(e.Def)
	return identity(e) + "\x00" + string(b)
}

// invalidParams is the JSON-RPC error of a bad argument.
func invalidParams(format string, args ...any) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(format, args...)}
}

// handler returns the tools/call handler of e.
func (s *Server) handler(e *Entry) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args := map[string]any{}
		if raw := req.Params.Arguments; len(raw) > 0 && string(raw) != "null" {
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.UseNumber()
			if err := dec.Decode(&args); err != nil {
				return nil, invalidParams("the arguments of tool %q must be a JSON object of its inputs", e.Name)
			}
		}
		var body any
		path := runPath
		if e.Action != "" {
			path = fmt.Sprintf(actionPath, url.PathEscape(e.Action))
			body = map[string]any{"args": args}
		} else {
			body = map[string]any{"connector_fqn": e.ConnectorFQN, "tool": e.Tool, "operation": e.Operation, "args": args}
		}
		stop := s.progress(ctx, req)
		reply, err := s.post(ctx, req, path, body)
		stop()
		if err != nil {
			return nil, err
		}
		return s.result(e, reply)
	}
}

// progress sends progress notifications while a call waits, when the
// client asked for them with a progress token; the returned func stops it.
func (s *Server) progress(ctx context.Context, req *mcp.CallToolRequest) func() {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return func() {}
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(s.opts.ProgressInterval)
		defer t.Stop()
		start := time.Now()
		for n := 1; ; n++ {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			msg := fmt.Sprintf("waited %s for the answer; the call may be held until a person approves it",
				time.Since(start).Round(time.Second))
			if s.opts.Held != nil {
				if held := s.opts.Held(); len(held) > 0 {
					msg = fmt.Sprintf("waited %s for a person to approve; held: %s",
						time.Since(start).Round(time.Second), strings.Join(held, "; "))
				}
			}
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token,
				Progress:      float64(n),
				Message:       msg,
			})
		}
	}()
	return func() { close(done); <-stopped }
}

// reply is what the run endpoint answered.
type reply struct {
	status         int
	upstreamStatus int
	contentType    string
	auditID        string
	body           []byte
}

func (s *Server) post(ctx context.Context, req *mcp.CallToolRequest, path string, body any) (*reply, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encoding the call: %w", err)
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(s.opts.APIURL, "/")+path, bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("building the call: %w", err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set(headerOutput, outputBody)
	if s.opts.Token != nil {
		if tok := s.opts.Token(req); tok != "" {
			hr.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	if s.opts.SessionID != "" {
		hr.Header.Set(headerSessionID, s.opts.SessionID)
	}
	resp, err := s.opts.HTTP.Do(hr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("calling the Aileron control API at %s: %w", s.opts.APIURL, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("reading the control API's answer: %w", err)
	}
	r := &reply{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), auditID: resp.Header.Get(headerAuditID), body: raw}
	r.upstreamStatus, _ = strconv.Atoi(resp.Header.Get(headerUpstreamStatus))
	return r, nil
}

// apiError is the control API's error body.
type apiError struct {
	Error *struct {
		Code     contract.Code `json:"code"`
		Message  string        `json:"message"`
		Problems []struct {
			Arg     string `json:"arg"`
			Message string `json:"message"`
		} `json:"problems"`
	} `json:"error"`
}

// result turns the run endpoint's answer into a tool result.
func (s *Server) result(e *Entry, r *reply) (*mcp.CallToolResult, error) {
	if r.status != http.StatusOK || r.upstreamStatus == 0 {
		var ae apiError
		if json.Unmarshal(r.body, &ae) != nil || ae.Error == nil || ae.Error.Code == "" {
			return errorResult(fmt.Sprintf("the Aileron control API answered HTTP %d without an error body", r.status), "", nil), nil
		}
		code, msg := ae.Error.Code, ae.Error.Message
		switch code {
		case contract.CodeInvalidArgs:
			var parts []string
			for _, p := range ae.Error.Problems {
				parts = append(parts, fmt.Sprintf("argument %q: %s", p.Arg, p.Message))
			}
			if len(parts) == 0 {
				parts = append(parts, msg)
			}
			return nil, invalidParams("invalid arguments for tool %q: %s", e.Name, strings.Join(parts, "; "))
		case contract.CodeApprovalDenied:
			msg = "A person denied this call. Do not retry it without asking the user first. (" + msg + ")"
		case contract.CodeApprovalTimeout:
			msg = "No person approved this call in time, so it was not sent. Do not retry it without asking the user first. (" + msg + ")"
		}
		return errorResult(fmt.Sprintf("refused by Aileron (%s, HTTP %d): %s", code, r.status, msg), code, ae.Error), nil
	}
	res := &mcp.CallToolResult{IsError: r.upstreamStatus >= 400}
	meta := map[string]any{"upstream_status": r.upstreamStatus}
	if r.auditID != "" {
		meta["audit_id"] = r.auditID
	}
	res.Meta = mcp.Meta{"aileron": meta}
	head := fmt.Sprintf("HTTP %d", r.upstreamStatus)
	if isJSON(r.contentType) {
		var v any
		dec := json.NewDecoder(bytes.NewReader(r.body))
		dec.UseNumber()
		if dec.Decode(&v) == nil && dec.More() == false {
			if _, ok := v.(map[string]any); ok {
				res.StructuredContent = json.RawMessage(r.body)
			}
			res.Content = []mcp.Content{&mcp.TextContent{Text: s.text(r.body)}}
			if res.IsError {
				res.Content = append([]mcp.Content{&mcp.TextContent{Text: head + " from the upstream"}}, res.Content...)
			}
			return res, nil
		}
	}
	switch {
	case len(r.body) == 0:
		res.Content = []mcp.Content{&mcp.TextContent{Text: head + " with an empty body"}}
	case !isText(r.contentType, r.body):
		res.Content = []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%s: a binary body of %d bytes (%s), not shown", head, len(r.body), orUnknown(r.contentType))}}
	default:
		text := s.text(r.body)
		if res.IsError {
			text = head + " from the upstream:\n" + text
		}
		res.Content = []mcp.Content{&mcp.TextContent{Text: text}}
	}
	return res, nil
}

// text returns body as text, cut at MaxText bytes (on a rune boundary)
// with a note saying how much was left out.
func (s *Server) text(body []byte) string {
	if len(body) <= s.opts.MaxText {
		return string(body)
	}
	cut := s.opts.MaxText
	for cut > 0 && !utf8.RuneStart(body[cut]) {
		cut--
	}
	return string(body[:cut]) + fmt.Sprintf("\n[truncated by Aileron: %d of %d bytes shown]", cut, len(body))
}

func errorResult(text string, code contract.Code, detail any) *mcp.CallToolResult {
	res := &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
	if code != "" {
		res.StructuredContent = map[string]any{"error": detail}
	}
	return res
}

func orUnknown(ct string) string {
	if ct == "" {
		return "no content type"
	}
	return ct
}

func mediaType(ct string) string {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.ToLower(strings.TrimSpace(mt))
}

func isJSON(ct string) bool {
	mt := mediaType(ct)
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

func isText(ct string, body []byte) bool {
	mt := mediaType(ct)
	textual := strings.HasPrefix(mt, "text/") || isJSON(mt) || mt == "application/xml" || strings.HasSuffix(mt, "+xml") ||
		mt == "application/x-www-form-urlencoded" || mt == "application/javascript" || mt == "application/yaml"
	if !textual && mt != "" && mt != "application/octet-stream" {
		return false
	}
	return utf8.Valid(body) && !bytes.ContainsRune(body, 0)
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
