package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/approval"
	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/session"
)

// CreateSessionRequest is the body of POST /v1/sessions.
type CreateSessionRequest struct {
	// Connectors are connector FQNs; empty means every active connector.
	Connectors []string `json:"connectors,omitempty"`
	// TTL is a Go duration ("8h", "90m") or whole days ("2d"); empty means
	// the default (8h).
	TTL string `json:"ttl,omitempty"`
	// Agent and Project label the session for people (launch sets the
	// agent command and the project directory); optional.
	Agent   string `json:"agent,omitempty"`
	Project string `json:"project,omitempty"`
	// ApprovalSurface is "both" (default), "cli" (the web console shows
	// but does not decide this session's approvals) or "api".
	ApprovalSurface string `json:"approval_surface,omitempty"`
	// Learn are host patterns ("api.example.com", "*.example.org") that make
	// this a learn session: requests to matching hosts that no operation
	// matches are forwarded without credentials and recorded for
	// `connector draft`. Its TTL then defaults to 1h.
	Learn []string `json:"learn,omitempty"`
}

// CreatedSession is the 201 response of POST /v1/sessions. It is the only
// response that carries the session's secrets.
type CreatedSession struct {
	ID       string `json:"id"`
	APIToken string `json:"api_token"`
	// ProxyURL is http://<id>:<proxy secret>@<proxy addr>.
	ProxyURL string `json:"proxy_url"`
	CAPEM    string `json:"ca_pem"`
	// CAFile is the session CA in PEM; CABundleFile the session CA followed
	// by the system roots. Empty when the daemon writes no files.
	CAFile       string    `json:"ca_file"`
	CABundleFile string    `json:"ca_bundle_file"`
	ExpiresAt    time.Time `json:"expires_at"`
	Connectors   []string  `json:"connectors"`
	Hosts        []string  `json:"hosts"`
	// Learn are the learn patterns, normal form; absent for an ordinary
	// session.
	Learn []string `json:"learn,omitempty"`
}

// SessionInfo describes a live session without its secrets.
type SessionInfo struct {
	ID         string    `json:"id"`
	Connectors []string  `json:"connectors"`
	Hosts      []string  `json:"hosts"`
	CreatedAt  time.Time `json:"created_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	Agent      string    `json:"agent,omitempty"`
	Project    string    `json:"project,omitempty"`
	// ApprovalSurface is "both", "cli" or "api".
	ApprovalSurface string `json:"approval_surface"`
	// Learn are the learn patterns of a learn session.
	Learn []string `json:"learn,omitempty"`
}

// SessionList is the response of GET /v1/sessions.
type SessionList struct {
	Sessions []SessionInfo `json:"sessions"`
}

// EndedSession is the response of DELETE /v1/sessions/{id}.
type EndedSession struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

// ParseTTL parses a session TTL: a Go duration ("8h", "90m") or whole days
// ("7d"), at most session.MaxTTL. Empty means zero (the registry's
// default).
func ParseTTL(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	const day = 24 * time.Hour
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		switch {
		case errors.Is(err, strconv.ErrRange) || (err == nil && n > int64(session.MaxTTL/day)):
			return 0, ttlTooLong(s)
		case err != nil || n <= 0:
			return 0, fmt.Errorf("ttl %q is not valid; use a duration such as \"8h\", \"90m\" or \"2d\"", s)
		}
		d = time.Duration(n) * day
	} else {
		var err error
		d, err = time.ParseDuration(s)
		if err != nil && durationRE.MatchString(s) {
			return 0, ttlTooLong(s)
		}
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("ttl %q is not valid; use a positive duration such as \"8h\", \"90m\" or \"2d\"", s)
		}
	}
	if d > session.MaxTTL {
		return 0, ttlTooLong(s)
	}
	return d, nil
}

// durationRE is the grammar of a positive time.ParseDuration string: a
// string it matches that ParseDuration still refuses can only be too large
// for time.Duration (ParseDuration reports that as merely invalid).
var durationRE = regexp.MustCompile(`^\+?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+$`)

func ttlTooLong(s string) error {
	return fmt.Errorf("ttl %q exceeds the maximum of %s (%dd); use a shorter ttl", s, session.MaxTTL, session.MaxTTL/(24*time.Hour))
}
func infoOf(s *session.Session) SessionInfo {
	return SessionInfo{
		ID:              s.ID,
		Connectors:      nonNil(s.Connectors),
		Hosts:           nonNil(s.Hosts),
		CreatedAt:       s.CreatedAt.UTC(),
		ExpiresAt:       s.ExpiresAt.UTC(),
		Agent:           s.Agent,
		Project:         s.Project,
		ApprovalSurface: approval.Surface(s.ApprovalSurface).String(),
		Learn:           s.Learn,
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// createSession is POST /v1/sessions.
func (s *Server) createSession(c echo.Context) error {
	var req CreateSessionRequest
	if c.Request().ContentLength != 0 {
		if err := decodeJSON(c.Request(), &req); err != nil {
			return err
		}
	}
	ttl, err := ParseTTL(req.TTL)
	if err != nil {
		return apiErr(http.StatusBadRequest, CodeInvalidBody, err.Error())
	}
	surface, err := approval.ParseSurface(req.ApprovalSurface)
	if err != nil {
		return apiErr(http.StatusBadRequest, CodeInvalidBody, err.Error())
	}
	snap, err := s.snapshot()
	if err != nil {
		return err
	}
	sess, sec, err := s.cfg.Sessions.Create(session.CreateOptions{Connectors: req.Connectors, TTL: ttl, Snapshot: snap, Agent: req.Agent, Project: req.Project,
		ApprovalSurface: surface.String(), Learn: req.Learn})
	if err != nil {
		var uce *session.UnknownConnectorsError
		if errors.As(err, &uce) {
			return apiErr(http.StatusBadRequest, CodeUnknownConnector, err.Error()).
				with("unknown", uce.Unknown).with("available_connectors", nonNil(uce.Available))
		}
		if errors.Is(err, session.ErrInvalidOptions) {
			return apiErr(http.StatusBadRequest, CodeInvalidBody, err.Error())
		}
		return apiErr(http.StatusInternalServerError, CodeInternal, "creating the session failed; see the daemon log").because(err)
	}
	// Keep what the run endpoint needs before anything can fail.
	s.clients.add(sess, sec.ProxySecret)
	var caFile, bundleFile string
	if s.cfg.SessionFiles != nil {
		if caFile, bundleFile, err = s.cfg.SessionFiles(sess); err != nil {
			s.clients.forget(sess.ID)
			_ = s.cfg.Sessions.End(sess.ID)
			return apiErr(http.StatusInternalServerError, CodeInternal, "writing the session's CA files failed; see the daemon log").because(err)
		}
	}
	s.clients.prune(func(id string) bool { _, ok := s.cfg.Sessions.Get(id); return ok })

	fields := map[string]string{
		"connectors": strings.Join(sess.Connectors, ","),
		"expires_at": sess.ExpiresAt.UTC().Format(time.RFC3339),
	}
	if sess.IsLearning() {
		fields["learn"] = strings.Join(sess.Learn, ",")
	}
	s.cfg.Audit.Record(audit.Event{Event: audit.EventSessionCreated, SessionID: sess.ID, Fields: fields})
	s.log.Info("session created", zap.String("session_id", sess.ID),
		zap.Strings("connectors", sess.Connectors), zap.Strings("learn", sess.Learn), zap.Time("expires_at", sess.ExpiresAt))

	proxyURL := (&url.URL{Scheme: "http", User: url.UserPassword(sess.ID, sec.ProxySecret), Host: s.cfg.AdvertiseProxyAddr}).String()
	return c.JSON(http.StatusCreated, CreatedSession{
		ID:           sess.ID,
		APIToken:     sec.APIToken,
		ProxyURL:     proxyURL,
		CAPEM:        string(sess.CAPEM),
		CAFile:       caFile,
		CABundleFile: bundleFile,
		ExpiresAt:    sess.ExpiresAt.UTC(),
		Connectors:   nonNil(sess.Connectors),
		Hosts:        nonNil(sess.Hosts),
		Learn:        sess.Learn,
	})
}

// listSessions is GET /v1/sessions.
func (s *Server) listSessions(c echo.Context) error {
	out := SessionList{Sessions: []SessionInfo{}}
	for _, sess := range s.cfg.Sessions.List() {
		out.Sessions = append(out.Sessions, infoOf(sess))
	}
	return c.JSON(http.StatusOK, out)
}

// endSession is DELETE /v1/sessions/{id}.
func (s *Server) endSession(c echo.Context) error {
	id := c.Param("id")
	var err error
	if raw := c.QueryParam("exit_code"); raw != "" {
		code, perr := strconv.Atoi(raw)
		if perr != nil || code < 0 || code > 255 {
			return apiErr(http.StatusBadRequest, CodeInvalidBody, fmt.Sprintf("exit_code %q must be an integer from 0 to 255", raw))
		}
		err = s.cfg.Sessions.EndWithExitCode(id, code)
	} else {
		err = s.cfg.Sessions.End(id)
	}
	s.clients.forget(id)
	switch {
	case err == nil:
		return c.JSON(http.StatusOK, EndedSession{ID: id, State: "ended"})
	case errors.Is(err, session.ErrUnknownSession):
		return apiErr(http.StatusNotFound, CodeSessionNotFound, fmt.Sprintf("no session %q; `aileron-proxy session list` shows the live ones", id))
	case errors.Is(err, session.ErrSessionEnded):
		return apiErr(http.StatusConflict, CodeSessionEnded, fmt.Sprintf("session %q has already ended", id))
	case errors.Is(err, session.ErrSessionExpired):
		return apiErr(http.StatusConflict, CodeSessionExpired, fmt.Sprintf("session %q has already expired", id))
	}
	return apiErr(http.StatusInternalServerError, CodeInternal, "ending the session failed; see the daemon log").because(err)
}
