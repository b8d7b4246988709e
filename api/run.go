package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/policy"
	"github.com/aileron-dev/aileron-proxy/session"
)

// RunRequest is the body of POST /v1/connector-operations/run, the stable
// contract of generated shims.
type RunRequest struct {
	ConnectorFQN string         `json:"connector_fqn"`
	Tool         string         `json:"tool"`
	Operation    string         `json:"operation"`
	Args         map[string]any `json:"args,omitempty"`
	// APIToken is the session's API token for a client that sends no
	// Authorization header (BusyBox wget shims); it is used only to
	// authenticate, and an Authorization header, when sent, wins.
	APIToken string `json:"api_token,omitempty"`
}

// decodeJSON strictly decodes one JSON object from r into v: a body not
// sent as application/json (415), unknown fields, trailing data and
// oversize bodies are refused. Numbers decode as
// json.Number so integers stay exact.
func decodeJSON(r *http.Request, v any) error {
	if r.Body == nil {
		return apiErr(http.StatusBadRequest, CodeInvalidBody, "the request needs a JSON body")
	}
	if err := checkJSONContentType(r); err != nil {
		return err
	}
	dec := json.NewDecoder(r.Body)
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bodyError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return bodyError(err)
		}
		return apiErr(http.StatusBadRequest, CodeInvalidBody, "the body must hold exactly one JSON object (found data after it)")
	}
	return nil
}

func bodyError(err error) *Error {
	var mbe *http.MaxBytesError
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &mbe):
		return apiErr(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, fmt.Sprintf("request body is larger than %d bytes", mbe.Limit))
	case errors.Is(err, io.EOF):
		return apiErr(http.StatusBadRequest, CodeInvalidBody, "the request needs a JSON body")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return apiErr(http.StatusBadRequest, CodeInvalidBody, "the JSON body is truncated")
	case errors.As(err, &se):
		return apiErr(http.StatusBadRequest, CodeInvalidBody, fmt.Sprintf("the body is not valid JSON (at byte %d)", se.Offset))
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return apiErr(http.StatusBadRequest, CodeInvalidBody, fmt.Sprintf("the body must be a JSON object, not a JSON %s", te.Value))
		}
		return apiErr(http.StatusBadRequest, CodeInvalidBody, fmt.Sprintf("field %q must be a %s, not a JSON %s", field, jsonKind(te.Type.Kind().String()), te.Value))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return apiErr(http.StatusBadRequest, CodeInvalidBody, strings.TrimPrefix(err.Error(), "json: ")+" in the body")
	}
	return apiErr(http.StatusBadRequest, CodeInvalidBody, "the body is not valid JSON")
}

func jsonKind(goKind string) string {
	switch goKind {
	case "map", "struct":
		return "JSON object"
	case "slice", "array":
		return "JSON array"
	case "string":
		return "JSON string"
	case "bool":
		return "JSON boolean"
	}
	return "JSON number"
}

// missingFields returns an invalid_body error naming the empty required
// fields, or nil.
func missingFields(fields ...[2]string) error {
	var missing []string
	for _, f := range fields {
		if strings.TrimSpace(f[1]) == "" {
			missing = append(missing, f[0])
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return apiErr(http.StatusBadRequest, CodeInvalidBody,
		fmt.Sprintf("missing required field(s): %s", strings.Join(missing, ", "))).with("missing", missing)
}

func (s *Server) snapshot() (*policy.Snapshot, error) {
	snap := s.cfg.Policy()
	if snap == nil {
		return nil, apiErr(http.StatusServiceUnavailable, CodePolicyUnavailable,
			"the daemon has not loaded its connectors yet; retry shortly")
	}
	return snap, nil
}

// notFound explains why the lookup of an operation found nothing and lists
// what the session can call instead: the tool's operations, else the
// connector's tools, else the session's connectors. The message is built
// here from the error's data rather than taken from its sentence so the
// API's wording is its own.
func notFound(le *policy.LookupError) (msg, key string, list []string) {
	switch le.Kind {
	case policy.LookupOperation:
		return fmt.Sprintf("tool %q of connector %q has no operation %q; it offers: %s", le.Tool, le.FQN, le.Operation, listOrNone(le.Allowed)),
			"available_operations", le.Allowed
	case policy.LookupTool:
		return fmt.Sprintf("connector %q has no tool %q; its tools: %s", le.FQN, le.Tool, listOrNone(le.Allowed)),
			"available_tools", le.Allowed
	}
	why := "is not one of this session's connectors"
	if !le.Installed {
		why = "is not installed"
	}
	return fmt.Sprintf("connector %q %s; this session's connectors: %s", le.FQN, why, listOrNone(le.Allowed)),
		"available_connectors", le.Allowed
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

// refused audits a call the API refused before sending anything upstream.
func (s *Server) refused(sess *session.Session, source, fqn, tool, op string, e *Error) *Error {
	s.cfg.Audit.Record(audit.Event{
		Event:        audit.EventDenied,
		SessionID:    sess.ID,
		ConnectorFQN: fqn,
		Tool:         tool,
		Operation:    op,
		Status:       e.Status,
		Decision:     contract.DecisionDenied,
		Reason:       e.Code.String(),
		Source:       source,
	})
	s.metrics.proxied.WithLabelValues(source, "refused").Inc()
	return e
}

// lookupOperation returns the current snapshot and the session's operation
// fqn/tool/op in it. When the operation is not one of the session's, it
// returns the audited 404 refusal with notFoundCode, listing what the
// session can call instead; when the spec does not declare how to send it
// upstream, the audited 501 operation_not_proxyable.
func (s *Server) lookupOperation(sess *session.Session, source string, notFoundCode contract.Code, fqn, tool, op string) (*policy.Snapshot, *policy.Match, error) {
	snap, err := s.snapshot()
	if err != nil {
		return nil, nil, err
	}
	m, err := snap.Lookup(sess.Scope, fqn, tool, op)
	var le *policy.LookupError
	if errors.As(err, &le) {
		msg, key, list := notFound(le)
		return nil, nil, s.refused(sess, source, fqn, tool, op, apiErr(http.StatusNotFound, notFoundCode, msg).with(key, list))
	}
	if err != nil {
		return nil, nil, fmt.Errorf("looking up operation %q of tool %q in connector %q: %w", op, tool, fqn, err)
	}
	if o := m.Compiled.Operation(); !o.IsProxyable() {
		return nil, nil, s.refused(sess, source, m.ConnectorFQN, m.Tool, o.Name,
			apiErr(http.StatusNotImplemented, CodeOperationNotProxyable,
				fmt.Sprintf("operation %q of tool %q declares no method, path or hosts, so it cannot be sent upstream; the connector spec must declare all three", o.Name, m.Tool)))
	}
	return snap, m, nil
}

// runOperation is POST /v1/connector-operations/run.
func (s *Server) runOperation(c echo.Context) error {
	sess := sessionFrom(c)
	var req RunRequest
	if err := decodeJSON(c.Request(), &req); err != nil {
		return err
	}
	if err := missingFields([2]string{"connector_fqn", req.ConnectorFQN}, [2]string{"tool", req.Tool}, [2]string{"operation", req.Operation}); err != nil {
		return err
	}
	return s.run(c, sess, req.ConnectorFQN, req.Tool, req.Operation, req.Args, outbound{})
}

// run is the run endpoint's path for fqn/tool/op with args: look the
// operation up in the session's scope, build the call from the args and
// send it through the proxy. extra carries the action fields of outbound.
func (s *Server) run(c echo.Context, sess *session.Session, fqn, tool, opName string, args map[string]any, extra outbound) error {
	_, m, err := s.lookupOperation(sess, SourceRunEndpoint, CodeOperationNotFound, fqn, tool, opName)
	if err != nil {
		return err
	}
	op := m.Compiled.Operation()
	cl, problems := buildCall(m.Compiled, args)
	if len(problems) > 0 {
		return s.refused(sess, SourceRunEndpoint, m.ConnectorFQN, m.Tool, op.Name,
			invalidArgs(m.Tool+" "+op.Name, problems))
	}
	return s.forward(c, outbound{
		sess:       sess,
		call:       cl,
		idempotent: op.Idempotency.IsRetryable(),
		source:     SourceRunEndpoint,
		operation:  op.Name,
		action:     extra.action,
		approval:   extra.approval,
		preview:    extra.preview,
	})
}
