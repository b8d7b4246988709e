package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/approval"
)

// ApprovalList is the response of GET /v1/approvals.
type ApprovalList struct {
	Approvals []approval.Pending `json:"approvals"`
	// ConsoleOpen reports whether a browser has the web console open
	// (launch then prints no terminal line for a held request).
	ConsoleOpen bool `json:"console_open"`
}

// DecideRequest is the body of POST /v1/approvals/{id}.
type DecideRequest struct {
	// Decision is "approve" or "deny".
	Decision string `json:"decision"`
	// Remember is "once" (default) or "session".
	Remember string `json:"remember,omitempty"`
}

// DecidedApproval is the response of POST /v1/approvals/{id}.
type DecidedApproval struct {
	ID string `json:"id"`
	// Decision is "approved" or "denied".
	Decision string `json:"decision"`
	Remember string `json:"remember"`
}

// listApprovals is GET /v1/approvals?state=pending|decided|all.
func (s *Server) listApprovals(c echo.Context) error {
	state := c.QueryParam("state")
	if state == "" {
		state = approval.StatePending
	}
	if !approval.IsValidState(state) {
		return apiErr(http.StatusBadRequest, CodeInvalidQuery,
			fmt.Sprintf("state %q is not valid; use pending, decided or all", state))
	}
	out := ApprovalList{Approvals: s.cfg.Approvals.List(state), ConsoleOpen: s.cfg.Console != nil && s.cfg.Console.HasViewer()}
	if out.Approvals == nil {
		out.Approvals = []approval.Pending{}
	}
	return c.JSON(http.StatusOK, out)
}

// decideApproval is POST /v1/approvals/{id}.
func (s *Server) decideApproval(c echo.Context) error {
	id := c.Param("id")
	var req DecideRequest
	if err := decodeJSON(c.Request(), &req); err != nil {
		return err
	}
	d, err := approval.ParseDecision(req.Decision)
	if err != nil {
		return apiErr(http.StatusBadRequest, CodeInvalidBody, err.Error())
	}
	rem, err := approval.ParseRemember(req.Remember)
	if err != nil {
		return apiErr(http.StatusBadRequest, CodeInvalidBody, err.Error())
	}
	err = s.cfg.Approvals.Decide(id, d, rem)
	switch {
	case errors.Is(err, approval.ErrUnknownApproval):
		return apiErr(http.StatusNotFound, CodeApprovalNotFound,
			fmt.Sprintf("no approval %q; `aileron-proxy approvals list` shows the pending ones", id))
	case errors.Is(err, approval.ErrAlreadyDecided):
		return apiErr(http.StatusConflict, CodeApprovalAlreadyDecided,
			fmt.Sprintf("approval %q was already decided (or timed out); `aileron-proxy approvals list --state decided` shows how", id))
	case err != nil:
		return apiErr(http.StatusInternalServerError, CodeInternal, "deciding the approval failed; see the daemon log").because(err)
	}
	out := DecidedApproval{ID: id, Decision: approval.OutcomeDenied.String(), Remember: rem.String()}
	if d == approval.DecisionApprove {
		out.Decision = approval.OutcomeApproved.String()
	}
	s.log.Info("approval decided", zap.String("approval_id", id), zap.String("decision", out.Decision), zap.String("remember", out.Remember))
	return c.JSON(http.StatusOK, out)
}
