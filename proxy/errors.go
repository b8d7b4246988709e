package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// The contract between the control API and the proxy: the API proves
// itself with HeaderInternal (Config.InternalKey) and may then name its
// endpoint in HeaderSource and pass HeaderAuditArgs; the proxy answers with
// HeaderDecision and HeaderAuditID. Package api uses these names.
const (
	HeaderDecision     = "X-Aileron-Decision"
	HeaderAuditID      = "X-Aileron-Audit-Id"
	HeaderInternal     = "X-Aileron-Internal"
	HeaderSource       = "X-Aileron-Source"
	HeaderAuditArgs    = "X-Aileron-Audit-Args"
	SourceRunEndpoint  = "run_endpoint"
	SourceSandboxProxy = "sandbox_proxy"
	DecisionDenied     = "denied"
	DecisionAllowed    = "allowed"
)

// HeaderApproval set to ApprovalRequiredValue by the control API (with
// HeaderInternal) holds the call for a person's approval even when its
// operation does not require it: an action with [approval] required = true.
const (
	HeaderApproval        = "X-Aileron-Approval"
	ApprovalRequiredValue = "required"
)

// Header names and values the proxy reads or writes.
const (
	headerDecision        = HeaderDecision
	headerAuditID         = HeaderAuditID
	headerInternal        = HeaderInternal
	headerSource          = HeaderSource
	headerAuditArgs       = HeaderAuditArgs
	headerProxyAuthorize  = "Proxy-Authorization"
	headerProxyAuthentic  = "Proxy-Authenticate"
	aileronHeaderPrefix   = "X-Aileron-"
	proxyAuthRealm        = `Basic realm="aileron-proxy"`
	sourceProxy           = "proxy"
	sourceRunEndpoint     = SourceRunEndpoint
	sourceSandboxProxy    = SourceSandboxProxy
	decisionDenied        = DecisionDenied
	decisionAllowed       = DecisionAllowed
	decisionError         = "error"
	contentTypeJSON       = "application/json"
	connectEstablishedMsg = "HTTP/1.1 200 Connection established\r\n\r\n"
)

// Error codes of responses the proxy originates. They are stable: agents and
// the control API branch on them.
const (
	codeProxyAuthRequired       = "proxy_auth_required"
	codeHostNotAllowed          = "host_not_allowed"
	codeTooManyTunnels          = "too_many_tunnels"
	codeShuttingDown            = "proxy_shutting_down"
	codeMisdirected             = "misdirected_request"
	codeOperationNotAllowed     = "operation_not_allowed"
	codeCredentialNotConfigured = "credential_not_configured"
	codeCredentialUnavailable   = "credential_unavailable"
	codeApprovalDenied          = "approval_denied"
	codeApprovalTimeout         = "approval_timeout"
	codeSessionExpired          = "session_expired"
	codeUpstreamAddressRefused  = "upstream_address_refused"
	codeBadFraming              = "bad_request_framing"
	codeUpstreamUnreachable     = "upstream_unreachable"
	codeUpstreamTimeout         = "upstream_timeout"
	codeUpstreamEncoding        = "upstream_encoding_unsupported"
	codePlainHTTPNotAllowed     = "plain_http_not_allowed"
	codeNotAProxyRequest        = "not_a_proxy_request"
	codeBadTarget               = "bad_connect_target"
	codeWebSocketNotAllowed     = "websocket_not_allowed"
	codeWebSocketUpstream       = "websocket_upstream_failed"
)

// errorBody is the one error shape shared with the control API.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Method  string `json:"method,omitempty"`
	Host    string `json:"host,omitempty"`
	Path    string `json:"path,omitempty"`
	// AllowedOperations is present (possibly empty) on operation denials.
	AllowedOperations []string `json:"allowed_operations,omitzero"`
	// AllowedHosts is present on CONNECT host denials.
	AllowedHosts []string `json:"allowed_hosts,omitzero"`
	// Command is the command that fixes the problem, when there is one.
	Command string `json:"command,omitempty"`
}

// marshalError renders the body; it cannot fail for these types.
func marshalError(d errorDetail) []byte {
	b, err := json.Marshal(errorBody{Error: d})
	if err != nil {
		return []byte(`{"error":{"code":"internal","message":"rendering an error failed"}}`)
	}
	return append(b, '\n')
}

// writeError writes a proxy-originated JSON error. decision is
// decisionDenied for refusals and decisionError for upstream failures.
func writeError(w http.ResponseWriter, status int, decision, auditID string, d errorDetail) {
	body := marshalError(d)
	h := w.Header()
	h.Set("Content-Type", contentTypeJSON)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h.Set(headerDecision, decision)
	if auditID != "" {
		h.Set(headerAuditID, auditID)
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
