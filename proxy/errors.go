package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/aileron-dev/aileron-proxy/internal/contract"
)

// errorBody is the one error shape shared with the control API.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    contract.Code `json:"code"`
	Message string        `json:"message"`
	Method  string        `json:"method,omitempty"`
	Host    string        `json:"host,omitempty"`
	Path    string        `json:"path,omitempty"`
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
		return []byte(`{"error":{"code":"internal_error","message":"rendering an error failed"}}`)
	}
	return append(b, '\n')
}

// writeError writes a proxy-originated JSON error. decision is
// contract.DecisionDenied for refusals and contract.DecisionError for upstream failures.
func writeError(w http.ResponseWriter, status int, decision, auditID string, d errorDetail) {
	body := marshalError(d)
	h := w.Header()
	h.Set("Content-Type", contentTypeJSON)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h.Set(contract.HeaderDecision, decision)
	if auditID != "" {
		h.Set(contract.HeaderAuditID, auditID)
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
