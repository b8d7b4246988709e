package api

import (
	"errors"
	"net/http"
	"syscall"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/aileron-dev/aileron-proxy/internal/contract"
)

// The audit log's health as the API reports and enforces it: GET /healthz
// says whether it can be written, and calls that change state are refused
// while it cannot, as the proxy refuses requests.

// auditHealthJSON is the "audit" member of GET /healthz.
type auditHealthJSON struct {
	Available bool `json:"available"`
	// Since is when the log became unavailable.
	Since *time.Time `json:"since,omitempty"`
	// Reason is the system's error (e.g. "no space left on device"),
	// without paths.
	Reason string `json:"reason,omitempty"`
	// Code and Fix say what callers get and what the operator does.
	Code contract.Code `json:"code,omitempty"`
	Fix  string        `json:"fix,omitempty"`
	// WriteErrors counts failed writes, syncs and space reservations
	// since serve started; EventsLost the events that never reached the
	// file.
	WriteErrors uint64 `json:"write_errors"`
	EventsLost  uint64 `json:"events_lost"`
}

// healthz answers 200 {"status": "ok"}, or 503 {"status": "degraded"}
// while the audit log cannot be written (nothing is forwarded then).
func (s *Server) healthz(c echo.Context) error {
	if s.auditHealth == nil {
		return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
	}
	st := s.auditHealth.Status()
	a := auditHealthJSON{Available: st.Available, WriteErrors: st.WriteErrors, EventsLost: st.Lost}
	if st.Available {
		return c.JSON(http.StatusOK, map[string]any{"status": "ok", "audit": a})
	}
	since := st.Since.UTC()
	a.Since, a.Reason, a.Code, a.Fix = &since, errnoText(st.Err), CodeAuditUnavailable, auditFix
	return c.JSON(http.StatusServiceUnavailable, map[string]any{"status": "degraded", "audit": a})
}

// auditFix is what the operator does while the audit log is unavailable.
const auditFix = "free space under $AILERON_HOME/audit; requests go through again within a second, no restart needed"

// errnoText is the system error behind err (e.g. "no space left on
// device"), so an unauthenticated caller learns no paths.
func errnoText(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return "the audit log cannot be written"
}

// changesState reports whether the route changes state, so that it needs
// an audit line: every method but GET, except minting a console sign-in
// link (which records nothing and lets the operator look at the console).
func changesState(r route) bool {
	return r.method != http.MethodGet && r.path != "/v1/console/login"
}

// requireAudit refuses a call that changes state while the audit log
// cannot be written, as the proxy refuses requests.
func (s *Server) requireAudit(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.auditHealth != nil && !s.auditHealth.Available() {
			return apiErr(http.StatusServiceUnavailable, CodeAuditUnavailable,
				"the audit log cannot be written (the disk holding it is full or failing), so no call that changes state is made; "+
					"the operator must "+auditFix)
		}
		return next(c)
	}
}
