package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"
)

// Error codes of the control API. Every error response is
// {"error": {"code": <one of these>, "message": "...", ...}}.
const (
	CodeUnauthorized             = "unauthorized"
	CodeSessionExpired           = "session_expired"
	CodeSessionEnded             = "session_ended"
	CodeSessionMismatch          = "session_mismatch"
	CodeForbiddenHost            = "host_not_allowed"
	CodeForbiddenOrigin          = "origin_not_allowed"
	CodeNotFound                 = "not_found"
	CodeMethodNotAllowed         = "method_not_allowed"
	CodeInvalidBody              = "invalid_body"
	CodeInvalidQuery             = "invalid_query"
	CodeBodyTooLarge             = "body_too_large"
	CodeInternal                 = "internal_error"
	CodePolicyUnavailable        = "policy_unavailable"
	CodeUnknownConnector         = "unknown_connector"
	CodeSessionNotFound          = "session_not_found"
	CodeSessionUnavailable       = "session_unavailable"
	CodeApprovalNotFound         = "approval_not_found"
	CodeApprovalAlreadyDecided   = "approval_already_decided"
	CodeOperationNotFound        = "connector_operation_not_found"
	CodeOperationNotProxyable    = "operation_not_proxyable"
	CodeInvalidArgs              = "invalid_args"
	CodeSandboxOperationNotFound = "sandbox_proxy_operation_not_found"
	CodeUpstreamUnreachable      = "upstream_unreachable"
	CodeUpstreamTimeout          = "upstream_timeout"
	CodeUpstreamResponseTooLarge = "upstream_response_too_large"
	CodeProxyRefused             = "proxy_refused"
)

// Error is the "error" object of an error response. Extra holds
// endpoint-specific members (problems, allowed_operations, ...), flattened
// next to code and message.
type Error struct {
	Status  int            `json:"-"`
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Extra   map[string]any `json:"-"`
	// cause is logged, never sent.
	cause error
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Unwrap returns the logged cause.
func (e *Error) Unwrap() error { return e.cause }

// MarshalJSON flattens Extra next to code and message.
func (e *Error) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(e.Extra)+2)
	for k, v := range e.Extra {
		m[k] = v
	}
	m["code"] = e.Code
	m["message"] = e.Message
	return json.Marshal(m)
}

// UnmarshalJSON reads code, message and the rest into Extra.
func (e *Error) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	for k, raw := range m {
		switch k {
		case "code":
			if err := json.Unmarshal(raw, &e.Code); err != nil {
				return err
			}
		case "message":
			if err := json.Unmarshal(raw, &e.Message); err != nil {
				return err
			}
		default:
			var v any
			if err := json.Unmarshal(raw, &v); err != nil {
				return err
			}
			if e.Extra == nil {
				e.Extra = map[string]any{}
			}
			e.Extra[k] = v
		}
	}
	return nil
}

// errorBody is the JSON document of an error response.
type errorBody struct {
	Error *Error `json:"error"`
}

func apiErr(status int, code, msg string) *Error {
	return &Error{Status: status, Code: code, Message: msg}
}

func (e *Error) with(k string, v any) *Error {
	if e.Extra == nil {
		e.Extra = map[string]any{}
	}
	e.Extra[k] = v
	return e
}

func (e *Error) because(err error) *Error {
	e.cause = err
	return e
}

// handleError is echo's HTTPErrorHandler: it maps every error to the one
// error shape. Internal errors are logged with their cause and answered
// with a message that leaks nothing.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var ae *Error
	var he *echo.HTTPError
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &he):
		switch he.Code {
		case http.StatusNotFound:
			ae = apiErr(he.Code, CodeNotFound, "no such endpoint; GET /v1/openapi.json lists them")
		case http.StatusMethodNotAllowed:
			ae = apiErr(he.Code, CodeMethodNotAllowed, "method not allowed on this endpoint; GET /v1/openapi.json lists the methods")
		case http.StatusRequestEntityTooLarge:
			ae = apiErr(he.Code, CodeBodyTooLarge, "request body too large")
		default:
			// A stable snake_case code: "http_400", not "http_Bad Request".
			ae = apiErr(he.Code, "http_"+strconv.Itoa(he.Code), http.StatusText(he.Code))
		}
	default:
		ae = apiErr(http.StatusInternalServerError, CodeInternal, "internal error; see the daemon log").because(err)
	}
	if ae.Status >= 500 && ae.cause != nil {
		s.log.Error("api internal error", zap.String("route", c.Path()), zap.String("code", ae.Code), zap.Error(ae.cause))
	}
	c.Set(ctxErrorCode, ae.Code)
	if ae.Status == http.StatusUnauthorized {
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="aileron-proxy"`)
	}
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(ae.Status)
		return
	}
	if err := c.JSON(ae.Status, errorBody{Error: ae}); err != nil {
		s.log.Debug("writing an error response", zap.Error(err))
	}
}
