package state

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ErrInvalid is wrapped by the error a write returns for a record it
// refuses before touching the store (an empty ID, a missing time, an
// unknown decision).
var ErrInvalid = errors.New("invalid record")

// maxIDLen bounds an ID (they are short random strings).
const maxIDLen = 256

// Values a decided approval may hold; "" is allowed where the field is
// optional (AbandonApprovals leaves Decision empty).
var (
	approvalDecisions = []string{"approve", "deny"}
	approvalOutcomes  = []string{"approved", "denied", "timeout", "canceled", "abandoned"}
	approvalRemembers = []string{"once", "session"}
	sessionEndReasons = []string{"ended", "expired"}
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// checkID refuses an empty, overlong or non-printable record ID.
func checkID(what, id string) error {
	if id == "" {
		return invalid("%s ID is empty", what)
	}
	if len(id) > maxIDLen {
		return invalid("%s ID is %d bytes long; at most %d are allowed", what, len(id), maxIDLen)
	}
	if strings.IndexFunc(id, func(r rune) bool { return r < 0x21 || r == 0x7f || r == 0xfffd }) >= 0 {
		return invalid("%s ID %q holds a space, a control character or invalid UTF-8", what, id)
	}
	return nil
}

func checkTime(what string, t time.Time) error {
	if t.IsZero() {
		return invalid("%s is not set", what)
	}
	return nil
}

func checkOneOf(what, v string, allowed []string, optional bool) error {
	if (optional && v == "") || slices.Contains(allowed, v) {
		return nil
	}
	return invalid("%s %q is not one of %s", what, v, strings.Join(allowed, ", "))
}

// validSession checks a session before PutSession writes it.
func validSession(s Session) error {
	if err := checkID("session", s.ID); err != nil {
		return err
	}
	if err := checkTime(fmt.Sprintf("session %q created_at", s.ID), s.CreatedAt); err != nil {
		return err
	}
	if err := checkTime(fmt.Sprintf("session %q expires_at", s.ID), s.ExpiresAt); err != nil {
		return err
	}
	if s.APIDigest == ([32]byte{}) {
		return invalid("session %q has no API token digest", s.ID)
	}
	if s.EndedAt != nil {
		return invalid("session %q is already ended; PutSession takes a live session, EndSession ends it", s.ID)
	}
	return nil
}

// validEnd checks EndSession's arguments.
func validEnd(id string, at time.Time, reason string) error {
	if err := checkID("session", id); err != nil {
		return err
	}
	if err := checkTime(fmt.Sprintf("session %q end time", id), at); err != nil {
		return err
	}
	return checkOneOf(fmt.Sprintf("session %q end reason", id), reason, sessionEndReasons, false)
}

// validApproval checks a pending approval before PutApproval writes it.
func validApproval(a Approval) error {
	if err := checkID("approval", a.ID); err != nil {
		return err
	}
	if err := checkID(fmt.Sprintf("approval %q session", a.ID), a.SessionID); err != nil {
		return err
	}
	if err := checkTime(fmt.Sprintf("approval %q created_at", a.ID), a.CreatedAt); err != nil {
		return err
	}
	if a.DecidedAt != nil || a.Outcome != "" || a.Decision != "" || a.Reason != "" || a.Remember != "" {
		return invalid("approval %q is already decided; PutApproval takes a pending approval, DecideApproval settles it", a.ID)
	}
	return nil
}

// validDecision checks DecideApproval's arguments.
func validDecision(id string, at time.Time, decision, outcome, remember string) error {
	if err := checkID("approval", id); err != nil {
		return err
	}
	if err := checkTime(fmt.Sprintf("approval %q decision time", id), at); err != nil {
		return err
	}
	if err := checkOneOf(fmt.Sprintf("approval %q decision", id), decision, approvalDecisions, true); err != nil {
		return err
	}
	if err := checkOneOf(fmt.Sprintf("approval %q outcome", id), outcome, approvalOutcomes, false); err != nil {
		return err
	}
	return checkOneOf(fmt.Sprintf("approval %q remember", id), remember, approvalRemembers, true)
}

// validGrant checks a grant before PutGrant writes it.
func validGrant(g Grant) error {
	if err := checkID("grant session", g.SessionID); err != nil {
		return err
	}
	if g.Connector == "" {
		return invalid("grant of session %q has no connector", g.SessionID)
	}
	if err := checkOneOf(fmt.Sprintf("grant of session %q decision", g.SessionID), g.Decision, approvalDecisions, false); err != nil {
		return err
	}
	return checkTime(fmt.Sprintf("grant of session %q created_at", g.SessionID), g.CreatedAt)
}

// validSandbox checks a sandbox before PutSandbox writes it.
func validSandbox(s Sandbox) error {
	if err := checkID("sandbox", s.ID); err != nil {
		return err
	}
	if err := checkID(fmt.Sprintf("sandbox %q session", s.ID), s.SessionID); err != nil {
		return err
	}
	if s.TokenDigest == ([32]byte{}) {
		return invalid("sandbox %q has no token digest", s.ID)
	}
	if err := checkTime(fmt.Sprintf("sandbox %q created_at", s.ID), s.CreatedAt); err != nil {
		return err
	}
	return checkTime(fmt.Sprintf("sandbox %q expires_at", s.ID), s.ExpiresAt)
}

// validGone checks MarkSandboxGone's arguments.
func validGone(id string, at time.Time) error {
	if err := checkID("sandbox", id); err != nil {
		return err
	}
	return checkTime(fmt.Sprintf("sandbox %q gone time", id), at)
}

// validStale checks AbandonStaleApprovals' times.
func validStale(before, at time.Time) error {
	if err := checkTime("the staleness cutoff", before); err != nil {
		return err
	}
	return checkTime("the abandon time", at)
}

// sortApprovals orders approvals oldest first (ties by ID), as Approvals
// and AbandonApprovals return them.
func sortApprovals(as []Approval) {
	slices.SortFunc(as, func(a, b Approval) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}
