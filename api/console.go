package api

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
)

// ConsoleHandler is the web console the API mounts under /ui/ (package
// console). It does its own sign-in, CSRF and same-origin checks; the API's
// guard still checks the Host header first.
type ConsoleHandler interface {
	http.Handler
	// NewLoginURL mints a one-time sign-in link.
	NewLoginURL() (url string, expires time.Time, err error)
	// HasViewer reports whether a browser has the console open.
	HasViewer() bool
}

// ConsoleLogin is the response of POST /v1/console/login.
type ConsoleLogin struct {
	// URL is the one-time sign-in link.
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
}

// isConsolePath reports whether path belongs to the web console.
func isConsolePath(path string) bool { return path == "/ui" || strings.HasPrefix(path, "/ui/") }

// serveConsole hands /ui/ to the console.
func (s *Server) serveConsole(c echo.Context) error {
	if s.cfg.Console == nil {
		return apiErr(http.StatusNotFound, CodeNotFound, "this daemon serves no web console")
	}
	if c.Request().URL.Path == "/ui" {
		return c.Redirect(http.StatusSeeOther, "/ui/")
	}
	s.cfg.Console.ServeHTTP(c.Response(), c.Request())
	return nil
}

// consoleLogin is POST /v1/console/login: a fresh one-time sign-in link
// for `aileron-proxy ui`.
func (s *Server) consoleLogin(c echo.Context) error {
	if s.cfg.Console == nil {
		return apiErr(http.StatusNotFound, CodeNotFound, "this daemon serves no web console")
	}
	u, exp, err := s.cfg.Console.NewLoginURL()
	if err != nil {
		return apiErr(http.StatusInternalServerError, CodeInternal, "minting a sign-in link failed; see the daemon log").because(err)
	}
	return c.JSON(http.StatusOK, ConsoleLogin{URL: u, ExpiresAt: exp.UTC()})
}

// PendingApprovals calls GET /v1/approvals and returns the whole answer,
// console_open included.
func (c *Client) PendingApprovals(ctx context.Context) (*ApprovalList, error) {
	var out ApprovalList
	if err := c.do(ctx, http.MethodGet, "/v1/approvals", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ConsoleLogin asks the daemon for a one-time console sign-in link.
func (c *Client) ConsoleLogin(ctx context.Context) (*ConsoleLogin, error) {
	var out ConsoleLogin
	if err := c.do(ctx, http.MethodPost, "/v1/console/login", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
