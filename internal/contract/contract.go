// Package contract declares, once, the wire contract the sandbox, the proxy
// and the control API share: error codes, decision and source values, and
// the X-Aileron-* header names. policy owns the decision reasons
// (policy.Reason); the codes here that equal a reason say so.
//
// Every error response, from the proxy or the API, is
// {"error": {"code": <Code>, "message": "...", ...}}; docs/api.md lists
// the codes with their meaning.
package contract

// Code is a stable, machine-readable error code. Agents and shims branch
// on it, so a value never changes meaning.
type Code string

// String returns the code as sent.
func (c Code) String() string { return string(c) }

// Codes shared by the proxy and the API.
const (
	// CodeInternal is a fault of the daemon itself; the message leaks
	// nothing and the log has the cause.
	CodeInternal            Code = "internal_error"
	CodeSessionExpired      Code = "session_expired"
	CodeUpstreamUnreachable Code = "upstream_unreachable"
	CodeUpstreamTimeout     Code = "upstream_timeout"
	// CodeAuditUnavailable: the audit log cannot be written and synced
	// (503), so a request that would need an audit line is not forwarded
	// and a state-changing control API call is not made. The fix is to
	// free space under $AILERON_HOME/audit; the next request after that
	// goes through, no restart needed.
	CodeAuditUnavailable Code = "audit_unavailable"
)

// Codes of responses the proxy originates.
const (
	CodeProxyAuthRequired Code = "proxy_auth_required"
	// CodeHostNotAllowed: the CONNECT or request target is not a host of
	// the session (policy.ReasonHostNotAllowed). It never means a bad API
	// Host header; that is CodeHostHeaderNotAllowed.
	CodeHostNotAllowed          Code = "host_not_allowed"
	CodeTooManyTunnels          Code = "too_many_tunnels"
	CodeShuttingDown            Code = "proxy_shutting_down"
	CodeMisdirected             Code = "misdirected_request"
	CodeOperationNotAllowed     Code = "operation_not_allowed"
	CodeCredentialNotConfigured Code = "credential_not_configured"
	CodeCredentialUnavailable   Code = "credential_unavailable"
	CodeApprovalDenied          Code = "approval_denied"
	CodeApprovalTimeout         Code = "approval_timeout"
	CodeUpstreamAddressRefused  Code = "upstream_address_refused"
	CodeBadFraming              Code = "bad_request_framing"
	CodeUpstreamEncoding        Code = "upstream_encoding_unsupported"
	CodePlainHTTPNotAllowed     Code = "plain_http_not_allowed"
	CodeNotAProxyRequest        Code = "not_a_proxy_request"
	CodeBadTarget               Code = "bad_connect_target"
	CodeWebSocketNotAllowed     Code = "websocket_not_allowed"
	CodeWebSocketUpstream       Code = "websocket_upstream_failed"
	CodeAuthThrottled           Code = "auth_throttled"
	// CodeGraphQLNotAllowed: a GraphQL request on a path with graphql
	// operations is not one of them (the message names the field or rule).
	CodeGraphQLNotAllowed Code = "graphql_not_allowed"
	// CodeMCPNotAllowed: a JSON-RPC message to an MCP endpoint is refused
	// (a tool outside the operation's tools, a switched-off method, or
	// headers that disagree with the body).
	CodeMCPNotAllowed Code = "mcp_not_allowed"
	// CodeBodyNotInspectable: a request whose body the policy must read
	// is compressed or framed so the proxy cannot read it.
	CodeBodyNotInspectable Code = "body_not_inspectable"
)

// Codes of the control API.
const (
	CodeUnauthorized    Code = "unauthorized"
	CodeSessionEnded    Code = "session_ended"
	CodeSessionMismatch Code = "session_mismatch"
	// CodeHostHeaderNotAllowed: the API's Host header names neither a
	// loopback name, an IP literal nor a configured API host (the
	// DNS-rebinding defence). Before it had its own code it shared
	// "host_not_allowed" with the proxy's target denial.
	CodeHostHeaderNotAllowed     Code = "host_header_not_allowed"
	CodeOriginNotAllowed         Code = "origin_not_allowed"
	CodeNotFound                 Code = "not_found"
	CodeMethodNotAllowed         Code = "method_not_allowed"
	CodeInvalidBody              Code = "invalid_body"
	CodeInvalidQuery             Code = "invalid_query"
	CodeBodyTooLarge             Code = "body_too_large"
	CodePolicyUnavailable        Code = "policy_unavailable"
	CodeUnknownConnector         Code = "unknown_connector"
	CodeSessionNotFound          Code = "session_not_found"
	CodeSessionUnavailable       Code = "session_unavailable"
	CodeApprovalNotFound         Code = "approval_not_found"
	CodeApprovalAlreadyDecided   Code = "approval_already_decided"
	CodeOperationNotFound        Code = "connector_operation_not_found"
	CodeOperationNotProxyable    Code = "operation_not_proxyable"
	CodeInvalidArgs              Code = "invalid_args"
	CodeSandboxOperationNotFound Code = "sandbox_proxy_operation_not_found"
	CodeUpstreamResponseTooLarge Code = "upstream_response_too_large"
	CodeProxyRefused             Code = "proxy_refused"
	// CodeSandboxGone: the long-lived sandbox's container died or was
	// removed (410, also for calls in flight when it happened, and when a
	// restarted daemon found it gone). Upper case
	// like the errno names its file calls answer with (ENOENT, EEXIST...).
	CodeSandboxGone     Code = "SANDBOX_GONE"
	CodeSandboxNotFound Code = "sandbox_not_found"
	// CodeClientClosed: the client closed the request before the answer
	// (499, recorded in the audit; the client never reads it).
	CodeClientClosed Code = "client_closed"
	// CodeUnsupportedMediaType: a JSON route was called with a body that
	// is not declared as JSON (415).
	CodeUnsupportedMediaType Code = "unsupported_media_type"
	// CodeActionNotFound: a run of an action that is not installed, or
	// whose connector or operation is gone (broken) (404).
	CodeActionNotFound Code = "action_not_found"
	// CodeSandboxFailed: the launcher could not start the sandbox a
	// POST /v1/sandboxes asked for (422); the message says why.
	CodeSandboxFailed Code = "sandbox_failed"
)

// ProxyCodes are the codes the proxy may answer with or count as a
// decision reason: the label set of its decision metrics is built from
// them and policy's reasons.
var ProxyCodes = []Code{
	CodeInternal, CodeSessionExpired, CodeUpstreamUnreachable, CodeUpstreamTimeout, CodeAuditUnavailable,
	CodeProxyAuthRequired, CodeHostNotAllowed, CodeTooManyTunnels, CodeShuttingDown, CodeMisdirected,
	CodeOperationNotAllowed, CodeCredentialNotConfigured, CodeCredentialUnavailable, CodeApprovalDenied,
	CodeApprovalTimeout, CodeUpstreamAddressRefused, CodeBadFraming, CodeUpstreamEncoding,
	CodePlainHTTPNotAllowed, CodeNotAProxyRequest, CodeBadTarget, CodeWebSocketNotAllowed,
	CodeWebSocketUpstream, CodeAuthThrottled, CodeGraphQLNotAllowed, CodeMCPNotAllowed, CodeBodyNotInspectable,
}

// Header names of the contract. The API proves itself to the proxy with
// HeaderInternal and may then name its endpoint in HeaderSource, pass
// HeaderAuditArgs and ask for approval with HeaderApproval; the proxy
// answers with HeaderDecision and HeaderAuditID.
const (
	HeaderDecision  = "X-Aileron-Decision"
	HeaderAuditID   = "X-Aileron-Audit-Id"
	HeaderInternal  = "X-Aileron-Internal"
	HeaderSource    = "X-Aileron-Source"
	HeaderAuditArgs = "X-Aileron-Audit-Args"
	// HeaderApproval set to ApprovalRequired (with HeaderInternal) holds
	// the call for a person's approval even when its operation does not
	// require it: an action with [approval] required = true.
	HeaderApproval = "X-Aileron-Approval"
	// HeaderApprovalPreview carries, from the control API only, an
	// action's preview fetch (base64url JSON of the internal preview
	// package's Directive) for a held call.
	HeaderApprovalPreview = "X-Aileron-Approval-Preview"
	// HeaderPrefix starts every header of the contract; the proxy strips
	// client-sent ones it does not honour.
	HeaderPrefix = "X-Aileron-"
)

// Values of the contract's headers.
const (
	// Values of HeaderSource (and of audit events' source).
	SourceRunEndpoint  = "run_endpoint"
	SourceSandboxProxy = "sandbox_proxy"
	SourceProxy        = "proxy"
	// Values of HeaderDecision (and of audit events' decision).
	DecisionAllowed = "allowed"
	DecisionDenied  = "denied"
	DecisionError   = "error"
	// ApprovalRequired is the value of HeaderApproval.
	ApprovalRequired = "required"
)
