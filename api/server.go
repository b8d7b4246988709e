// Package api is the daemon's control API, served by echo on the API
// listener: sessions and approvals for the operator (admin token), and the
// sandbox-side endpoints (session API token) that run connector operations.
//
// The API never talks to an upstream itself: the run endpoint and the
// sandbox request boundary send each call through the session's own MITM
// proxy as an ordinary proxy client, so matching, credential injection,
// approvals and audit happen in the proxy and nowhere else.
package api

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/actions"
	"github.com/aileron-dev/aileron-proxy/approval"
	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/internal/hostport"
	"github.com/aileron-dev/aileron-proxy/policy"
	"github.com/aileron-dev/aileron-proxy/session"
)

// Defaults for Config fields left zero.
const (
	DefaultMaxBodyBytes     = 1 << 20
	DefaultMaxResponseBytes = 16 << 20
	DefaultUpstreamTimeout  = 60 * time.Second
)

// Header names the API reads or sends.
const (
	// HeaderSessionID, when a sandbox sends it, must name the session of its
	// API token.
	HeaderSessionID = "X-Aileron-Session-Id"
	// HeaderInternal carries Config.ProxyInternalKey to the proxy, which
	// honours HeaderSource and HeaderAuditArgs only when it matches.
	HeaderInternal = contract.HeaderInternal
	// HeaderSource names the API endpoint a proxied request came from.
	HeaderSource = contract.HeaderSource
	// HeaderAuditArgs is base64url(JSON object) of the args the operation's
	// args.<input> audit fields name, keyed by input name; the proxy
	// evaluates (and redacts) the audit fields.
	HeaderAuditArgs = contract.HeaderAuditArgs
	// HeaderDecision is set by the proxy on responses it originates.
	HeaderDecision = contract.HeaderDecision
	// HeaderAuditID is set by the proxy to the audit_id of its event, and
	// by the API on every 200 reply of the run and request endpoints.
	HeaderAuditID = contract.HeaderAuditID
	// HeaderUpstreamStatus is set on every 200 reply of the run and
	// request endpoints to the upstream's status code, so a client that
	// cannot parse JSON (a POSIX sh shim) still learns it.
	HeaderUpstreamStatus = "X-Aileron-Upstream-Status"
	// HeaderOutput, sent as "X-Aileron-Output: body", asks for the raw
	// upstream body (with the upstream's Content-Type) instead of the JSON
	// envelope; the envelope's other fields travel in headers.
	HeaderOutput = "X-Aileron-Output"
	// OutputBody is the value of HeaderOutput that selects the raw body.
	OutputBody = "body"
)

// Values of HeaderSource.
const (
	SourceRunEndpoint  = contract.SourceRunEndpoint
	SourceSandboxProxy = contract.SourceSandboxProxy
)

// Config holds the API server's dependencies. Fields marked required make
// New fail when missing.
type Config struct {
	// Logger receives one line per request. Required.
	Logger *zap.Logger
	// Sessions is the daemon's session registry. Required.
	Sessions *session.Registry
	// Policy returns the current policy snapshot (nil before the first
	// load). Required.
	Policy func() *policy.Snapshot
	// Approvals is the approval broker the proxy holds requests in.
	// Required.
	Approvals *approval.Broker
	// Audit records session.created and the run endpoint's refusals (the
	// proxy audits everything it forwards). Required. When it also
	// implements audit.Health (audit.Writer does), calls that change
	// state are refused with 503 audit_unavailable while it is
	// unavailable, and GET /healthz reports it.
	Audit audit.Recorder
	// AdminToken authenticates the operator endpoints. Required.
	AdminToken string
	// ProxyAddr is the host:port the API dials to reach the MITM proxy.
	// Required.
	ProxyAddr string
	// AdvertiseProxyAddr is the host:port put in session proxy URLs (e.g.
	// an address containers reach); empty means ProxyAddr.
	AdvertiseProxyAddr string
	// ProxyInternalKey is the per-process key the proxy trusts for
	// HeaderSource and HeaderAuditArgs. Required.
	ProxyInternalKey string
	// AllowedHosts are extra Host header names accepted besides IP literals
	// and "localhost" (e.g. "host.docker.internal"). Ports are ignored.
	AllowedHosts []string
	// SessionFiles writes the session's CA files and returns their paths
	// (ca_file, ca_bundle_file); nil leaves both empty in the response.
	SessionFiles func(s *session.Session) (caFile, bundleFile string, err error)
	// MaxBodyBytes caps request bodies; zero means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxResponseBytes caps an upstream body put in an envelope; zero means
	// DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// MCP tunes the session MCP servers of /v1/mcp; zero fields take the
	// defaults.
	MCP MCPConfig
	// UpstreamTimeout bounds one proxied call, not counting the time it is
	// held for approval; zero means DefaultUpstreamTimeout.
	UpstreamTimeout time.Duration
	// Registerer receives the API's metrics. Required.
	Registerer prometheus.Registerer
	// Gatherer is served on GET /metrics. Required.
	Gatherer prometheus.Gatherer
	// Actions returns the runnable installed actions by name; nil means
	// none (POST /v1/actions/{name}/run answers 404).
	Actions func() map[string]actions.Installed
	// Console, when set, is served under /ui/ and mints the sign-in links
	// of POST /v1/console/login; nil serves no console.
	Console ConsoleHandler
	// Sandboxes owns the long-lived sandboxes of /v1/sandboxes; nil
	// answers 404 there.
	Sandboxes SandboxManager
	// DialContext dials the proxy; nil means a net.Dialer.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Server is the control API.
type Server struct {
	cfg     Config
	log     *zap.Logger
	e       *echo.Echo
	clients *clientCache
	// mcp holds the sessions' MCP servers (mcp.go).
	mcp     mcpSessions
	metrics *metrics
	admin   [sha256.Size]byte
	hosts   map[string]bool

	metricsHandler http.Handler
	// throttle backs off failed authentication (backoff.go).
	throttle *authThrottle
	// auditHealth is the audit log's health when Config.Audit reports it
	// (audit.Health); nil when it cannot tell.
	auditHealth audit.Health
}

// New checks cfg and builds the server and its route table.
func New(cfg Config) (*Server, error) {
	var missing []string
	for _, m := range []struct {
		name  string
		unset bool
	}{
		{"Logger", cfg.Logger == nil},
		{"Sessions", cfg.Sessions == nil},
		{"Policy", cfg.Policy == nil},
		{"Approvals", cfg.Approvals == nil},
		{"Audit", cfg.Audit == nil},
		{"AdminToken", cfg.AdminToken == ""},
		{"ProxyAddr", cfg.ProxyAddr == ""},
		{"ProxyInternalKey", cfg.ProxyInternalKey == ""},
		{"Registerer", cfg.Registerer == nil},
		{"Gatherer", cfg.Gatherer == nil},
	} {
		if m.unset {
			missing = append(missing, m.name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("creating the API server: required config missing: %s", strings.Join(missing, ", "))
	}
	if _, err := hostport.NewAddr(cfg.ProxyAddr); err != nil {
		return nil, fmt.Errorf("creating the API server: ProxyAddr: %w", err)
	}
	if cfg.AdvertiseProxyAddr == "" {
		cfg.AdvertiseProxyAddr = cfg.ProxyAddr
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	cfg.MCP = cfg.MCP.withDefaults()
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if cfg.UpstreamTimeout <= 0 {
		cfg.UpstreamTimeout = DefaultUpstreamTimeout
	}
	if cfg.DialContext == nil {
		d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
		cfg.DialContext = d.DialContext
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("creating the API server: registering metrics: %w", err)
	}
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger.Named("api"),
		metrics: m,
		admin:   sha256.Sum256([]byte(cfg.AdminToken)),
		hosts:   map[string]bool{"localhost": true},

		metricsHandler: newMetricsHandler(cfg.Gatherer),
	}
	if s.throttle, err = newAuthThrottle(cfg.Registerer); err != nil {
		return nil, fmt.Errorf("creating the API server: registering metrics: %w", err)
	}
	for i, h := range cfg.AllowedHosts {
		hp, err := hostport.New(h)
		if err != nil {
			return nil, fmt.Errorf("creating the API server: AllowedHosts[%d]: %w", i, err)
		}
		s.hosts[hp.Host] = true
	}
	if h, ok := cfg.Audit.(audit.Health); ok {
		s.auditHealth = h
	}
	s.clients = newClientCache(cfg)
	s.e = s.newEcho()
	return s, nil
}

// authKind says how a route authenticates.
type authKind int

const (
	authNone authKind = iota + 1
	authAdmin
	authSession
	// authSessionOrBody is authSession that also takes the session's API
	// token from the JSON body's "api_token" member when no Authorization
	// header is sent: a client such as BusyBox wget can send headers only
	// as arguments, where the token would show in every process listing.
	authSessionOrBody
	// authSandbox takes a sandbox's control token (sandboxes.go).
	authSandbox
)

// route is one row of the route table.
type route struct {
	method, path string
	auth         authKind
	handler      echo.HandlerFunc
	// maxBody caps the request body; zero means Config.MaxBodyBytes.
	maxBody int64
}

// routes is the one route table of the API.
func (s *Server) routes() []route {
	return append([]route{
		{http.MethodGet, "/healthz", authNone, s.healthz, 0},
		{http.MethodGet, "/metrics", authNone, s.serveMetrics, 0},
		{http.MethodGet, "/v1/openapi.json", authNone, s.openAPI, 0},
		{http.MethodPost, "/v1/sessions", authAdmin, s.createSession, 0},
		{http.MethodGet, "/v1/sessions", authAdmin, s.listSessions, 0},
		{http.MethodDelete, "/v1/sessions/:id", authAdmin, s.endSession, 0},
		{http.MethodGet, "/v1/approvals", authAdmin, s.listApprovals, 0},
		{http.MethodPost, "/v1/approvals/:id", authAdmin, s.decideApproval, 0},
		{http.MethodPost, "/v1/connector-operations/run", authSessionOrBody, s.runOperation, 0},
		{http.MethodPost, "/v1/actions/:name/run", authSessionOrBody, s.runAction, 0},
		{http.MethodPost, "/v1/sandbox-proxy/requests", authSession, s.sandboxProxy, 0},
		{http.MethodPost, "/v1/console/login", authAdmin, s.consoleLogin, 0},
		{http.MethodGet, "/ui", authNone, s.serveConsole, 0},
		{http.MethodGet, "/ui/*", authNone, s.serveConsole, 0},
		{http.MethodPost, "/ui/*", authNone, s.serveConsole, 0},
	}, append(s.sandboxRoutes(), s.mcpRoutes()...)...)
}

func (s *Server) newEcho() *echo.Echo {
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = s.handleError
	e.Use(s.observe, s.recoverPanic, s.guard)
	for _, r := range s.routes() {
		mw := []echo.MiddlewareFunc{s.limitBody(cmp.Or(r.maxBody, s.cfg.MaxBodyBytes))}
		switch r.auth {
		case authAdmin:
			mw = append(mw, s.requireAdmin)
		case authSession:
			mw = append(mw, s.requireSession)
		case authSessionOrBody:
			mw = append(mw, s.requireSessionOrBodyToken)
		case authSandbox:
			mw = append(mw, s.requireSandbox)
		}
		if changesState(r) {
			mw = append(mw, s.requireAudit)
		}
		e.Add(r.method, r.path, r.handler, mw...)
	}
	return e
}

// Handler returns the API's http.Handler.
func (s *Server) Handler() http.Handler { return s.e }

// HTTPServer returns an http.Server for the API with its timeouts set; the
// caller serves it on a listener. WriteTimeout allows a request held for
// approval plus UpstreamTimeout.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s.e,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      s.callTimeout() + 30*time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          zap.NewStdLog(s.log.Named("http")),
	}
}

// callTimeout bounds one proxied call including its approval hold.
func (s *Server) callTimeout() time.Duration {
	return s.cfg.UpstreamTimeout + s.cfg.Approvals.Timeout()
}

// SessionEnded drops what the API keeps for session id (its proxy client);
// the daemon calls it from the registry's OnEnd hook.
func (s *Server) SessionEnded(id string) {
	s.clients.forget(id)
	s.endMCP(id)
}

// Close releases idle connections to the proxy.
func (s *Server) Close() { s.clients.closeAll() }

// Context keys set by middleware.
const (
	ctxSession   = "aileron.session"
	ctxErrorCode = "aileron.error_code"
)

func sessionFrom(c echo.Context) *session.Session {
	s, _ := c.Get(ctxSession).(*session.Session)
	return s
}

// observe records metrics and the one log line of each request.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		routePath := c.Path()
		if routePath == "" {
			routePath = "unmatched"
		}
		status := c.Response().Status
		d := time.Since(start)
		s.metrics.observe(routePath, c.Request().Method, status, d)
		level := zap.InfoLevel
		if routePath == "/healthz" || routePath == "/metrics" {
			level = zap.DebugLevel
		} else if status >= 400 {
			level = zap.WarnLevel
		}
		if ce := s.log.Check(level, "api request"); ce != nil {
			fields := []zap.Field{
				zap.String("method", c.Request().Method),
				zap.String("route", routePath),
				zap.Int("status", status),
				zap.Int64("duration_ms", d.Milliseconds()),
			}
			if sess := sessionFrom(c); sess != nil {
				fields = append(fields, zap.String("session_id", sess.ID))
			}
			if code, _ := c.Get(ctxErrorCode).(string); code != "" {
				fields = append(fields, zap.String("code", code))
			}
			ce.Write(fields...)
		}
		return nil
	}
}

func (s *Server) recoverPanic(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler {
					panic(r)
				}
				err = apiErr(http.StatusInternalServerError, CodeInternal, "internal error; see the daemon log").
					because(fmt.Errorf("panic: %v", r))
			}
		}()
		return next(c)
	}
}

// guard checks the Host header (DNS-rebinding defence) and refuses browser
// requests (Origin or Referer present) outside the web console, which
// checks same-origin itself.
func (s *Server) guard(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if !s.isAllowedHost(r.Host) {
			return apiErr(http.StatusForbidden, CodeForbiddenHost,
				"the Host header names neither a loopback name, an IP address nor a configured API host; call the API by the address in daemon.json")
		}
		if (r.Header.Get("Origin") != "" || r.Header.Get("Referer") != "") && !isConsolePath(r.URL.Path) {
			return apiErr(http.StatusForbidden, CodeForbiddenOrigin,
				"browser requests are refused: the API takes no requests carrying Origin or Referer")
		}
		return next(c)
	}
}

// limitBody caps a route's request body at limit bytes: a declared
// length past it is refused at once, a longer body fails when read (413
// through bodyError).
func (s *Server) limitBody(limit int64) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if r.ContentLength > limit {
				return apiErr(http.StatusRequestEntityTooLarge, CodeBodyTooLarge,
					fmt.Sprintf("request body is larger than %d bytes", limit))
			}
			if r.Body != nil {
				r.Body = http.MaxBytesReader(c.Response(), r.Body, limit)
			}
			return next(c)
		}
	}
}

// isAllowedHost accepts IP literals (a rebinding attack cannot make a
// browser send one it did not resolve), "localhost" and AllowedHosts. The
// Host header is parsed with the one host grammar (internal/hostport); a
// value it refuses is not allowed.
func (s *Server) isAllowedHost(h string) bool {
	hp, err := hostport.New(h)
	if err != nil {
		return false
	}
	return hp.IsIP() || s.hosts[hp.Host]
}

// bearer returns the token of an "Authorization: Bearer" header.
func bearer(r *http.Request) (string, bool) {
	v := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

func (s *Server) requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := s.checkThrottle(c, throttleAdmin); err != nil {
			return err
		}
		tok, ok := bearer(c.Request())
		d := sha256.Sum256([]byte(tok))
		if !ok || subtle.ConstantTimeCompare(d[:], s.admin[:]) != 1 {
			if ok {
				s.authFailed(c, throttleAdmin)
			}
			return apiErr(http.StatusUnauthorized, CodeUnauthorized,
				"this endpoint needs the daemon's admin token (Authorization: Bearer <admin_token> from daemon.json)")
		}
		return next(c)
	}
}

func (s *Server) requireSession(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		tok, ok := bearer(c.Request())
		if !ok {
			return apiErr(http.StatusUnauthorized, CodeUnauthorized,
				"this endpoint needs the session's API token (Authorization: Bearer <api_token>)")
		}
		return s.withSession(c, tok, next)
	}
}

// requireSessionOrBodyToken is requireSession that, without an
// Authorization header, takes the token from the JSON body's "api_token"
// (authSessionOrBody). The body, already bounded by guard, is read whole
// and handed on unchanged.
func (s *Server) requireSessionOrBodyToken(next echo.HandlerFunc) echo.HandlerFunc {
	withHeader := s.requireSession(next)
	return func(c echo.Context) error {
		r := c.Request()
		if r.Header.Get("Authorization") != "" || r.Body == nil {
			return withHeader(c)
		}
		if err := checkJSONContentType(r); err != nil {
			return err
		}
		raw, err := io.ReadAll(r.Body)
		if err != nil {
			return bodyError(err)
		}
		r.Body = io.NopCloser(bytes.NewReader(raw))
		var probe struct {
			APIToken string `json:"api_token"`
		}
		if err := json.Unmarshal(raw, &probe); err != nil {
			return bodyError(err)
		}
		if probe.APIToken == "" {
			return apiErr(http.StatusUnauthorized, CodeUnauthorized,
				"this endpoint needs the session's API token (Authorization: Bearer <api_token>, or \"api_token\" in the body)")
		}
		return s.withSession(c, probe.APIToken, next)
	}
}

// withSession authenticates tok as a session's API token and runs next with
// the session set.
func (s *Server) withSession(c echo.Context, tok string, next echo.HandlerFunc) error {
	key := throttleSession + c.Request().Header.Get(HeaderSessionID)
	if err := s.checkThrottle(c, key); err != nil {
		return err
	}
	sess, err := s.cfg.Sessions.AuthenticateAPI(tok)
	switch {
	case errors.Is(err, session.ErrSessionExpired):
		return apiErr(http.StatusUnauthorized, CodeSessionExpired, "the session has expired; create a new one")
	case errors.Is(err, session.ErrSessionEnded):
		return apiErr(http.StatusUnauthorized, CodeSessionEnded, "the session has ended; create a new one")
	case err != nil:
		s.authFailed(c, key)
		return apiErr(http.StatusUnauthorized, CodeUnauthorized,
			"the API token is not valid for any live session; use the api_token returned when the session was created")
	}
	if hdr := c.Request().Header.Get(HeaderSessionID); hdr != "" && hdr != sess.ID {
		return apiErr(http.StatusForbidden, CodeSessionMismatch,
			fmt.Sprintf("%s names a different session than the API token; a token acts only for its own session", HeaderSessionID))
	}
	c.Set(ctxSession, sess)
	return next(c)
}
