package proxy

import (
	"github.com/aileron-dev/aileron-proxy/internal/contract"
)

// The contract between the control API and the proxy lives in
// internal/contract; these re-export the names package api and daemon use.
const (
	HeaderDecision        = contract.HeaderDecision
	HeaderAuditID         = contract.HeaderAuditID
	HeaderInternal        = contract.HeaderInternal
	HeaderSource          = contract.HeaderSource
	HeaderAuditArgs       = contract.HeaderAuditArgs
	HeaderApproval        = contract.HeaderApproval
	ApprovalRequiredValue = contract.ApprovalRequired
	SourceRunEndpoint     = contract.SourceRunEndpoint
	SourceSandboxProxy    = contract.SourceSandboxProxy
	DecisionDenied        = contract.DecisionDenied
	DecisionAllowed       = contract.DecisionAllowed
)

// Header names and values only the proxy uses.
const (
	headerProxyAuthorize  = "Proxy-Authorization"
	headerProxyAuthentic  = "Proxy-Authenticate"
	proxyAuthRealm        = `Basic realm="aileron-proxy"`
	contentTypeJSON       = "application/json"
	connectEstablishedMsg = "HTTP/1.1 200 Connection established\r\n\r\n"
)
