package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/internal/preview"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// This file holds the preview fetch: before a person is asked about a held
// request, the read-only operation its spec (or its action) names is called
// with the session's credential, through the same decision, injection,
// scrubbing and auditing as any request, so the card shows the state the
// request would change as the source tells it, not as the agent does.

// fetchCodeStatus is the code of a fetch the upstream answered with a
// status other than 2xx.
const fetchCodeStatus = "upstream_status"

// Bounds of one preview fetch.
const (
	previewFetchTimeout = 10 * time.Second
	previewFetchMaxBody = 256 << 10
)

// previewPlan returns the fetch plan for the held request matched as m: the
// operation's approval_preview, else an action's directive; nil for none.
func previewPlan(m *policy.Match, dir *preview.Directive) (*policy.PreviewPlan, error) {
	if plan := m.Compiled.Preview(); plan.HasFetch() {
		return plan, nil
	}
	if dir == nil || dir.Operation == "" {
		return nil, nil
	}
	tool := dir.Tool
	if tool == "" {
		tool = m.Tool
	}
	return policy.NewPreviewFetchPlan(tool, dir.Operation, dir.Args, dir.Render)
}

// fetchPreview runs plan for the held request x (matched as m, body h) and
// returns what it brought back; a failure is a Fetch in state "failed",
// never an error, so a person can still decide.
func (s *Server) fetchPreview(x *exchange, m *policy.Match, h *heldBody, plan *policy.PreviewPlan) *preview.Fetch {
	t := x.t
	res := &preview.Fetch{Operation: plan.FetchTool + " " + plan.FetchOperation, State: preview.FetchFailed}
	ev := audit.Event{Event: audit.EventApprovalPreviewFetch, SessionID: t.sess.ID, ConnectorFQN: m.ConnectorFQN,
		Tool: plan.FetchTool, Operation: plan.FetchOperation, Source: x.ev.Source, Decision: contract.DecisionDenied}
	start := s.now()
	defer func() {
		ev.DurationMS = s.now().Sub(start).Milliseconds()
		ev.AuditID = audit.NewID()
		res.AuditID = ev.AuditID
		if res.State != preview.FetchOK && res.Code == "" {
			res.Code = ev.Reason
			if res.Code == "" || res.Code == string(policy.ReasonAllowed) {
				res.Code = string(contract.CodeInternal)
			}
		}
		s.cfg.Audit.Record(ev)
		level := zapcore.InfoLevel
		if res.State != preview.FetchOK {
			level = zapcore.WarnLevel
		}
		if ce := s.log.Check(level, "approval preview fetched"); ce != nil {
			ce.Write(zap.Inline(decisionLine{&ev}))
		}
	}()

	snap := s.cfg.Policy()
	if snap == nil {
		res.Error, ev.Reason = "no policy is loaded", string(contract.CodeOperationNotAllowed)
		return res
	}
	fm, err := snap.Lookup(t.sess.Scope, m.ConnectorFQN, plan.FetchTool, plan.FetchOperation)
	if err != nil {
		// The lookup's own text lists the session's connectors and
		// operations: a person deciding needs only that it is not there.
		res.Error, ev.Reason = fmt.Sprintf("%s is not an operation of this session", res.Operation), string(contract.CodeOperationNotAllowed)
		return res
	}
	fop := fm.Compiled.Operation()
	ev.Method = fop.Method
	if fop.Method != http.MethodGet && fop.Method != http.MethodHead {
		res.Error, ev.Reason = fmt.Sprintf("%s is a %s operation; only GET or HEAD may be fetched", fop.Name, fop.Method), string(contract.CodeOperationNotAllowed)
		return res
	}
	args, err := previewArgs(x, m, h, plan)
	if err != nil {
		res.Error, ev.Reason = err.Error(), string(contract.CodeOperationNotAllowed)
		return res
	}
	host := fm.Compiled.Hosts()[0]
	for _, hh := range fm.Compiled.Hosts() {
		if hh == t.target {
			host = hh
		}
	}
	path, query, err := fillPath(fm.Compiled.Template(), args)
	if err != nil {
		res.Error, ev.Reason = err.Error(), string(contract.CodeOperationNotAllowed)
		return res
	}
	ev.Host, ev.Path = host, path

	// The same decision as any request: the fetch must match the named
	// operation, in the session's scope.
	d := snap.Decide(t.sess.Scope, policy.Request{Method: fop.Method, Host: host, Path: path})
	if !d.Allow || d.Match == nil || d.Match.Compiled != fm.Compiled {
		ev.Reason = string(d.Reason)
		if d.Allow {
			ev.Reason = string(contract.CodeOperationNotAllowed)
		}
		res.Error = fmt.Sprintf("the fetch %s %s is not the operation %s of this session", fop.Method, path, fop.Name)
		return res
	}
	ev.Reason = string(policy.ReasonAllowed)
	ctx, cancel := context.WithTimeout(x.r.Context(), previewFetchTimeout)
	defer cancel()
	u := &url.URL{Scheme: "https", Host: host, RawQuery: query.Encode()}
	u.Path, _ = url.PathUnescape(path)
	u.RawPath = path
	req, err := http.NewRequestWithContext(ctx, fop.Method, u.String(), nil)
	if err != nil {
		res.Error = "building the request failed"
		return res
	}
	req.Header.Set("Accept", "application/json")
	var scrub interface{ Mask([]byte) }
	if fop.Credential.HasCredential() {
		ev.CredentialKind = string(fop.Credential)
		inj, ok := s.lookupCredential(m.ConnectorFQN, fop.Credential)
		if !ok {
			res.Error, ev.Reason = fmt.Sprintf("the %s credential of %s is not configured", fop.Credential, m.ConnectorFQN), string(contract.CodeCredentialNotConfigured)
			return res
		}
		sc, err := inj.Apply(ctx, req)
		if err != nil {
			res.Error, ev.Reason = "the credential could not be produced", string(contract.CodeCredentialUnavailable)
			return res
		}
		if sc != nil {
			scrub = sc
			req.Header.Set("Accept-Encoding", "identity")
		}
	}
	ev.Decision = contract.DecisionAllowed
	resp, err := s.transport.RoundTrip(req)
	if err != nil {
		status, code, msg := classifyUpstreamError(err, host)
		ev.Status, ev.Reason, res.Error = status, string(code), msg
		return res
	}
	defer resp.Body.Close()
	res.Status, ev.Status = resp.StatusCode, resp.StatusCode
	body, err := io.ReadAll(io.LimitReader(resp.Body, previewFetchMaxBody+1))
	ev.BytesOut = int64(len(body))
	if scrub != nil {
		scrub.Mask(body) // the answer is scrubbed before anyone sees it
	}
	switch {
	case err != nil:
		res.Error, res.Code = fmt.Sprintf("%s closed the connection while answering", host), string(contract.CodeUpstreamUnreachable)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		res.Error, res.Code = fmt.Sprintf("%s answered %d %s", host, resp.StatusCode, http.StatusText(resp.StatusCode)), fetchCodeStatus
	case len(body) > previewFetchMaxBody:
		res.Error, res.Code = fmt.Sprintf("the answer is larger than %d KiB", previewFetchMaxBody>>10), string(contract.CodeUpstreamResponseTooLarge)
	case fop.Method == http.MethodHead:
		res.State = preview.FetchOK
	default:
		mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		labels, paths := make([]string, len(plan.Render)), make([]string, len(plan.Render))
		for i, r := range plan.Render {
			labels[i], paths[i] = r.Label, r.Field
		}
		fields, ok := preview.Render(body, labels, paths)
		if !ok || (mt != "" && mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			res.Error, res.Code = fmt.Sprintf("%s answered %s, not a JSON object", host, orUnknown(mt)), string(contract.CodeUnsupportedMediaType)
			break
		}
		res.State, res.Fields = preview.FetchOK, fields
	}
	return res
}

func orUnknown(s string) string {
	if s == "" {
		return "an unknown content type"
	}
	return s
}

// previewArgs resolves plan's arguments from the held request.
func previewArgs(x *exchange, m *policy.Match, h *heldBody, plan *policy.PreviewPlan) (map[string]string, error) {
	out := make(map[string]string, len(plan.Args))
	var query url.Values
	var form url.Values
	for _, a := range plan.Args {
		var v string
		ok := true
		switch a.Kind {
		case policy.PreviewLiteral:
			v = a.Name
		case policy.PreviewFromPath:
			v, ok = m.PathParams[a.Name]
		case policy.PreviewFromQuery:
			if query == nil {
				query = x.r.URL.Query()
			}
			ok = query.Has(a.Name)
			v = query.Get(a.Name)
		case policy.PreviewFromBody:
			if h == nil || h.data == nil {
				return nil, fmt.Errorf("argument %s comes from the body, which is not available", a.Input)
			}
			mt, _, _ := mime.ParseMediaType(x.r.Header.Get("Content-Type"))
			if mt == "application/x-www-form-urlencoded" {
				if form == nil {
					form, _ = url.ParseQuery(string(h.data))
				}
				ok = form.Has(a.Name)
				v = form.Get(a.Name)
				break
			}
			var raw json.RawMessage
			if raw, ok = preview.Lookup(h.data, a.Name); ok {
				v = preview.Scalar(raw)
			}
		}
		if !ok {
			return nil, fmt.Errorf("the held request has no %s.%s for argument %s", a.Kind, a.Name, a.Input)
		}
		out[a.Input] = v
	}
	return out, nil
}

// fillPath builds the fetched operation's path from args; the arguments
// that are not path templates become its query.
func fillPath(tmpl *policy.PathTemplate, args map[string]string) (string, url.Values, error) {
	if tmpl == nil {
		return "", nil, fmt.Errorf("the fetched operation is not proxyable")
	}
	rest := make(map[string]string, len(args))
	for k, v := range args {
		rest[k] = v
	}
	var b strings.Builder
	for _, seg := range tmpl.Segments() {
		b.WriteByte('/')
		if !seg.IsParam() {
			b.WriteString(seg.Raw())
			continue
		}
		v, ok := rest[seg.Param()]
		switch {
		case !ok || v == "":
			return "", nil, fmt.Errorf("path template {%s} has no value", seg.Param())
		case v == "." || v == ".." || strings.ContainsAny(v, `/\`):
			return "", nil, fmt.Errorf("path template {%s} must be a single path segment", seg.Param())
		}
		b.WriteString(url.PathEscape(v) + seg.Suffix())
		delete(rest, seg.Param())
	}
	q := url.Values{}
	for k, v := range rest {
		q.Set(k, v)
	}
	return b.String(), q, nil
}
