package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
)

// Long-lived sandboxes: the operator creates, lists and removes them with
// the admin token; a client such as the Flue connector then runs commands
// and file operations in one with its control token. The daemon owns them
// (launcher implements SandboxManager); this file only serves the routes.

// Sandbox API limits.
const (
	// SandboxExecMaxOutput caps stdout and stderr of one exec, each;
	// beyond it output is dropped and the result says truncated.
	SandboxExecMaxOutput = 16 << 20
	// SandboxMaxFileBytes caps the body of PUT /v1/sandboxes/{id}/files.
	SandboxMaxFileBytes = 256 << 20
)

// Sandbox error codes, declared in internal/contract.
const (
	CodeSandboxGone     = contract.CodeSandboxGone
	CodeSandboxNotFound = contract.CodeSandboxNotFound
	// CodeSandboxFailed answers a POST /v1/sandboxes the launcher could
	// not start (422); the message says why.
	CodeSandboxFailed = contract.CodeSandboxFailed
)

// ErrSandboxGone is returned by a Sandbox whose container died or was
// removed; the API answers 410 SANDBOX_GONE.
var ErrSandboxGone = errors.New("the sandbox is gone: its container died or was removed")

// ErrSandboxNotFound is returned by SandboxManager.RemoveSandbox for an
// unknown ID.
var ErrSandboxNotFound = errors.New("no such sandbox")

// CreateSandboxRequest is the body of POST /v1/sandboxes: the options of
// `aileron-proxy sandbox up`.
type CreateSandboxRequest struct {
	// Project is the absolute host path of the project directory;
	// required. It is mounted read-write at the workdir.
	Project string `json:"project"`
	// Connectors are connector FQNs; empty means every active connector.
	Connectors []string `json:"connectors,omitempty"`
	// Runtime is "auto" (default), "docker" or "podman".
	Runtime string `json:"runtime,omitempty"`
	// Build is the build policy: "auto" (default), "always" or "never".
	Build string `json:"build,omitempty"`
	// TTL is the sandbox's and its session's lifetime, as the sessions'
	// ttl; empty means the session default (8h).
	TTL string `json:"ttl,omitempty"`
	// LocalEnv holds the values of the ${localEnv:VAR} variables the
	// project's devcontainer.json names, from the caller's environment
	// (launcher.LocalEnvNames); a name missing here is unset. The daemon's
	// own environment is never read for them.
	LocalEnv map[string]string `json:"local_env,omitempty"`
	// Learn are host patterns that make the sandbox's session a learn
	// session, as in POST /v1/sessions.
	Learn []string `json:"learn,omitempty"`
}

// CreatedSandbox is the 201 response of POST /v1/sandboxes, and what
// `sandbox up --json` prints. Token is the sandbox's control token: it
// exists only here, never inside the sandbox.
type CreatedSandbox struct {
	ID string `json:"id"`
	// APIURL is the daemon's API base URL (as in daemon.json, no /v1).
	APIURL    string `json:"api_url"`
	Token     string `json:"token"`
	Workdir   string `json:"workdir"`
	SessionID string `json:"session_id"`
	Runtime   string `json:"runtime"`
	Image     string `json:"image"`
}

// SandboxInfo describes a sandbox without its token.
type SandboxInfo struct {
	ID        string `json:"id"`
	Workdir   string `json:"workdir"`
	State     string `json:"state"`
	SessionID string `json:"session_id"`
	Runtime   string `json:"runtime"`
	Image     string `json:"image,omitempty"`
	Project   string `json:"project,omitempty"`
	// Container is the container's name; User the --user of its commands
	// (empty: the image's user).
	Container string    `json:"container,omitempty"`
	User      string    `json:"user,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at,omitempty"`
}

// SandboxList is the response of GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes []SandboxInfo `json:"sandboxes"`
}

// SandboxExecRequest is the body of POST /v1/sandboxes/{id}/exec.
type SandboxExecRequest struct {
	Command string            `json:"command"`
	Cwd     string            `json:"cwd,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// TimeoutMs is the deadline in milliseconds; zero means none.
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
}

// SandboxExecResult is the 200 response of exec (a non-zero exit too).
type SandboxExecResult struct {
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	ExitCode   int    `json:"exitCode"`
	TimedOut   bool   `json:"timedOut"`
	Truncated  bool   `json:"truncated"`
	DurationMs int64  `json:"durationMs"`
}

// SandboxStat is the response of POST /v1/sandboxes/{id}/fs/stat.
type SandboxStat struct {
	IsFile         bool    `json:"isFile"`
	IsDirectory    bool    `json:"isDirectory"`
	IsSymbolicLink bool    `json:"isSymbolicLink"`
	Size           int64   `json:"size"`
	MtimeMs        float64 `json:"mtimeMs"`
}

// SandboxFSRequest is the body of the /fs/* endpoints.
type SandboxFSRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
	Force     bool   `json:"force,omitempty"`
}

// SandboxFSError is a file operation's failure, with Node's errno name as
// Code ("ENOENT", "EEXIST", ...).
type SandboxFSError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Path    string `json:"path"`
}

func (e *SandboxFSError) Error() string { return e.Message }

// SandboxFS verbs of Sandbox.FS.
const (
	SandboxFSStat    = "stat"
	SandboxFSReaddir = "readdir"
	SandboxFSMkdir   = "mkdir"
	SandboxFSRm      = "rm"
)

// SandboxFSResult is what Sandbox.FS returns: Stat for stat, Names for
// readdir, nothing else.
type SandboxFSResult struct {
	Stat  *SandboxStat
	Names []string
}

// Sandbox is one long-lived sandbox. Its methods fail with ErrSandboxGone
// when the container is gone and with *SandboxFSError for file errors.
type Sandbox interface {
	Info() SandboxInfo
	// CheckToken reports whether tok is the sandbox's control token
	// (constant time).
	CheckToken(tok string) bool
	Exec(ctx context.Context, req SandboxExecRequest) (*SandboxExecResult, error)
	// ReadFile opens path; the returned reader streams its bytes and must
	// be closed.
	ReadFile(ctx context.Context, path string) (io.ReadCloser, error)
	WriteFile(ctx context.Context, path string, body io.Reader) error
	// FS runs one of the SandboxFS* verbs.
	FS(ctx context.Context, verb string, req SandboxFSRequest) (*SandboxFSResult, error)
}

// SandboxManager creates and owns the daemon's sandboxes.
type SandboxManager interface {
	CreateSandbox(ctx context.Context, req CreateSandboxRequest) (*CreatedSandbox, error)
	ListSandboxes() []SandboxInfo
	// RemoveSandbox tears the sandbox down; ErrSandboxNotFound when there
	// is none with that ID.
	RemoveSandbox(ctx context.Context, id string) error
	// Sandbox returns a sandbox by ID; one recently removed stays known
	// (its calls fail with ErrSandboxGone) so clients get 410, not 401.
	Sandbox(id string) (Sandbox, bool)
}

// Context key of the authenticated sandbox.
const ctxSandbox = "aileron.sandbox"

// sandboxRoutes are the rows of the route table for sandboxes.
func (s *Server) sandboxRoutes() []route {
	return []route{
		{http.MethodPost, "/v1/sandboxes", authAdmin, s.createSandbox, 0},
		{http.MethodGet, "/v1/sandboxes", authAdmin, s.listSandboxes, 0},
		{http.MethodDelete, "/v1/sandboxes/:id", authAdmin, s.removeSandbox, 0},
		{http.MethodGet, "/v1/sandboxes/:id", authSandbox, s.sandboxInfo, 0},
		{http.MethodGet, "/v1/sandboxes/:id/", authSandbox, s.sandboxInfo, 0},
		{http.MethodPost, "/v1/sandboxes/:id/exec", authSandbox, s.sandboxExec, 0},
		{http.MethodGet, "/v1/sandboxes/:id/files", authSandbox, s.sandboxReadFile, 0},
		{http.MethodPut, "/v1/sandboxes/:id/files", authSandbox, s.sandboxWriteFile, SandboxMaxFileBytes},
		{http.MethodPost, "/v1/sandboxes/:id/fs/:verb", authSandbox, s.sandboxFS, 0},
	}
}

func (s *Server) sandboxes() (SandboxManager, error) {
	if s.cfg.Sandboxes == nil {
		return nil, apiErr(http.StatusNotFound, CodeNotFound, "this daemon runs no sandboxes")
	}
	return s.cfg.Sandboxes, nil
}

// requireSandbox authenticates the sandbox's control token. An unknown ID
// and a wrong token answer alike, so IDs cannot be probed. Failures back
// off per sandbox ID, as sessions do per session ID: every client calls
// from loopback, so one shared key would let one client's wrong token
// throttle every sandbox.
func (s *Server) requireSandbox(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		key := throttleSandbox + c.Param("id")
		if err := s.checkThrottle(c, key); err != nil {
			return err
		}
		tok, ok := bearer(c.Request())
		var sb Sandbox
		found := false
		if s.cfg.Sandboxes != nil {
			sb, found = s.cfg.Sandboxes.Sandbox(c.Param("id"))
		}
		if !ok || !found || !sb.CheckToken(tok) {
			if ok {
				s.authFailed(c, key)
			}
			return apiErr(http.StatusUnauthorized, CodeUnauthorized,
				"this endpoint needs the sandbox's control token (Authorization: Bearer <token> from `aileron-proxy sandbox up --json`)")
		}
		c.Set(ctxSandbox, sb)
		return next(c)
	}
}

func sandboxFrom(c echo.Context) Sandbox {
	sb, _ := c.Get(ctxSandbox).(Sandbox)
	return sb
}

func (s *Server) createSandbox(c echo.Context) error {
	m, err := s.sandboxes()
	if err != nil {
		return err
	}
	var req CreateSandboxRequest
	if err := decodeJSON(c.Request(), &req); err != nil {
		return err
	}
	if !filepath.IsAbs(req.Project) {
		return apiErr(http.StatusBadRequest, CodeInvalidBody,
			fmt.Sprintf("project %q is not an absolute path; send the project directory's absolute host path", req.Project))
	}
	if _, err := ParseTTL(req.TTL); err != nil {
		return apiErr(http.StatusBadRequest, CodeInvalidBody, err.Error())
	}
	// Preparing the image may outlast the server's write timeout.
	_ = http.NewResponseController(c.Response()).SetWriteDeadline(time.Time{})
	sb, err := m.CreateSandbox(c.Request().Context(), req)
	if err != nil {
		// The launcher's errors say what failed and how to fix it; they
		// carry no secrets.
		return apiErr(http.StatusUnprocessableEntity, CodeSandboxFailed, err.Error())
	}
	s.cfg.Audit.Record(audit.Event{Event: audit.EventSandboxCreated, SessionID: sb.SessionID,
		Fields: map[string]string{"sandbox_id": sb.ID, "runtime": sb.Runtime}})
	return c.JSON(http.StatusCreated, sb)
}

func (s *Server) listSandboxes(c echo.Context) error {
	m, err := s.sandboxes()
	if err != nil {
		return err
	}
	list := m.ListSandboxes()
	if list == nil {
		list = []SandboxInfo{}
	}
	return c.JSON(http.StatusOK, SandboxList{Sandboxes: list})
}

func (s *Server) removeSandbox(c echo.Context) error {
	m, err := s.sandboxes()
	if err != nil {
		return err
	}
	id := c.Param("id")
	sb, ok := m.Sandbox(id)
	if err := m.RemoveSandbox(c.Request().Context(), id); err != nil {
		if errors.Is(err, ErrSandboxNotFound) {
			return apiErr(http.StatusNotFound, CodeSandboxNotFound, fmt.Sprintf("no sandbox %q; `aileron-proxy sandbox ls` lists them", id))
		}
		return apiErr(http.StatusInternalServerError, CodeInternal, "removing the sandbox failed; see the daemon log").because(err)
	}
	ev := audit.Event{Event: audit.EventSandboxRemoved, Fields: map[string]string{"sandbox_id": id}}
	if ok {
		ev.SessionID = sb.Info().SessionID
	}
	s.cfg.Audit.Record(ev)
	return c.JSON(http.StatusOK, map[string]string{"id": id, "state": "removed"})
}

func (s *Server) sandboxInfo(c echo.Context) error {
	i := sandboxFrom(c).Info()
	return c.JSON(http.StatusOK, map[string]string{"id": i.ID, "workdir": i.Workdir, "state": i.State, "session_id": i.SessionID, "runtime": i.Runtime})
}

func (s *Server) sandboxExec(c echo.Context) error {
	sb := sandboxFrom(c)
	var req SandboxExecRequest
	if err := decodeJSON(c.Request(), &req); err != nil {
		return err
	}
	if strings.TrimSpace(req.Command) == "" {
		return apiErr(http.StatusBadRequest, CodeInvalidBody, `"command" is required`)
	}
	if req.TimeoutMs < 0 {
		return apiErr(http.StatusBadRequest, CodeInvalidBody, `"timeoutMs" must be a positive number of milliseconds, or 0 for none`)
	}
	// A command may outlast the server's write timeout.
	_ = http.NewResponseController(c.Response()).SetWriteDeadline(time.Time{})
	start := time.Now()
	res, err := sb.Exec(c.Request().Context(), req)
	ev := s.sandboxEvent(sb, "exec", req.Cwd, start)
	sum := sha256.Sum256([]byte(req.Command))
	ev.Fields["command_sha256"] = hex.EncodeToString(sum[:])
	if err == nil {
		code := res.ExitCode
		ev.ExitCode = &code
		if res.TimedOut {
			ev.Reason = "timed_out"
		}
	}
	if failed := s.endSandboxCall(ev, err, req.Cwd); failed != nil {
		return failed
	}
	return c.JSON(http.StatusOK, res)
}

func (s *Server) sandboxReadFile(c echo.Context) error {
	sb := sandboxFrom(c)
	p := c.QueryParam("path")
	if p == "" {
		return apiErr(http.StatusBadRequest, CodeInvalidQuery, `the "path" query parameter is required`)
	}
	_ = http.NewResponseController(c.Response()).SetWriteDeadline(time.Time{})
	ev := s.sandboxEvent(sb, "read", p, time.Now())
	rc, err := sb.ReadFile(c.Request().Context(), p)
	if err != nil {
		return s.endSandboxCall(ev, err, p)
	}
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMEOctetStream)
	c.Response().WriteHeader(http.StatusOK)
	n, err := io.Copy(c.Response(), rc)
	ev.BytesOut = n
	// Close once: its error (say, the reader's command failing) counts
	// when the copy itself succeeded.
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	if s.endSandboxCall(ev, err, p) != nil {
		// The status is sent; abort so the client sees a broken body.
		panic(http.ErrAbortHandler)
	}
	return nil
}

func (s *Server) sandboxWriteFile(c echo.Context) error {
	sb := sandboxFrom(c)
	p := c.QueryParam("path")
	if p == "" {
		return apiErr(http.StatusBadRequest, CodeInvalidQuery, `the "path" query parameter is required`)
	}
	rc := http.NewResponseController(c.Response())
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	ev := s.sandboxEvent(sb, "write", p, time.Now())
	body := c.Request().Body
	if body == nil {
		body = http.NoBody
	}
	counted := &countingReader{r: body}
	err := sb.WriteFile(c.Request().Context(), p, counted)
	ev.BytesIn = counted.n
	if failed := s.endSandboxCall(ev, err, p); failed != nil {
		return failed
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) sandboxFS(c echo.Context) error {
	sb := sandboxFrom(c)
	verb := c.Param("verb")
	switch verb {
	case SandboxFSStat, SandboxFSReaddir, SandboxFSMkdir, SandboxFSRm:
	default:
		return apiErr(http.StatusNotFound, CodeNotFound, fmt.Sprintf("no file operation %q; use stat, readdir, mkdir or rm", verb))
	}
	var req SandboxFSRequest
	if err := decodeJSON(c.Request(), &req); err != nil {
		return err
	}
	if req.Path == "" {
		return apiErr(http.StatusBadRequest, CodeInvalidBody, `"path" is required`)
	}
	ev := s.sandboxEvent(sb, verb, req.Path, time.Now())
	res, err := sb.FS(c.Request().Context(), verb, req)
	if failed := s.endSandboxCall(ev, err, req.Path); failed != nil {
		return failed
	}
	switch verb {
	case SandboxFSStat:
		return c.JSON(http.StatusOK, res.Stat)
	case SandboxFSReaddir:
		names := res.Names
		if names == nil {
			names = []string{}
		}
		return c.JSON(http.StatusOK, map[string][]string{"names": names})
	}
	return c.JSON(http.StatusOK, map[string]bool{"ok": true})
}

// sandboxEvent starts the audit event of one sandbox call. It carries the
// verb and the path, never contents or environment values.
func (s *Server) sandboxEvent(sb Sandbox, verb, path string, start time.Time) audit.Event {
	i := sb.Info()
	return audit.Event{Time: start, Event: audit.EventSandboxCall, SessionID: i.SessionID, Operation: verb, Path: path,
		Fields: map[string]string{"sandbox_id": i.ID}}
}

// endSandboxCall completes ev with its duration and outcome, records it,
// and returns the API error a failed call (err, on path) answers with; nil
// when it succeeded.
func (s *Server) endSandboxCall(ev audit.Event, err error, path string) *Error {
	ev.DurationMS = time.Since(ev.Time).Milliseconds()
	ev.Decision = "ok"
	var failed *Error
	if err != nil {
		failed = sandboxError(err, path)
		ev.Decision = "failed"
		ev.Reason = string(failed.Code)
	}
	s.cfg.Audit.Record(ev)
	return failed
}

// sandboxError maps a Sandbox error to the API's: file errors keep their
// errno name and path, a gone container is 410, a request body past its
// limit 413.
func sandboxError(err error, path string) *Error {
	var fe *SandboxFSError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return bodyError(err)
	case errors.Is(err, ErrSandboxGone):
		return apiErr(http.StatusGone, CodeSandboxGone,
			"the sandbox is gone: its container died or was removed; start another with `aileron-proxy sandbox up`").with("path", path)
	case errors.As(err, &fe):
		return apiErr(fsStatus(fe.Code), contract.Code(fe.Code), fe.Message).with("path", fe.Path)
	case errors.Is(err, context.Canceled):
		return apiErr(499, contract.CodeClientClosed, "the client closed the request").because(err)
	}
	return apiErr(http.StatusInternalServerError, CodeInternal, "the sandbox call failed; see the daemon log").because(err)
}

// fsStatus is the HTTP status of an errno name.
func fsStatus(code string) int {
	switch code {
	case "ENOENT":
		return http.StatusNotFound
	case "EEXIST", "ENOTEMPTY":
		return http.StatusConflict
	case "EACCES", "EPERM", "EROFS":
		return http.StatusForbidden
	}
	return http.StatusBadRequest
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
