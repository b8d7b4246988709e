package proxy

import (
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/credentials"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/internal/preview"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// innerHandler is the one handler of every request inside an intercepted
// tunnel, HTTP/1.1 or HTTP/2.
type innerHandler struct{ s *Server }

// exchange is what one request accumulates for its audit event and log line.
type exchange struct {
	start time.Time
	t     *tunnel
	r     *http.Request
	path  string
	ev    audit.Event
	// learned is set for a request forwarded by learn mode (learn.go).
	learned *learnedExchange
	// mcp filters the answer of an MCP request with tools/list in it
	// (mcp.go); nil for every other request.
	mcp *mcpExchange
	// gitCaps are a held git push's capabilities (gitpush.go).
	gitCaps []string
	// up is forward's upstream request, held here to save an allocation.
	up upstreamRequest
	// auditValue backs the response's X-Aileron-Audit-Id (auditHeader).
	auditValue [1]string
}

// auditHeader is the value of X-Aileron-Audit-Id for the response, backed
// by x: setting it costs the response no slice of its own.
func (x *exchange) auditHeader() []string {
	x.auditValue[0] = x.ev.AuditID
	return x.auditValue[:]
}

func (h innerHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := h.s
	t, _ := r.Context().Value(tunnelKey{}).(*tunnel)
	if t == nil {
		writeError(w, http.StatusInternalServerError, contract.DecisionError, "", errorDetail{Code: contract.CodeInternal, Message: "request outside a tunnel"})
		return
	}
	x := &exchange{start: s.now(), t: t, r: r, path: r.URL.EscapedPath()}
	x.ev = audit.Event{
		SessionID: t.sess.ID, Method: r.Method, Host: t.target, Path: x.path, Source: contract.SourceProxy,
	}
	if fault := framingFault(r); fault != "" {
		s.refuseFraming(w, x, fault)
		return
	}
	ws := isWebSocketRequest(r)
	if ws && r.Method == http.MethodConnect {
		x.ev.Method = http.MethodGet // an HTTP/2 extended CONNECT is the GET of HTTP/1.1 (RFC 8441)
	}

	d := s.decide(x, ws)
	if !d.allow {
		if d.closeConn {
			w.Header().Set("Connection", "close")
		}
		status := d.status
		if status == 0 {
			status = http.StatusForbidden
		}
		if d.rpc != nil {
			s.denyRPC(w, x, status, d.refusal, d.rpc)
			return
		}
		s.deny(w, x, status, d.refusal)
		return
	}
	if !s.auditOK() {
		s.refuseAuditUnavailable(w, x)
		return
	}
	if d.learn {
		s.startLearned(x)
		s.forward(w, x, nil, reasonLearned)
		return
	}
	m := d.match
	op := m.Compiled.Operation()
	inj := d.inj
	reason := string(policy.ReasonAllowed)
	if d.approval {
		outcome := ApprovalDenied
		var pv *preview.Preview
		if s.cfg.Approver != nil {
			var ok bool
			pv, ok = s.gitPushPreview(w, x) // gitpush.go: the pack stays unread
			if !ok {
				return
			}
			if pv == nil {
				held, ok := s.holdBody(w, x) // hold.go: what is approved is what is sent
				if !ok {
					return
				}
				defer held.close()
				pv = s.approvalPreview(x, m, held, d.directive)
			}
			// A client that leaves withdraws its request (serve_h1.go).
			ctx, stopWatch := clientWatch(w, r, pv.GitPush == nil)
			outcome = s.cfg.Approver.Await(ctx, ApprovalRequest{
				SessionID: t.sess.ID, ConnectorFQN: m.ConnectorFQN, Tool: m.Tool, Operation: op.Name,
				Method: r.Method, Host: t.target, Path: x.path, Fields: x.ev.Fields, Preview: pv,
			})
			stopWatch()
		}
		switch outcome {
		case ApprovalApproved:
			reason = reasonApproved
		case ApprovalTimedOut:
			s.denyHeld(w, x, pv, http.StatusForbidden, errorDetail{Code: contract.CodeApprovalTimeout,
				Message: fmt.Sprintf("%s %s of %s needs a person's approval and none came in time; ask them to watch `aileron-proxy approvals list` and retry", m.Tool, op.Name, m.ConnectorFQN)})
			return
		default:
			msg := fmt.Sprintf("%s %s of %s needs a person's approval and it was denied; do not retry without asking", m.Tool, op.Name, m.ConnectorFQN)
			if s.cfg.Approver == nil {
				msg = fmt.Sprintf("%s %s of %s needs a person's approval and this proxy has no approval surface", m.Tool, op.Name, m.ConnectorFQN)
			}
			s.denyHeld(w, x, pv, http.StatusForbidden, errorDetail{Code: contract.CodeApprovalDenied, Message: msg})
			return
		}
	}
	if d.approval && !s.auditOK() { // it may have failed during the wait
		s.refuseAuditUnavailable(w, x)
		return
	}
	if ws {
		s.relayWebSocket(w, x, inj, reason)
		return
	}
	s.forward(w, x, inj, reason)
}

// decision is what the proxy decides about one request inside a tunnel,
// computed once by decide and then acted on by ServeHTTP, as smokescreen
// acts on its ACL decision. Its zero value denies.
type decision struct {
	// allow reports whether the request may go upstream, after the
	// approval when approval is set.
	allow bool
	// approval reports, on allow, that a person must approve the call
	// first: the operation requires it or the control API asks for it.
	approval bool
	// closeConn asks, on deny, to close the connection after the refusal.
	closeConn bool
	// status is, on deny, the HTTP status of the refusal; zero means 403.
	status int
	// refusal is, on deny, what the client is told; its Code is the
	// decision's reason.
	refusal errorDetail
	// match is the matched operation; nil when the request matched none.
	match *policy.Match
	// inj injects that credential; nil when there is none to inject.
	inj *credentials.Injector
	// learn, on allow, forwards the request without credentials as a
	// learned request (learn.go); match is then nil.
	learn bool
	// directive is an action's preview, from the control API; nil for
	// none.
	directive *preview.Directive
	// rpc, on deny, is the JSON-RPC answer of a refused MCP request
	// (mcp.go), sent instead of the proxy's JSON error; nil otherwise.
	rpc []byte
}

// decide makes the decision of the request x, in order: the session has
// not expired, the request names the tunnel's host, the policy allows it as
// an operation of the session, a WebSocket handshake is declared, and the
// operation's credential is configured; the first refusal wins. It fills
// x.ev with what it learns (source, operation, audit fields, credential
// kind), so a refusal is recorded with everything known by then.
func (s *Server) decide(x *exchange, ws bool) decision {
	r, t := x.r, x.t
	if !t.sess.ExpiresAt.IsZero() && !x.start.Before(t.sess.ExpiresAt) {
		return decision{status: http.StatusForbidden, closeConn: true, refusal: errorDetail{Code: contract.CodeSessionExpired,
			Message: fmt.Sprintf("session %s has expired; create a new session", t.sess.ID)}}
	}
	if !t.names(r.Host) || (r.URL.Host != "" && !t.names(r.URL.Host)) {
		named := r.Host
		if r.URL.Host != "" && !t.names(r.URL.Host) {
			named = r.URL.Host
		}
		return decision{status: http.StatusMisdirectedRequest, refusal: errorDetail{Code: contract.CodeMisdirected,
			Message: fmt.Sprintf("this tunnel was opened with CONNECT %s; a request naming %q must use its own CONNECT tunnel", t.target, named)}}
	}
	in := s.internalHeaders(r)
	x.ev.Source = in.source

	var pd policy.Decision
	if snap := s.cfg.Policy(); snap != nil {
		pd = snap.Decide(t.sess.Scope, policy.Request{Method: x.ev.Method, Host: t.target, Path: x.path})
	}
	var body inspected
	if pd.Inspect != nil { // a GraphQL or MCP endpoint: the body decides (inspect.go)
		var refused *decision
		if pd, body, refused = s.inspectBody(x, pd.Inspect); refused != nil {
			return *refused
		}
	}
	if !pd.Allow && isLearnable(pd.Reason) && s.learns(t) {
		if ws {
			return decision{status: http.StatusForbidden, refusal: learnRefusal(x)}
		}
		return decision{allow: true, learn: true}
	}
	if !pd.Allow || pd.Match == nil || pd.Match.Compiled == nil {
		code := contract.Code(pd.Reason)
		if code == "" || pd.Reason == policy.ReasonAllowed {
			code = contract.CodeOperationNotAllowed
		}
		msg := pd.Message
		if msg == "" {
			msg = fmt.Sprintf("%s %s on %s is not an operation of this session's connectors", r.Method, x.path, t.target)
		}
		allowed := pd.AllowedOperations
		if allowed == nil {
			allowed = []string{}
		}
		return decision{status: http.StatusForbidden, refusal: errorDetail{Code: code, Message: msg, AllowedOperations: allowed}}
	}
	d := decision{match: pd.Match, directive: in.preview}
	m := pd.Match
	op := m.Compiled.Operation()
	x.ev.ConnectorFQN, x.ev.Tool, x.ev.Operation = m.ConnectorFQN, m.Tool, op.Name
	x.ev.Fields = auditFields(m, r, in.args)
	mergeFields(x, body.fields)
	if ws && !op.WebSocket {
		d.status, d.refusal = http.StatusForbidden, webSocketNotDeclared(x, m)
		return d
	}
	if op.Credential.HasCredential() {
		x.ev.CredentialKind = string(op.Credential)
		var ok bool
		if d.inj, ok = s.lookupCredential(m.ConnectorFQN, op.Credential); !ok {
			cmd := fmt.Sprintf("aileron-proxy credential set %s --kind %s --from-env VAR (or --from-file PATH, --from-exec 'CMD', --stdin)",
				m.ConnectorFQN, op.Credential)
			d.status, d.refusal = http.StatusForbidden, errorDetail{Code: contract.CodeCredentialNotConfigured, Command: cmd,
				Message: fmt.Sprintf("%s %s matched %s %s of %s, which needs a %s credential that is not configured; ask the operator to run: %s",
					r.Method, x.path, m.Tool, op.Name, m.ConnectorFQN, op.Credential, cmd)}
			return d
		}
	}
	d.allow = true
	d.approval = op.Approval.IsRequired() || in.approval || body.approval
	return d
}

// internalRequest is what the control API, proven by the per-process key,
// asks of a call it sends through the proxy.
type internalRequest struct {
	source string                     // X-Aileron-Source, else SourceProxy
	args   map[string]json.RawMessage // X-Aileron-Audit-Args
	// approval holds the call for a person's approval (X-Aileron-Approval).
	approval bool
	// preview is an action's preview (X-Aileron-Approval-Preview).
	preview *preview.Directive
}

// internalHeaders honours X-Aileron-Source, X-Aileron-Audit-Args and
// X-Aileron-Approval only from the control API, which proves itself with
// the per-process key; the key is checked once.
func (s *Server) internalHeaders(r *http.Request) internalRequest {
	in := internalRequest{source: contract.SourceProxy}
	key := r.Header.Get(contract.HeaderInternal)
	if key == "" || len(s.internalKey) == 0 {
		return in
	}
	if subtle.ConstantTimeCompare([]byte(key), s.internalKey) != 1 {
		s.log.Warn("ignoring X-Aileron-* headers: the internal key does not match", zap.String("host", r.Host))
		return in
	}
	switch v := r.Header.Get(contract.HeaderSource); v {
	case contract.SourceRunEndpoint, contract.SourceSandboxProxy:
		in.source = v
	}
	in.approval = r.Header.Get(contract.HeaderApproval) == contract.ApprovalRequired
	if v := r.Header.Get(contract.HeaderApprovalPreview); v != "" {
		if dir, err := preview.DecodeDirective(v); err == nil {
			in.preview = &dir
		} else {
			s.log.Warn("ignoring X-Aileron-Approval-Preview", zap.Error(err))
		}
	}
	enc := strings.TrimRight(r.Header.Get(contract.HeaderAuditArgs), "=")
	if enc == "" {
		return in
	}
	raw, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		s.log.Warn("ignoring X-Aileron-Audit-Args: not base64url", zap.Error(err))
		return in
	}
	// Decoded into a local: &in.args would move in to the heap on every
	// request, internal or not.
	var args map[string]json.RawMessage
	if err := json.Unmarshal(raw, &args); err != nil {
		s.log.Warn("ignoring X-Aileron-Audit-Args: not a JSON object", zap.Error(err))
		return in
	}
	in.args = args
	return in
}

// auditFields evaluates the matched operation's compiled audit sources:
// path.<name> from the matched template, query.<name> from the query
// (repeated values joined with ","), args.<name> from the run endpoint's
// X-Aileron-Audit-Args. Redacted fields record audit.RedactValue.
func auditFields(m *policy.Match, r *http.Request, args map[string]json.RawMessage) map[string]string {
	sources := m.Compiled.AuditSources()
	if len(sources) == 0 {
		return nil
	}
	fields := make(map[string]string, len(sources))
	var query url.Values
	for _, src := range sources {
		var v string
		var ok bool
		switch src.Kind() {
		case policy.AuditFromPath:
			v, ok = m.PathParams[src.Name()]
		case policy.AuditFromQuery:
			if query == nil {
				query = r.URL.Query()
			}
			var vs []string
			if vs, ok = query[src.Name()]; ok {
				v = strings.Join(vs, ",")
			}
		case policy.AuditFromArgs:
			var raw json.RawMessage
			if raw, ok = args[src.Name()]; ok {
				v = jsonScalar(raw)
			}
		}
		if !ok {
			continue
		}
		if src.IsRedacted() {
			v = audit.RedactValue(v)
		}
		fields[src.Field()] = v
	}
	if len(fields) == 0 {
		return nil
	}
	return fields
}

// jsonScalar renders a JSON value for an audit field: strings unquoted,
// anything else as compact JSON.
func jsonScalar(raw json.RawMessage) string {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s
	}
	return strings.TrimSpace(string(raw))
}

func (s *Server) lookupCredential(fqn string, kind policy.CredentialKind) (*credentials.Injector, bool) {
	if s.cfg.Credentials == nil {
		return nil, false
	}
	src := s.cfg.Credentials()
	if src == nil {
		return nil, false
	}
	inj, ok := src.Lookup(fqn, credentials.Kind(kind))
	return inj, ok && inj != nil
}

// deny writes a refusal and records it.
func (s *Server) deny(w http.ResponseWriter, x *exchange, status int, d errorDetail) {
	id := audit.NewID()
	d.Method, d.Host, d.Path = x.r.Method, x.t.target, x.path
	writeError(w, status, contract.DecisionDenied, id, d)
	x.ev.Event = audit.EventDenied
	x.ev.Decision = contract.DecisionDenied
	x.ev.Reason = d.Code.String()
	x.ev.Status = status
	x.ev.AuditID = id
	s.record(x, zapcore.WarnLevel, "request denied")
	s.metrics.decision(false, d.Code.String())
}

// auditUnavailableDetail is the refusal of work that needs an audit line
// while the audit log cannot be written.
func auditUnavailableDetail() errorDetail {
	return errorDetail{Code: contract.CodeAuditUnavailable,
		Message: "the audit log cannot be written (the disk holding it is full or failing), and the proxy forwards nothing it cannot record; " +
			"the operator must free space under $AILERON_HOME/audit, after which requests go through again without a restart"}
}

// refuseAuditUnavailable answers 503 audit_unavailable to an allowed
// request while the audit log cannot take its line: nothing is forwarded
// or injected. The refusal is not audited, as its line would take the
// space the log keeps for the requests already under way; the decisions
// metric counts it and serve logs the episode once.
func (s *Server) refuseAuditUnavailable(w http.ResponseWriter, x *exchange) {
	d := auditUnavailableDetail()
	d.Method, d.Host, d.Path = x.r.Method, x.t.target, x.path
	writeError(w, http.StatusServiceUnavailable, contract.DecisionError, "", d)
	x.ev.Event = audit.EventDenied
	x.ev.Decision = contract.DecisionError
	x.ev.Reason = d.Code.String()
	x.ev.Status = http.StatusServiceUnavailable
	if ce := s.log.Check(zapcore.DebugLevel, "request refused, audit log unavailable"); ce != nil {
		ce.Write(zap.Inline(decisionLine{&x.ev}))
	}
	s.metrics.decision(false, d.Code.String())
}

// record writes the audit event and the one log line of a decision.
func (s *Server) record(x *exchange, level zapcore.Level, msg string) {
	ev := &x.ev
	if x.learned != nil {
		s.finishLearned(x)
	}
	dur := s.now().Sub(x.start)
	ev.DurationMS = dur.Milliseconds()
	s.cfg.Audit.Record(*ev)
	if ce := s.log.Check(level, msg); ce != nil {
		ce.Write(zap.Inline(decisionLine{ev}))
	}
}

// decisionLine renders an audit event as the fields of the canonical log
// line: one inline object instead of sixteen fields, so logging a decision
// costs no field slice. It carries nothing the audit event does not.
type decisionLine struct{ ev *audit.Event }

func (l decisionLine) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	ev := l.ev
	enc.AddString("session_id", ev.SessionID)
	enc.AddString("connector", ev.ConnectorFQN)
	enc.AddString("tool", ev.Tool)
	enc.AddString("operation", ev.Operation)
	enc.AddString("method", ev.Method)
	enc.AddString("host", ev.Host)
	enc.AddString("path", ev.Path)
	enc.AddString("decision", ev.Decision)
	enc.AddString("reason", ev.Reason)
	enc.AddInt("status", ev.Status)
	enc.AddString("credential_kind", ev.CredentialKind)
	enc.AddInt64("bytes_in", ev.BytesIn)
	enc.AddInt64("bytes_out", ev.BytesOut)
	enc.AddInt64("duration_ms", ev.DurationMS)
	enc.AddString("source", ev.Source)
	enc.AddString("audit_id", ev.AuditID)
	return nil
}
