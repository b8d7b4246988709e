// Package audit defines the audit event and its append-only JSON Lines log.
//
// One Event is recorded per decision (and per session or approval lifecycle
// step). Its fields are fixed: there is no field for header values, query
// strings, bodies or secrets, and Record strips a query from Path. Values an
// operation marks for redaction go through RedactValue before they reach
// Fields.
//
// The package is pure: no logging globals, no servers; of this module it
// uses only coalesce, which batches the log's writes.
package audit

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aileron-dev/aileron-proxy/coalesce"
)

// Event names.
const (
	EventProxied     = "connector.proxy.proxied"
	EventDenied      = "connector.proxy.denied"
	EventPassthrough = "connector.proxy.passthrough"
	// EventWebSocketClosed follows the EventProxied of a WebSocket handshake
	// (same AuditID) when the relayed WebSocket ends.
	EventWebSocketClosed = "connector.proxy.websocket_closed"
	// EventLearned is a request of a learn session forwarded without
	// credentials because no operation matched it; Learned describes it by
	// names and types only.
	EventLearned           = "connector.proxy.learned"
	EventApprovalRequested = "approval.requested"
	EventApprovalDecided   = "approval.decided"
	// EventApprovalPreviewFetch is the read-only call the proxy made to
	// show a held request's current state to the person deciding it (its
	// answer is shown, never recorded).
	EventApprovalPreviewFetch = "approval.preview_fetch"
	EventSessionCreated       = "session.created"
	EventSessionEnded         = "session.ended"
	EventActionRun            = "action.run"
	// Long-lived sandboxes: created, removed, and one event per exec or
	// file call (verb in Operation, path in Path, exit code; never
	// contents or environment values).
	EventSandboxCreated = "sandbox.created"
	EventSandboxRemoved = "sandbox.removed"
	EventSandboxCall    = "sandbox.call"
)

// Event is one audit record, one JSON object per line of audit.jsonl.
type Event struct {
	// Time is when the decision was made, in UTC; Record fills it when zero.
	Time time.Time `json:"time"`
	// Event is one of the Event* constants.
	Event string `json:"event"`
	// AuditID identifies the record (also sent as X-Aileron-Audit-Id);
	// Record fills it with NewID when empty.
	AuditID      string `json:"audit_id"`
	SessionID    string `json:"session_id,omitempty"`
	ConnectorFQN string `json:"connector_fqn,omitempty"`
	Tool         string `json:"tool,omitempty"`
	Operation    string `json:"operation,omitempty"`
	// Action is the installed action a call ran (action.run), by name.
	Action string `json:"action,omitempty"`
	Method string `json:"method,omitempty"`
	// Host is host:port of the upstream.
	Host string `json:"host,omitempty"`
	// Path is the request path without query; Record drops anything from
	// the first '?' or '#'.
	Path string `json:"path,omitempty"`
	// Status is the HTTP status returned to the client; zero when none.
	Status int `json:"status,omitempty"`
	// Decision is allowed, denied, passthrough, approved, timeout, ...
	Decision string `json:"decision,omitempty"`
	// Reason is the policy reason code, e.g. operation_not_allowed.
	Reason string `json:"reason,omitempty"`
	// CredentialKind is the kind injected (oauth2, api_key, ...), never a
	// value.
	CredentialKind string `json:"credential_kind,omitempty"`
	// BytesIn is request body bytes from the client; BytesOut is response
	// body bytes sent to it.
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
	// DurationMS is the time from request to the end of the response body.
	DurationMS int64 `json:"duration_ms"`
	// Source is where the request came from, e.g. run_endpoint; empty for
	// the proxy.
	Source string `json:"source,omitempty"`
	// Fields are the operation's declared audit fields ("path.<name>",
	// "query.<name>"), redacted values as RedactValue renders them.
	Fields map[string]string `json:"fields,omitempty"`
	// ExitCode is a sandboxed command's exit status, when relevant.
	ExitCode *int `json:"exit_code,omitempty"`
	// WebSocket is set on EventWebSocketClosed; BytesIn and BytesOut then
	// count frame payload bytes, DurationMS the time from the handshake.
	WebSocket *WebSocketStats `json:"websocket,omitempty"`
	// Learned is set on EventLearned; Path is then masked (identifier
	// segments replaced by their class, "/items/{number}").
	Learned *Learned `json:"learned,omitempty"`
	// Replica names the serve process that recorded the event when
	// several share one state store (Options.Replica); each keeps its own
	// log.
	Replica string `json:"replica,omitempty"`
}

// Learned describes a learned request by names and types, never values.
type Learned struct {
	// QueryNames are the query parameter names, in order of appearance.
	QueryNames []string `json:"query_names,omitempty"`
	// BodyKeys are the top-level keys of a JSON body with their JSON types.
	BodyKeys []LearnedKey `json:"body_keys,omitempty"`
	// ContentType is the request's media type; ResponseContentType the
	// response's. Parameters are dropped.
	ContentType         string `json:"content_type,omitempty"`
	ResponseContentType string `json:"response_content_type,omitempty"`
}

// LearnedKey is a JSON body key and the type of its value.
type LearnedKey struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// WebSocketStats describes a relayed WebSocket at its close.
type WebSocketStats struct {
	// FramesIn are frames from the client, FramesOut frames from the
	// upstream, as received (the proxy may re-fragment what it passes on).
	FramesIn  int64 `json:"frames_in"`
	FramesOut int64 `json:"frames_out"`
	// CloseCode is the code of the first close frame (RFC 6455 7.4), 1005
	// when it had none, 1006 when the connection ended without one.
	CloseCode int `json:"close_code"`
	// ClosedBy is client, upstream or proxy (session end, shutdown or a
	// protocol error).
	ClosedBy string `json:"closed_by"`
}

// Recorder records events. Implementations never block long and never fail
// the request being audited.
type Recorder interface {
	Record(Event)
}

// Writer appends events to a JSON Lines file. It is safe for concurrent use.
// Each event is one whole line; lines recorded within a few milliseconds of
// each other reach the file in one write, then one fsync (coalesce.DefaultDelay
// bounds the lag), so recording costs a request no system call. Close
// writes what is pending.
//
// A batch that cannot be written and synced is cut back off the file, so
// the log holds only whole lines, and the Writer reports itself
// unavailable (Health) until a write or its probe succeeds again. Past its
// end it keeps Options.Reserve bytes allocated: when the filesystem fills,
// the reservation fails first, the Writer turns unavailable, and the lines
// of requests already under way still fit.
type Writer struct {
	path    string
	replica string // Options.Replica
	mu      sync.Mutex
	f       File             // nil after Close
	cw      *coalesce.Writer // batches writes to s
	s       *sink
	errs    atomic.Uint64
}

var (
	_ Recorder = (*Writer)(nil)
	_ Health   = (*Writer)(nil)
)

// Open opens (creating if needed) the audit log at path for appending,
// with the default Options. The directory is created with mode 0700 and
// the file has mode 0600.
func Open(path string) (*Writer, error) { return OpenWith(path, Options{}) }

// OpenWith is Open with options.
func OpenWith(path string, opts Options) (*Writer, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating audit directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening audit log: %w", err)
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, fmt.Errorf("setting mode 0600 on audit log %q: %w", path, err)
	}
	w, err := NewWriter(path, &osFile{File: f}, opts)
	if err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

// NewWriter returns a Writer appending to f, an open file named path
// (used in messages only). A file that does not end in a newline (a line
// an earlier writer left torn) gets one before the first event. A Writer
// that cannot reserve space at once starts unavailable; that is no error.
func NewWriter(path string, f File, opts Options) (*Writer, error) {
	size, err := f.Size()
	if err != nil {
		return nil, fmt.Errorf("reading audit log %s: %w", path, err)
	}
	s := &sink{f: f, reserve: opts.Reserve, interval: opts.ProbeInterval, onChange: opts.OnChange, end: size, done: make(chan struct{})}
	if s.reserve == 0 {
		s.reserve = DefaultReserve
	}
	if s.interval <= 0 {
		s.interval = DefaultProbeInterval
	}
	if size > 0 {
		var last [1]byte
		if _, err := f.ReadAt(last[:], size-1); err != nil {
			return nil, fmt.Errorf("reading audit log %s: %w", path, err)
		}
		s.needNL = last[0] != '\n'
	}
	w := &Writer{path: path, replica: opts.Replica, f: f, cw: coalesce.New(s, 0, 0), s: s}
	s.lost = w.Errors
	s.state.Store(&episode{since: time.Now()})
	s.mu.Lock()
	err = s.prepare()
	if err == nil {
		err = s.topUp()
	}
	if err != nil {
		s.failed(err)
	}
	s.mu.Unlock()
	return w, nil
}

// Path returns the file the Writer appends to.
func (w *Writer) Path() string { return w.path }

// Record fills Time (UTC) and AuditID when empty, and Replica from
// Options.Replica, strips any query from Path, and appends the event as one
// line. It never returns an error: a failed write is counted in Errors.
func (w *Writer) Record(e Event) {
	if e.Replica == "" {
		e.Replica = w.replica
	}
	bp := linePool.Get().(*[]byte)
	defer linePool.Put(bp)
	line, err := appendLine((*bp)[:0], e)
	if err != nil {
		w.errs.Add(1)
		return
	}
	if cap(line) <= 64<<10 {
		*bp = line[:0]
	}
	if _, err := w.cw.Write(line); err != nil { // copies line
		w.errs.Add(1) // closed
	}
}

// Errors returns how many events could not be written.
func (w *Writer) Errors() uint64 { return w.errs.Load() + w.cw.Lost() }

// Available reports whether the last write, sync and space reservation
// succeeded, i.e. whether an event recorded now reaches the disk.
func (w *Writer) Available() bool { return !w.s.down.Load() }

// Status describes the Writer's health.
func (w *Writer) Status() Status { return w.s.status() }

// Flush writes and syncs the events recorded so far.
func (w *Writer) Flush() error {
	if err := w.cw.Flush(); err != nil {
		return fmt.Errorf("writing audit log %s: %w", w.path, err)
	}
	return nil
}

// Close writes pending events, gives back the reserved space and closes
// the file; later Records are counted as errors.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	werr := w.cw.Close()
	serr := w.s.close()
	err := w.f.Close()
	w.f = nil
	if werr != nil {
		return fmt.Errorf("writing audit log %s: %w (%d events lost)", w.path, werr, w.Errors())
	}
	if serr != nil {
		return fmt.Errorf("closing audit log %s: %w", w.path, serr)
	}
	if err != nil {
		return fmt.Errorf("closing audit log: %w", err)
	}
	return nil
}

// Normalize returns e as Record writes it: Time in UTC (now when zero),
// AuditID set, Path without query or fragment, Host without user info.
func Normalize(e Event) Event {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	e.Time = e.Time.UTC()
	if e.AuditID == "" {
		e.AuditID = NewID()
	}
	if i := strings.IndexAny(e.Path, "?#"); i >= 0 {
		e.Path = e.Path[:i]
	}
	if i := strings.LastIndexByte(e.Host, '@'); i >= 0 {
		e.Host = e.Host[i+1:]
	}
	return e
}

// idPrefix starts every audit ID.
const idPrefix = "aud_"

// NewID returns a random URL-safe audit ID: "aud_" and 20 characters
// (120 random bits).
func NewID() string {
	var b [15]byte
	_, _ = rand.Read(b[:]) // documented never to fail; it crashes the program instead
	// Encoded in place: one allocation (the string) per request, not two.
	var id [len(idPrefix) + 20]byte
	copy(id[:], idPrefix)
	base64.RawURLEncoding.Encode(id[len(idPrefix):], b[:])
	return string(id[:])
}

// RedactValue renders a value an operation marks redact: "sha256:" and the
// first 12 hex characters of its SHA-256, enough to correlate equal values
// without revealing them.
func RedactValue(v string) string {
	sum := sha256.Sum256([]byte(v))
	return "sha256:" + hex.EncodeToString(sum[:6])
}
