// Package session keeps the sandbox sessions of one daemon: each session has
// its own ID, proxy secret, API token, per-session CA and the set of
// connectors (its policy scope) it may use.
//
// Secrets are generated here and returned exactly once, in Secrets, when a
// session is created; the Registry keeps only their SHA-256 digests and
// compares them in constant time. Expired and ended sessions are refused
// wherever a session is looked up: expiry is checked at use. The registry
// keeps its sessions in a heap by due time, so that Sweep (and Run, which the
// daemon starts) notifies expiries and forgets old sessions in work
// proportional to the sessions concerned, a bounded batch at a time, never
// walking every session.
//
// With a state store (RegistryConfig.Store) sessions outlive the process and
// are shared by replicas: Create, End and a noticed expiry write through to
// the store (digests, the CA's certificate and key, connectors, hosts,
// labels, times; the store seals the key), Restore loads them at start with
// the same CA roots, and a lookup that misses memory asks the store once
// (a session created through another replica), briefly remembering a miss
// so unknown credentials cannot turn into a query each. A known session is
// decided from memory alone. Follow applies other replicas' changes: a
// session ended elsewhere is refused here within the store's change delay.
package session

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aileron-dev/aileron-proxy/ca"
	"github.com/aileron-dev/aileron-proxy/internal/hostport"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// Defaults and limits for session lifetimes.
const (
	// DefaultTTL is the lifetime of a session created without a TTL.
	DefaultTTL = 8 * time.Hour
	// MaxTTL is the longest lifetime a session may ask for.
	MaxTTL = 7 * 24 * time.Hour
	// DefaultLearnTTL is the lifetime of a learn session created without a
	// TTL: learning is a short, watched run.
	DefaultLearnTTL = time.Hour
	// IDPrefix starts every session ID.
	IDPrefix = "ses_"
)

// Errors returned when a session cannot be used. Callers check them with
// errors.Is; the messages are safe to show to a client.
var (
	ErrUnknownSession = errors.New("unknown session")
	ErrSessionExpired = errors.New("session expired")
	ErrSessionEnded   = errors.New("session ended")
	ErrBadCredential  = errors.New("invalid session credential")
	// ErrInvalidOptions matches (errors.Is) every Create error caused by
	// the caller's options: a bad TTL or unknown connectors.
	ErrInvalidOptions = errors.New("invalid session options")
)

// optionsError is a Create error caused by the caller's options.
type optionsError struct{ msg string }

func (e *optionsError) Error() string { return e.msg }

// Is makes errors.Is(err, ErrInvalidOptions) true.
func (e *optionsError) Is(target error) bool { return target == ErrInvalidOptions }

// Session is one sandbox session. Its fields never change after Create; the
// registry tracks whether it has ended.
type Session struct {
	// ID is "ses_" followed by 24 lower-case hex characters. It is not a
	// secret: it appears in proxy URLs, logs and audit events.
	ID string
	// Scope is the set of connectors the session may use.
	Scope policy.Scope
	// Connectors are the FQNs in Scope, sorted.
	Connectors []string
	// Hosts are the normalized host:port values the session intercepts at
	// creation time, sorted.
	Hosts []string
	// CA is the session's certificate authority; its key leaves the
	// process only into the state store, sealed.
	CA *ca.Authority
	// CAPEM is the PEM encoding of the CA certificate.
	CAPEM []byte
	// CreatedAt and ExpiresAt bound the session's life.
	CreatedAt time.Time
	ExpiresAt time.Time
	// Agent and Project are labels the creator gave (launch: the agent
	// command and the project directory); empty when none. Not secrets.
	Agent, Project string
	// ApprovalSurface is the project's approval_surface ("both", "cli" or
	// "api"; the API validates it); empty means both.
	ApprovalSurface string
	// Learn are the learn patterns of a learn session, in normal form
	// ("api.example.com", "*.example.org"); nil for an ordinary session.
	// Requests to matching hosts that no operation matches are forwarded
	// without credentials and recorded.
	Learn []string
	// LearnGlobs are Learn compiled.
	LearnGlobs []hostport.Glob
}

// IsLearning reports whether the session is a learn session.
func (s *Session) IsLearning() bool { return len(s.Learn) > 0 }

// IsExpired reports whether the session's lifetime has passed at now.
func (s *Session) IsExpired(now time.Time) bool { return !now.Before(s.ExpiresAt) }

// Secrets are a session's credentials, returned once by Create. String,
// GoString, Format (every fmt verb) and MarshalJSON (so also zap.Any and
// encoding/json) redact them so they cannot leak through a log, an error or
// a response; read the fields to use them.
type Secrets struct {
	// ProxySecret is the password of the session's proxy URL
	// (http://<id>:<secret>@<proxy>).
	ProxySecret string
	// APIToken is the bearer token of the sandbox-side API endpoints.
	APIToken string
}

// String redacts the secrets.
func (Secrets) String() string { return "session.Secrets{[REDACTED]}" }

// GoString redacts the secrets.
func (s Secrets) GoString() string { return s.String() }

// Format redacts the secrets under every verb: without it, verbs such as %d
// or %t would print the fields.
func (s Secrets) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, s.String()) }

// MarshalJSON redacts the secrets.
func (Secrets) MarshalJSON() ([]byte, error) { return []byte(`"[REDACTED]"`), nil }

// EndReason says why a session ended.
type EndReason string

// End reasons.
const (
	// EndReasonEnded means End was called.
	EndReasonEnded EndReason = "ended"
	// EndReasonExpired means the session's TTL passed.
	EndReasonExpired EndReason = "expired"
)

// String returns the reason's spelling.
func (r EndReason) String() string { return string(r) }

// Ending describes how a session ended, for RegistryConfig.OnEnd.
type Ending struct {
	Reason EndReason
	// ExitCode is the sandbox's exit status when the caller reported one
	// (EndWithExitCode); nil otherwise.
	ExitCode *int
	// Elsewhere is set when another replica ended the session and this one
	// learned it from the state store (RegistryConfig.Store): that replica
	// recorded the end; this one only lets go of what it holds.
	Elsewhere bool
}

// CreateOptions describe a new session.
type CreateOptions struct {
	// Connectors are the FQNs the session may use; empty means every
	// connector active in Snapshot.
	Connectors []string
	// TTL is the session's lifetime; zero means DefaultTTL. It must not
	// exceed MaxTTL.
	TTL time.Duration
	// Snapshot is the current policy. Required.
	Snapshot *policy.Snapshot
	// Agent and Project label the session for people (the web console,
	// `session list`); each at most MaxLabelBytes of printable text.
	Agent, Project string
	// ApprovalSurface is copied to Session.ApprovalSurface.
	ApprovalSurface string
	// Learn are host patterns (hostport.ParseGlob; each item may hold
	// several, comma-separated) that make this a learn session; its TTL then
	// defaults to DefaultLearnTTL.
	Learn []string
}

// MaxLabelBytes bounds CreateOptions.Agent and CreateOptions.Project.
const MaxLabelBytes = 256

// checkLabel refuses a label that is too long or holds control characters.
func checkLabel(name, v string) error {
	if len(v) > MaxLabelBytes {
		return &optionsError{fmt.Sprintf("creating a session: %s is %d bytes long; use at most %d", name, len(v), MaxLabelBytes)}
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return &optionsError{fmt.Sprintf("creating a session: %s %q holds a control character or invalid UTF-8; use printable text", name, v)}
		}
	}
	return nil
}

// newID returns "ses_" + 24 hex characters (96 random bits).
func newID() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("reading random bytes for a session ID: %w", err)
	}
	return IDPrefix + hex.EncodeToString(b[:]), nil
}

// newSecret returns 32 random bytes in unpadded base64url.
func newSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("reading random bytes for a session secret: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

func digest(secret string) [sha256.Size]byte { return sha256.Sum256([]byte(secret)) }

// resolveScope checks the requested FQNs against the snapshot and returns
// them sorted and de-duplicated.
func resolveScope(snap *policy.Snapshot, requested []string) ([]string, error) {
	var available []string
	for _, c := range snap.Connectors() {
		available = append(available, c.Spec.Connector.FQN)
	}
	if len(requested) == 0 {
		// Every active connector; none installed gives an empty scope (the
		// session intercepts nothing, which passthrough-only sandboxes use).
		return available, nil
	}
	var fqns, unknown, quoted []string
	for _, f := range requested {
		f = strings.TrimSpace(f)
		if _, ok := snap.Connector(f); !ok {
			unknown = append(unknown, f)
			quoted = append(quoted, strconv.Quote(f))
			continue
		}
		fqns = append(fqns, f)
	}
	if len(unknown) > 0 {
		avail := "none are installed; install one with `aileron-proxy connector install PATH`"
		if len(available) > 0 {
			avail = "installed: " + strings.Join(available, ", ")
		}
		return nil, &UnknownConnectorsError{Unknown: unknown, Available: available,
			msg: fmt.Sprintf("creating a session: unknown connector %s (%s)", strings.Join(quoted, ", "), avail)}
	}
	slices.Sort(fqns)
	return slices.Compact(fqns), nil
}

// UnknownConnectorsError is returned by Create when a requested connector is
// not active in the snapshot.
type UnknownConnectorsError struct {
	// Unknown are the requested FQNs that are not active.
	Unknown []string
	// Available are the FQNs that are, sorted.
	Available []string
	msg       string
}

func (e *UnknownConnectorsError) Error() string { return e.msg }

// Is makes errors.Is(err, ErrInvalidOptions) true.
func (e *UnknownConnectorsError) Is(target error) bool { return target == ErrInvalidOptions }
