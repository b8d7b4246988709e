// Package state keeps what must outlive one `serve` process: sessions and
// their CAs, approvals pending and decided, remembered decisions and
// long-lived sandboxes. The default is an embedded SQLite database under
// $AILERON_HOME; several replicas share one Postgres database.
//
// The store holds digests of session tokens and proxy secrets, never the
// secrets; a session CA's private key is sealed (AES-GCM) under the state key
// before it is written, so the database alone never holds a usable key.
//
// Nothing here is on a request's path: the session registry and the approval
// broker answer from memory and write through to a Store on create, end and
// decide. Changes made by other replicas arrive through Watch.
package state

import (
	"context"
	"errors"
	"time"
)

// Errors callers check with errors.Is.
var (
	// ErrNotFound is returned when a record does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict is returned when a conditional write lost (an approval
	// already decided, a session already ended).
	ErrConflict = errors.New("conflict")
)

// Session is the durable record of one session. Digests are SHA-256 of the
// secrets; CAKey is the CA's private key in PKCS#8 DER, in plaintext in
// memory only: the store seals it before writing and opens it when reading.
type Session struct {
	ID              string
	ProxyDigest     [32]byte
	APIDigest       [32]byte
	CACert          []byte // DER
	CAKey           []byte // PKCS#8 DER; sealed at rest
	Connectors      []string
	Hosts           []string
	Learn           []string
	Agent, Project  string
	ApprovalSurface string
	CreatedAt       time.Time
	ExpiresAt       time.Time
	// EndedAt is set once the session has ended (End or expiry noticed);
	// EndReason says why ("ended", "expired").
	EndedAt   *time.Time
	EndReason string
	ExitCode  *int
}

// Approval is one approval: pending while DecidedAt is nil. View is the
// approval package's own JSON of what a person sees (the store does not read
// it). Replica is the replica holding the request's connection.
type Approval struct {
	ID        string
	SessionID string
	Replica   string
	View      []byte
	CreatedAt time.Time
	// Decided fields: Decision is "approve" or "deny" for a person's answer,
	// Outcome what the waiting request got ("approved", "denied",
	// "timeout", "canceled", "abandoned"), Remember "once" or "session".
	DecidedAt *time.Time
	Decision  string
	Outcome   string
	Reason    string
	Remember  string
}

// Grant is a remembered decision: it answers later requests of the same
// session, connector, tool and operation at once.
type Grant struct {
	SessionID, Connector, Tool, Operation string
	Decision                              string
	CreatedAt                             time.Time
}

// Sandbox is the durable record of a long-lived sandbox. Spec is the
// launcher's own JSON of what it needs to find the sandbox again (container,
// network, relays, guard); the store does not read it.
type Sandbox struct {
	ID          string
	SessionID   string
	TokenDigest [32]byte
	Replica     string
	Spec        []byte
	CreatedAt   time.Time
	ExpiresAt   time.Time
	// GoneAt is set when the sandbox's container was found missing.
	GoneAt *time.Time
}

// ChangeKind says what a Change is about.
type ChangeKind string

// Change kinds.
const (
	ChangeSessionCreated  ChangeKind = "session.created"
	ChangeSessionEnded    ChangeKind = "session.ended"
	ChangeApprovalCreated ChangeKind = "approval.created"
	ChangeApprovalDecided ChangeKind = "approval.decided"
	ChangeGrantCreated    ChangeKind = "grant.created"
	ChangeSandboxChanged  ChangeKind = "sandbox.changed"
	// ChangeResync says the watcher may have missed changes (it fell too
	// far behind, or a replica lost its connection to the shared store):
	// it re-reads everything it keeps. Its ID is empty.
	ChangeResync ChangeKind = "resync"
)

// Change tells a replica that a record changed; it re-reads the record by ID.
type Change struct {
	Kind ChangeKind
	ID   string // session, approval or sandbox ID (a grant: its session ID)
}

// Store is the durable state of a set of replicas. Every method is safe for
// concurrent use. Errors name the store and the record, never a secret.
//
// Common rules of every backend (statetest checks them):
//   - Times are kept to the microsecond and read back in UTC.
//   - An empty list or byte slice reads back as nil.
//   - A write refuses a bad record before touching the store, with an error
//     wrapping ErrInvalid: an empty ID, an unset time, a value outside the
//     documented ones.
//   - Approvals, grants and sandboxes belong to a session: writing one for
//     an unknown session is ErrNotFound, and PruneSessions removes them with
//     their session.
//   - Lists are ordered oldest first (CreatedAt, then ID).
type Store interface {
	// PutSession inserts a new live session (EndedAt nil); ErrConflict when
	// its ID, or its API token digest, is already stored.
	PutSession(ctx context.Context, s Session) error
	// EndSession marks a live session ended; ErrConflict when it already
	// ended, ErrNotFound when unknown.
	EndSession(ctx context.Context, id string, at time.Time, reason string, exitCode *int) error
	// Session returns one session (ended ones included) by ID.
	Session(ctx context.Context, id string) (Session, error)
	// SessionByAPIDigest returns the session whose API token has digest d.
	SessionByAPIDigest(ctx context.Context, d [32]byte) (Session, error)
	// Sessions returns the sessions not yet ended and expiring after now,
	// plus those that ended or expired after since (for precise errors).
	Sessions(ctx context.Context, now, since time.Time) ([]Session, error)
	// PruneSessions deletes sessions that ended or expired before t, with
	// their approvals, grants and sandboxes; it returns how many sessions.
	// It publishes no Change (those sessions were already over).
	PruneSessions(ctx context.Context, before time.Time) (int, error)

	// PutApproval inserts a pending approval (no decided field set);
	// ErrConflict when its ID is already stored.
	PutApproval(ctx context.Context, a Approval) error
	// DecideApproval settles a pending approval; ErrConflict when it was
	// already decided, ErrNotFound when unknown. The returned record is the
	// decided one.
	DecideApproval(ctx context.Context, id string, at time.Time, decision, outcome, reason, remember string) (Approval, error)
	// Approval returns one approval.
	Approval(ctx context.Context, id string) (Approval, error)
	// Approvals returns pending approvals (every replica's) and the most
	// recent decided ones, at most limit of those, oldest first.
	Approvals(ctx context.Context, decidedLimit int) ([]Approval, error)
	// AbandonApprovals settles every approval still pending on replica as
	// "abandoned" (Decision and Reason left empty) and returns them, oldest
	// first (a restarted replica's held connections died with its process).
	AbandonApprovals(ctx context.Context, replica string, at time.Time) ([]Approval, error)
	// AbandonStaleApprovals settles as "abandoned" (Decision and Reason
	// left empty) every approval still pending that was created before
	// before, whichever replica holds it except the replica named except,
	// and returns them, oldest first: their holder's wait ended long ago,
	// or the holder is gone for good. Each approval is settled by one call
	// only, so of replicas sweeping at once exactly one gets it back.
	AbandonStaleApprovals(ctx context.Context, before, at time.Time, except string) ([]Approval, error)

	// PutGrant remembers a decision (replacing an older one for the same
	// session, connector, tool and operation). Decision is "approve" or
	// "deny".
	PutGrant(ctx context.Context, g Grant) error
	// Grants returns every remembered decision of the sessions that have
	// neither ended nor expired.
	Grants(ctx context.Context) ([]Grant, error)

	// PutSandbox inserts or replaces a sandbox record.
	PutSandbox(ctx context.Context, s Sandbox) error
	// MarkSandboxGone sets GoneAt; ErrNotFound when unknown.
	MarkSandboxGone(ctx context.Context, id string, at time.Time) error
	// DeleteSandbox forgets a removed sandbox; ErrNotFound when unknown.
	DeleteSandbox(ctx context.Context, id string) error
	// Sandboxes returns every sandbox record.
	Sandboxes(ctx context.Context) ([]Sandbox, error)

	// Watch delivers changes made through any replica (this one included)
	// until ctx ends or the Store closes; then the channel is closed. A
	// Store shared by replicas delivers another replica's change within a
	// second. A change is published after its write committed. Writers never
	// wait for a watcher: one that falls behind gets a ChangeResync in
	// place of the changes it missed.
	Watch(ctx context.Context) (<-chan Change, error)
	// Close releases the store.
	Close() error
}
