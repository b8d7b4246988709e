package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/internal/contract"
)

// Error codes of the control API, declared once in internal/contract
// with the proxy's. Every error response is
// {"error": {"code": <one of these>, "message": "...", ...}}.
const (
	CodeUnauthorized             = contract.CodeUnauthorized
	CodeSessionExpired           = contract.CodeSessionExpired
	CodeSessionEnded             = contract.CodeSessionEnded
	CodeSessionMismatch          = contract.CodeSessionMismatch
	CodeForbiddenHost            = contract.CodeHostHeaderNotAllowed
	CodeForbiddenOrigin          = contract.CodeOriginNotAllowed
	CodeNotFound                 = contract.CodeNotFound
	CodeMethodNotAllowed         = contract.CodeMethodNotAllowed
	CodeInvalidBody              = contract.CodeInvalidBody
	CodeInvalidQuery             = contract.CodeInvalidQuery
	CodeBodyTooLarge             = contract.CodeBodyTooLarge
	CodeInternal                 = contract.CodeInternal
	CodePolicyUnavailable        = contract.CodePolicyUnavailable
	CodeUnknownConnector         = contract.CodeUnknownConnector
	CodeSessionNotFound          = contract.CodeSessionNotFound
	CodeSessionUnavailable       = contract.CodeSessionUnavailable
	CodeApprovalNotFound         = contract.CodeApprovalNotFound
	CodeApprovalAlreadyDecided   = contract.CodeApprovalAlreadyDecided
	CodeOperationNotFound        = contract.CodeOperationNotFound
	CodeOperationNotProxyable    = contract.CodeOperationNotProxyable
	CodeInvalidArgs              = contract.CodeInvalidArgs
	CodeSandboxOperationNotFound = contract.CodeSandboxOperationNotFound
	CodeUpstreamUnreachable      = contract.CodeUpstreamUnreachable
	CodeUpstreamTimeout          = contract.CodeUpstreamTimeout
	CodeUpstreamResponseTooLarge = contract.CodeUpstreamResponseTooLarge
	CodeProxyRefused             = contract.CodeProxyRefused
	CodeAuditUnavailable         = contract.CodeAuditUnavailable
)

// Error is the "error" object of an error response. Extra holds
// endpoint-specific members (problems, allowed_operations, ...), flattened
// next to code and message.
type Error struct {
	Status  int            `json:"-"`
	Code    contract.Code  `json:"code"`
	Message string         `json:"message"`
	Extra   map[string]any `json:"-"`
	// cause is logged, never sent.
	cause error
}

func (e *Error) Error() string { return e.Code.String() + ": " + e.Message }

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

func apiErr(status int, code contract.Code, msg string) *Error {
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
			ae = apiErr(he.Code, contract.Code("http_"+strconv.Itoa(he.Code)), http.StatusText(he.Code))
		}
	default:
		ae = apiErr(http.StatusInternalServerError, CodeInternal, "internal error; see the daemon log").because(err)
	}
	if ae.Status >= 500 && ae.cause != nil {
		s.log.Error("api internal error", zap.String("route", c.Path()), zap.Stringer("code", ae.Code), zap.Error(ae.cause))
	}
	c.Set(ctxErrorCode, ae.Code.String())
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
