// Package approval holds requests for operations marked `approval: required`
// until a person decides them. The proxy calls Broker.Await for each such
// request; the control API lists pending approvals and calls Broker.Decide.
//
// A decision may be remembered for the rest of the session: later requests
// for the same (session, connector, tool, operation) are then decided
// immediately without asking again. Every request and decision is audited.
//
// With a state store (BrokerConfig.Store), approvals outlive the process
// and are shared by replicas. Each held request is recorded with the view a
// person sees (never more), and its outcome once settled; remembered
// decisions are recorded too. A replica that starts again marks the
// approvals it held as abandoned (their connections died with it) and
// audits them. The store referees decisions: whichever replica's decision
// is recorded first wins, and the replica holding the request releases it
// when its Follow sees the decision. List shows every replica's pending
// approvals, from memory kept current by Follow.
package approval

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/preview"
)

// DefaultTimeout is how long Await waits for a decision when
// BrokerConfig.Timeout is zero.
const DefaultTimeout = 120 * time.Second

// IDPrefix starts every approval ID.
const IDPrefix = "apr_"

// Errors returned by Decide.
var (
	ErrUnknownApproval = errors.New("unknown approval")
	ErrAlreadyDecided  = errors.New("approval already decided")
)

// Request describes one held upstream request.
type Request struct {
	SessionID    string
	ConnectorFQN string
	Tool         string
	Operation    string
	Method       string
	Host         string
	// Path is the request path without the query.
	Path string
	// Fields are the operation's audit fields, already redacted where the
	// spec asks.
	Fields map[string]string
	// Preview is what the person is shown of the request; it stays with
	// the pending approval only and never reaches the audit log, which
	// records its field names and the body's digest instead. Nil shows
	// the fields above alone.
	Preview *preview.Preview
}

// Outcome is the result of Await. Its zero value means denied.
type Outcome string

// Outcomes.
const (
	OutcomeDenied   Outcome = "denied"
	OutcomeApproved Outcome = "approved"
	OutcomeTimeout  Outcome = "timeout"
	// OutcomeCanceled means the caller's context ended first (the client
	// went away); the request must not proceed.
	OutcomeCanceled Outcome = "canceled"
	// OutcomeAbandoned is a request that was pending when its replica
	// stopped: Await returns it for requests still held at a clean stop
	// (Abandon), and it is recorded for those whose replica died (their
	// connections died with the process).
	OutcomeAbandoned Outcome = "abandoned"
)

// String returns the outcome's spelling; the zero value is "denied".
func (o Outcome) String() string {
	if o == "" {
		return string(OutcomeDenied)
	}
	return string(o)
}

// IsApproved reports whether the request may proceed. Only
// OutcomeApproved does.
func (o Outcome) IsApproved() bool { return o == OutcomeApproved }

// Decision is a person's answer to a pending approval. The zero value is
// invalid and Decide refuses it.
type Decision string

// Decisions.
const (
	DecisionApprove Decision = "approve"
	DecisionDeny    Decision = "deny"
)

// String returns the decision's spelling.
func (d Decision) String() string { return string(d) }

// ParseDecision parses "approve" or "deny".
func ParseDecision(s string) (Decision, error) {
	switch Decision(s) {
	case DecisionApprove, DecisionDeny:
		return Decision(s), nil
	}
	return "", fmt.Errorf("decision %q is not valid; use \"approve\" or \"deny\"", s)
}

// Remember says how long a decision applies. The zero value means once.
type Remember string

// Remember values.
const (
	RememberOnce    Remember = "once"
	RememberSession Remember = "session"
)

// String returns the spelling; the zero value is "once".
func (r Remember) String() string {
	if r == "" {
		return string(RememberOnce)
	}
	return string(r)
}

// ParseRemember parses "once", "session" or "" (once).
func ParseRemember(s string) (Remember, error) {
	switch Remember(s) {
	case "", RememberOnce:
		return RememberOnce, nil
	case RememberSession:
		return RememberSession, nil
	}
	return "", fmt.Errorf("remember %q is not valid; use \"once\" or \"session\"", s)
}

// States accepted by Broker.List.
const (
	StatePending = "pending"
	StateDecided = "decided"
	StateAll     = "all"
)

// IsValidState reports whether s is a state List accepts.
func IsValidState(s string) bool {
	return s == StatePending || s == StateDecided || s == StateAll
}

// Pending is the public view of an approval, pending or decided.
type Pending struct {
	ID           string            `json:"id"`
	SessionID    string            `json:"session_id"`
	ConnectorFQN string            `json:"connector_fqn"`
	Tool         string            `json:"tool"`
	Operation    string            `json:"operation"`
	Method       string            `json:"method"`
	Host         string            `json:"host"`
	Path         string            `json:"path"`
	Fields       map[string]string `json:"fields,omitempty"`
	// BodySHA256 and BodySize identify the exact body forwarded once
	// approved (hex SHA-256; empty and zero for a bodiless request).
	BodySHA256 string `json:"body_sha256,omitempty"`
	BodySize   int64  `json:"body_size,omitempty"`
	// Preview is what the request would send and, when the operation
	// declares a fetch, the state it would change; present while pending
	// only, dropped once decided.
	Preview     *preview.Preview `json:"preview,omitempty"`
	RequestedAt time.Time        `json:"requested_at"`
	// State is "pending" or "decided".
	State string `json:"state"`
	// Decision is the outcome once decided: approved, denied, timeout,
	// canceled or abandoned.
	Decision string `json:"decision,omitempty"`
	// Reason says what decided it: approved, denied, timeout, canceled,
	// remembered or abandoned.
	Reason    string     `json:"reason,omitempty"`
	DecidedAt *time.Time `json:"decided_at,omitempty"`
}

func (p Pending) clone() Pending {
	p.Fields = maps.Clone(p.Fields)
	p.Preview = p.Preview.Clone()
	if p.DecidedAt != nil {
		t := *p.DecidedAt
		p.DecidedAt = &t
	}
	return p
}

// newID returns "apr_" and 24 hex characters (96 random bits).
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // documented never to fail; it crashes the program instead
	return IDPrefix + hex.EncodeToString(b[:])
}
