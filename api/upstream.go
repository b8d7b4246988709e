package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/internal/preview"
	"github.com/aileron-dev/aileron-proxy/session"
)

// sessionClient is how the API reaches the proxy as one session: the
// session's proxy credential and a transport trusting only its CA. The
// transport is built at first use: most sessions of a fleet never call the
// run endpoint, and an idle one then costs only its secret here.
type sessionClient struct {
	cc     *clientCache
	sess   *session.Session
	secret string

	once      sync.Once
	transport *http.Transport // nil until built
	err       error
	built     atomic.Bool
}

// roundTripper returns the session's transport, building it on first use.
func (sc *sessionClient) roundTripper() (*http.Transport, error) {
	sc.once.Do(func() {
		sc.transport, sc.err = sc.cc.newTransport(sc.sess, sc.secret)
		sc.built.Store(sc.err == nil)
	})
	return sc.transport, sc.err
}

// closeIdle closes the transport's idle connections, if it was built.
func (sc *sessionClient) closeIdle() {
	if sc.built.Load() {
		sc.transport.CloseIdleConnections()
	}
}

// clientCache keeps one sessionClient per session created through this
// server. The registry returns a session's proxy secret only once, at
// creation, so the API keeps it here (in memory, never logged) for the run
// endpoint.
type clientCache struct {
	cfg Config
	mu  sync.Mutex
	m   map[string]*sessionClient
	// pruneAt is the cache size at which add next prunes: twice the size
	// after the last prune, so pruning costs O(1) per session amortized.
	pruneAt int
}

func newClientCache(cfg Config) *clientCache {
	return &clientCache{cfg: cfg, m: map[string]*sessionClient{}}
}

// proxyConnectError is a proxy's refusal of our CONNECT.
type proxyConnectError struct {
	status     int
	body       []byte
	retryAfter string // the refusal's Retry-After (429 tunnel limit), or ""
}

func (e *proxyConnectError) Error() string {
	return fmt.Sprintf("the proxy refused CONNECT with status %d", e.status)
}

func (cc *clientCache) add(s *session.Session, proxySecret string) *sessionClient {
	c := &sessionClient{cc: cc, sess: s, secret: proxySecret}
	cc.mu.Lock()
	old := cc.m[s.ID]
	cc.m[s.ID] = c
	cc.mu.Unlock()
	if old != nil {
		old.closeIdle()
	}
	return c
}

// newTransport is the transport of session s through the proxy.
func (cc *clientCache) newTransport(s *session.Session, proxySecret string) (*http.Transport, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.CAPEM) {
		return nil, fmt.Errorf("loading the CA of session %s: no certificate in its PEM", s.ID)
	}
	proxyURL := &url.URL{Scheme: "http", User: url.UserPassword(s.ID, proxySecret), Host: cc.cfg.ProxyAddr}
	t := &http.Transport{
		Proxy:       http.ProxyURL(proxyURL),
		DialContext: cc.cfg.DialContext,
		TLSClientConfig: &tls.Config{
			RootCAs:    pool,
			MinVersion: tls.VersionTLS12,
		},
		OnProxyConnectResponse: func(_ context.Context, _ *url.URL, _ *http.Request, res *http.Response) error {
			if res.StatusCode == http.StatusOK {
				return nil
			}
			e := &proxyConnectError{status: res.StatusCode, retryAfter: res.Header.Get("Retry-After")}
			if res.ContentLength > 0 && res.ContentLength <= 64<<10 {
				e.body, _ = io.ReadAll(io.LimitReader(res.Body, res.ContentLength))
			}
			return e
		},
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           32,
		MaxIdleConnsPerHost:    8,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 1 << 20,
	}
	return t, nil
}

func (cc *clientCache) get(id string) (*sessionClient, bool) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	c, ok := cc.m[id]
	return c, ok
}

func (cc *clientCache) forget(id string) {
	cc.mu.Lock()
	c := cc.m[id]
	delete(cc.m, id)
	cc.mu.Unlock()
	if c != nil {
		c.closeIdle()
	}
}

// prune forgets clients whose sessions are no longer live, once the cache
// has doubled since the last prune (SessionEnded forgets each client as its
// session ends; this only catches what that missed).
func (cc *clientCache) prune(live func(id string) bool) {
	cc.mu.Lock()
	if len(cc.m) < cc.pruneAt {
		cc.mu.Unlock()
		return
	}
	var ids []string
	for id := range cc.m {
		ids = append(ids, id)
	}
	cc.mu.Unlock()
	for _, id := range ids {
		if !live(id) {
			cc.forget(id)
		}
	}
	cc.mu.Lock()
	cc.pruneAt = max(2*len(cc.m), 64)
	cc.mu.Unlock()
}

func (cc *clientCache) closeAll() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for _, c := range cc.m {
		c.closeIdle()
	}
}

// Envelope is the 200 response of the run endpoint and the sandbox request
// boundary, whatever the upstream status.
type Envelope struct {
	// Status is always "proxied".
	Status string `json:"status"`
	// AuditID is the audit_id of the proxy's connector.proxy.proxied event.
	AuditID        string `json:"audit_id,omitempty"`
	UpstreamStatus int    `json:"upstream_status"`
	ContentType    string `json:"content_type,omitempty"`
	// Headers keeps content-type, etag, link, location, retry-after and
	// x-ratelimit-*, lower-cased; repeated values are joined with ", ".
	Headers map[string]string `json:"headers"`
	// Body is the parsed JSON when the upstream sent JSON, else a UTF-8
	// string; absent when BodyBase64 is set.
	Body json.RawMessage `json:"body,omitempty"`
	// BodyBase64 is the standard base64 of a body that is not UTF-8.
	BodyBase64 string `json:"body_base64,omitempty"`
	// Action is the installed action that made the call (action run
	// endpoint only).
	Action string `json:"action,omitempty"`
}

// keepHeader reports whether an upstream response header goes into the
// envelope.
func keepHeader(lower string) bool {
	switch lower {
	case "content-type", "etag", "link", "location", "retry-after":
		return true
	}
	return strings.HasPrefix(lower, "x-ratelimit-")
}

func isJSONType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// outbound is one call to send through the proxy.
type outbound struct {
	sess       *session.Session
	call       *call
	header     http.Header // extra request headers, already filtered
	idempotent bool
	source     string
	operation  string // for logs
	// action names the installed action making the call; "" for others.
	action string
	// approval holds the call for a person's approval even when the
	// operation does not require it.
	approval bool
	// preview is the action's preview directive; nil for none.
	preview *preview.Directive
}

// forward sends ob through the session's proxy and answers with the
// envelope, or with the error the proxy or the connection produced.
func (s *Server) forward(c echo.Context, ob outbound) error {
	sc, ok := s.clients.get(ob.sess.ID)
	if !ok {
		// Created before a restart or through another replica: this
		// process never saw its proxy secret, so it uses the registry's
		// internal one.
		sc = s.clients.add(ob.sess, s.cfg.Sessions.InternalProxySecret(ob.sess.ID))
	}
	transport, err := sc.roundTripper()
	if err != nil {
		return apiErr(http.StatusInternalServerError, CodeInternal, "internal error; see the daemon log").because(err)
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), s.callTimeout())
	defer cancel()

	attempts := 1
	if ob.idempotent {
		attempts = 2
	}
	var resp *http.Response
	for attempt := 1; ; attempt++ {
		req, err := s.newUpstreamRequest(ctx, ob)
		if err != nil {
			return apiErr(http.StatusInternalServerError, CodeInternal, "internal error; see the daemon log").because(err)
		}
		resp, err = transport.RoundTrip(req)
		if err == nil && attempt < attempts && isUpstreamConnectFailure(resp) {
			s.log.Debug("retrying an idempotent call the upstream failed before answering",
				zap.String("session_id", ob.sess.ID), zap.String("operation", ob.operation))
			drainClose(resp.Body)
			s.metrics.proxied.WithLabelValues(ob.source, "retried").Inc()
			continue
		}
		if err == nil {
			break
		}
		var pce *proxyConnectError
		switch {
		case errors.As(err, &pce):
			s.metrics.proxied.WithLabelValues(ob.source, "denied").Inc()
			setRetryAfter(c, pce.retryAfter)
			return proxyRefusal(pce.status, pce.body)
		case ctx.Err() != nil:
			s.metrics.proxied.WithLabelValues(ob.source, "error").Inc()
			return apiErr(http.StatusGatewayTimeout, CodeUpstreamTimeout,
				fmt.Sprintf("the call did not complete within %s", s.callTimeout())).because(err)
		case attempt < attempts:
			s.log.Debug("retrying an idempotent call after a connection failure",
				zap.String("session_id", ob.sess.ID), zap.String("operation", ob.operation), zap.Error(err))
			s.metrics.proxied.WithLabelValues(ob.source, "retried").Inc()
			continue
		default:
			s.metrics.proxied.WithLabelValues(ob.source, "error").Inc()
			return apiErr(http.StatusBadGateway, CodeUpstreamUnreachable,
				"the request could not be sent through the proxy (connection failed before a response)").because(err)
		}
	}
	defer resp.Body.Close()

	if d := resp.Header.Get(HeaderDecision); d != "" && d != contract.DecisionAllowed {
		s.metrics.proxied.WithLabelValues(ob.source, "denied").Inc()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		setRetryAfter(c, resp.Header.Get("Retry-After"))
		return proxyRefusal(resp.StatusCode, body)
	}

	body, err := io.ReadAll(io.LimitReader(resp.Body, s.cfg.MaxResponseBytes+1))
	if err != nil {
		s.metrics.proxied.WithLabelValues(ob.source, "error").Inc()
		if ctx.Err() != nil {
			return apiErr(http.StatusGatewayTimeout, CodeUpstreamTimeout,
				fmt.Sprintf("the upstream response did not complete within %s", s.callTimeout())).because(err)
		}
		return apiErr(http.StatusBadGateway, CodeUpstreamUnreachable, "the upstream response was cut off").because(err)
	}
	if int64(len(body)) > s.cfg.MaxResponseBytes {
		s.metrics.proxied.WithLabelValues(ob.source, "error").Inc()
		return apiErr(http.StatusBadGateway, CodeUpstreamResponseTooLarge,
			fmt.Sprintf("the upstream response is larger than the %d-byte limit of the API envelope; narrow the request (e.g. paging) or fetch it through the proxy directly", s.cfg.MaxResponseBytes)).
			with("upstream_status", resp.StatusCode).with("audit_id", resp.Header.Get(HeaderAuditID))
	}
	s.metrics.proxied.WithLabelValues(ob.source, "proxied").Inc()
	h := c.Response().Header()
	h.Set(HeaderUpstreamStatus, strconv.Itoa(resp.StatusCode))
	if id := resp.Header.Get(HeaderAuditID); id != "" {
		h.Set(HeaderAuditID, id)
	}
	if c.Request().Header.Get(HeaderOutput) == OutputBody {
		ct := resp.Header.Get("Content-Type")
		if ct == "" {
			ct = "application/octet-stream"
		}
		return c.Blob(http.StatusOK, ct, body)
	}
	env := envelopeOf(resp, body)
	env.Action = ob.action
	return c.JSON(http.StatusOK, env)
}

// isUpstreamConnectFailure reports whether resp is the proxy's own 502
// upstream_unreachable: the upstream failed before sending a response byte.
// It peeks at the (small, proxy-written) body and puts it back.
func isUpstreamConnectFailure(resp *http.Response) bool {
	if d := resp.Header.Get(HeaderDecision); resp.StatusCode != http.StatusBadGateway || d == "" || d == contract.DecisionAllowed {
		return false
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), resp.Body), resp.Body}
	var eb errorBody
	return json.Unmarshal(body, &eb) == nil && eb.Error != nil && eb.Error.Code == contract.CodeUpstreamUnreachable
}

func drainClose(rc io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(rc, 64<<10))
	_ = rc.Close()
}

func (s *Server) newUpstreamRequest(ctx context.Context, ob outbound) (*http.Request, error) {
	var body io.Reader
	if ob.call.body != nil {
		body = bytes.NewReader(ob.call.body)
	}
	req, err := http.NewRequestWithContext(ctx, ob.call.method, ob.call.url, body)
	if err != nil {
		return nil, fmt.Errorf("building the upstream request: %w", err)
	}
	for k, vs := range ob.header {
		req.Header[k] = append([]string(nil), vs...)
	}
	if ob.call.contentType != "" {
		req.Header.Set("Content-Type", ob.call.contentType)
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "aileron-proxy")
	}
	req.Header.Set(HeaderInternal, s.cfg.ProxyInternalKey)
	req.Header.Set(HeaderSource, ob.source)
	if ob.call.auditArgs != "" {
		req.Header.Set(HeaderAuditArgs, ob.call.auditArgs)
	}
	if ob.approval {
		req.Header.Set(contract.HeaderApproval, contract.ApprovalRequired)
		if ob.preview != nil {
			req.Header.Set(contract.HeaderApprovalPreview, ob.preview.Encode())
		}
	}
	return req, nil
}

// setRetryAfter passes the Retry-After of a proxy refusal on to the API's
// error reply, so a 429 keeps its hint of when to retry.
func setRetryAfter(c echo.Context, v string) {
	if v != "" {
		c.Response().Header().Set("Retry-After", v)
	}
}

// proxyRefusal turns a response the proxy originated into the API's error,
// passing the proxy's own error object through when it sent one.
func proxyRefusal(status int, body []byte) error {
	if status == http.StatusProxyAuthRequired {
		// The session ended or expired between the API's check and the
		// proxy's; 407 means nothing to an API client.
		status = http.StatusForbidden
	}
	var eb errorBody
	if json.Unmarshal(body, &eb) == nil && eb.Error != nil && eb.Error.Code != "" {
		eb.Error.Status = status
		switch status {
		case http.StatusBadGateway:
			eb.Error.with("proxy_code", eb.Error.Code)
			eb.Error.Code = CodeUpstreamUnreachable
		case http.StatusGatewayTimeout:
			eb.Error.with("proxy_code", eb.Error.Code)
			eb.Error.Code = CodeUpstreamTimeout
		}
		return eb.Error
	}
	switch status {
	case http.StatusBadGateway:
		return apiErr(status, CodeUpstreamUnreachable, "the proxy could not reach the upstream")
	case http.StatusGatewayTimeout:
		return apiErr(status, CodeUpstreamTimeout, "the upstream did not answer in time")
	case http.StatusForbidden:
		return apiErr(status, CodeProxyRefused, "the proxy refused the request")
	}
	return apiErr(http.StatusBadGateway, CodeProxyRefused,
		fmt.Sprintf("the proxy refused the request with status %d", status))
}

func envelopeOf(resp *http.Response, body []byte) Envelope {
	env := Envelope{
		Status:         "proxied",
		AuditID:        resp.Header.Get(HeaderAuditID),
		UpstreamStatus: resp.StatusCode,
		ContentType:    resp.Header.Get("Content-Type"),
		Headers:        map[string]string{},
	}
	for k, vs := range resp.Header {
		lk := strings.ToLower(k)
		if keepHeader(lk) {
			env.Headers[lk] = strings.Join(vs, ", ")
		}
	}
	switch {
	case len(body) > 0 && isJSONType(env.ContentType) && json.Valid(body):
		env.Body = json.RawMessage(body)
	case utf8.Valid(body):
		b, _ := json.Marshal(string(body))
		env.Body = b
	default:
		env.BodyBase64 = base64.StdEncoding.EncodeToString(body)
	}
	return env
}
