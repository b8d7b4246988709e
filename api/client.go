package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strconv"

	"github.com/aileron-dev/aileron-proxy/approval"
)

// DaemonInfo is the content of $AILERON_HOME/daemon.json, written by
// `aileron-proxy serve` (0600) and removed on clean shutdown.
type DaemonInfo struct {
	// APIURL is the control API's base URL, e.g. http://127.0.0.1:7700.
	APIURL string `json:"api_url"`
	// ProxyAddr is the MITM proxy's host:port.
	ProxyAddr string `json:"proxy_addr"`
	// AdminToken authenticates the operator endpoints.
	AdminToken string `json:"admin_token"`
	// PID is the daemon's process ID.
	PID int `json:"pid"`
}

// ErrNoDaemon is returned by NewClient when daemon.json does not exist.
var ErrNoDaemon = errors.New("no aileron-proxy daemon is running (daemon.json not found); start one with `aileron-proxy serve`")

// ReadDaemonInfo reads and checks a daemon.json.
func ReadDaemonInfo(path string) (*DaemonInfo, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNoDaemon
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	var info DaemonInfo
	if err := json.Unmarshal(raw, &info); err != nil {
		return nil, fmt.Errorf("parsing %s: %w (remove the file if no daemon is running, then start one with `aileron-proxy serve`)", path, err)
	}
	u, err := url.Parse(info.APIURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("reading %s: api_url %q is not an http(s) URL (remove the file and restart `aileron-proxy serve`)", path, info.APIURL)
	}
	if info.AdminToken == "" {
		return nil, fmt.Errorf("reading %s: admin_token is empty (remove the file and restart `aileron-proxy serve`)", path)
	}
	return &info, nil
}

// Client calls the daemon's operator endpoints with the admin token from
// daemon.json. The CLI and the launcher use it.
type Client struct {
	info *DaemonInfo
	base string
	http *http.Client
	path string
}

// NewClient reads daemonJSONPath and returns a client for that daemon.
func NewClient(daemonJSONPath string) (*Client, error) {
	info, err := ReadDaemonInfo(daemonJSONPath)
	if err != nil {
		return nil, err
	}
	c := NewClientFor(*info)
	c.path = daemonJSONPath
	return c, nil
}

// Info returns the daemon's published address information.
func (c *Client) Info() DaemonInfo { return *c.info }

// APIError is an error response from the daemon.
type APIError struct {
	Status int
	Err    *Error
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s (%s, HTTP %d)", e.Err.Message, e.Err.Code, e.Status)
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encoding the request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("building the request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.info.AdminToken)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("calling the aileron-proxy daemon at %s: %w (is `aileron-proxy serve` running? %s may be stale from pid %d)",
			c.base, err, c.path, c.info.PID)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("reading the daemon's response: %w", err)
	}
	if resp.StatusCode >= 400 {
		var eb errorBody
		if json.Unmarshal(raw, &eb) == nil && eb.Error != nil && eb.Error.Code != "" {
			eb.Error.Status = resp.StatusCode
			return &APIError{Status: resp.StatusCode, Err: eb.Error}
		}
		return &APIError{Status: resp.StatusCode, Err: apiErr(resp.StatusCode, "http_error",
			fmt.Sprintf("the daemon answered %s", resp.Status))}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("parsing the daemon's response: %w", err)
	}
	return nil
}

// CreateSession calls POST /v1/sessions.
func (c *Client) CreateSession(ctx context.Context, req CreateSessionRequest) (*CreatedSession, error) {
	var out CreatedSession
	if err := c.do(ctx, http.MethodPost, "/v1/sessions", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListSessions calls GET /v1/sessions.
func (c *Client) ListSessions(ctx context.Context) ([]SessionInfo, error) {
	var out SessionList
	if err := c.do(ctx, http.MethodGet, "/v1/sessions", nil, &out); err != nil {
		return nil, err
	}
	return out.Sessions, nil
}

// EndSession calls DELETE /v1/sessions/{id}.
func (c *Client) EndSession(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/sessions/"+url.PathEscape(id), nil, nil)
}

// EndSessionWithExitCode calls DELETE /v1/sessions/ID?exit_code=N, so the
// session.ended audit event records the sandbox's exit status.
func (c *Client) EndSessionWithExitCode(ctx context.Context, id string, code int) error {
	return c.do(ctx, http.MethodDelete, "/v1/sessions/"+url.PathEscape(id)+"?exit_code="+strconv.Itoa(code), nil, nil)
}

// ListApprovals calls GET /v1/approvals?state=STATE (pending, decided or
// all; empty means pending).
func (c *Client) ListApprovals(ctx context.Context, state string) ([]approval.Pending, error) {
	path := "/v1/approvals"
	if state != "" {
		path += "?state=" + url.QueryEscape(state)
	}
	var out ApprovalList
	if err := c.do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return out.Approvals, nil
}

// DecideApproval calls POST /v1/approvals/{id}.
func (c *Client) DecideApproval(ctx context.Context, id string, d approval.Decision, remember approval.Remember) (*DecidedApproval, error) {
	var out DecidedApproval
	req := DecideRequest{Decision: d.String(), Remember: remember.String()}
	if err := c.do(ctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(id), req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
