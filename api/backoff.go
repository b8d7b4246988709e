package api

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/proxy"
)

// CodeAuthThrottled answers a request refused, unchecked, because its
// source sent wrong tokens too often (the proxy's code too).
const CodeAuthThrottled = contract.CodeAuthThrottled

// authThrottle is the API's backoff for failed authentication: the proxy's
// AuthBackoff keyed by the client address and the credential it aims at
// ("admin", or the session named in X-Aileron-Session-Id).
type authThrottle struct {
	backoff   *proxy.AuthBackoff
	throttled prometheus.Counter
}

func newAuthThrottle(reg prometheus.Registerer) (*authThrottle, error) {
	t := &authThrottle{
		backoff: proxy.NewAuthBackoff(0, 0, nil),
		throttled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "aileron_api_auth_throttled_total",
			Help: "Control API requests refused with 429 because their source failed authentication too often.",
		}),
	}
	if err := reg.Register(t.throttled); err != nil {
		return nil, err
	}
	return t, nil
}

// Keys of the API's backoff: the admin token, and a prefix before the
// session or sandbox ID the request names.
const (
	throttleAdmin   = "admin"
	throttleSession = "session:"
	throttleSandbox = "sandbox:"
)

// checkThrottle refuses c with 429 and Retry-After while its source is
// throttled for key.
func (s *Server) checkThrottle(c echo.Context, key string) error {
	th, wait := s.throttle.backoff.Throttled(proxy.SourceOf(c.Request().RemoteAddr), key)
	if !th {
		return nil
	}
	s.throttle.throttled.Inc()
	secs := max(int((wait+time.Second-1)/time.Second), 1)
	c.Response().Header().Set("Retry-After", strconv.Itoa(secs))
	return apiErr(http.StatusTooManyRequests, CodeAuthThrottled,
		fmt.Sprintf("too many failed authentications from this address; retry after %d s with a valid token", secs))
}

// authFailed records a wrong token; the first failure that throttles a
// burst is audited and logged once.
func (s *Server) authFailed(c echo.Context, key string) {
	src := proxy.SourceOf(c.Request().RemoteAddr)
	if !s.throttle.backoff.Fail(src, key) {
		return
	}
	s.cfg.Audit.Record(audit.Event{Event: audit.EventDenied, Decision: contract.DecisionDenied, Reason: CodeAuthThrottled.String(),
		Status: http.StatusTooManyRequests, Method: c.Request().Method, Path: c.Path(), Source: "api",
		Fields: map[string]string{"client": src}})
	s.log.Warn("api authentication throttled", zap.String("client", src), zap.String("route", c.Path()))
}
