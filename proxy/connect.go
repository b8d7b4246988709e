package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/elazarl/goproxy"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/internal/hostport"
)

// maxListedHosts caps the hosts listed in a CONNECT refusal.
const maxListedHosts = 50

// connectState travels in the CONNECT request's context from serveOuter
// through goproxy to handleConnect and hijackConnect.
type connectState struct {
	tunnel   *tunnel
	hijacked bool
}

type connectStateKey struct{}

var errNoProxyCredential = errors.New("no Basic Proxy-Authorization credential")

// parseProxyAuth decodes "Basic base64(id:secret)".
func parseProxyAuth(h string) (id, secret string, ok bool) {
	const prefix = "basic "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", "", false
	}
	dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(h[len(prefix):]))
	if err != nil {
		return "", "", false
	}
	id, secret, ok = strings.Cut(string(dec), ":")
	if !ok || id == "" || secret == "" {
		return "", "", false
	}
	return id, secret, true
}

// authenticate checks the Proxy-Authorization of r. A source that sent
// wrong credentials too often gets an authThrottledError, unchecked, until
// its backoff allows another attempt (backoff.go); a missing credential
// guesses nothing and is not counted.
func (s *Server) authenticate(r *http.Request) (Session, error) {
	id, secret, ok := parseProxyAuth(r.Header.Get(headerProxyAuthorize))
	src := SourceOf(r.RemoteAddr)
	if throttled, wait := s.authBackoff.Throttled(src, id); throttled {
		return Session{}, &authThrottledError{wait: wait}
	}
	if !ok {
		return Session{}, errNoProxyCredential
	}
	sess, err := s.cfg.Sessions.AuthenticateProxy(id, secret)
	if err != nil {
		s.authFailed(src, id)
		return Session{}, err
	}
	if sess.ID == "" {
		return Session{}, errors.New("the authenticator returned a session without an ID")
	}
	return sess, nil
}

const proxyAuthMessage = "this proxy needs the session's credential: send Proxy-Authorization: Basic base64(<session id>:<secret>), " +
	"e.g. use the proxy_url from `aileron-proxy session create` (http://<id>:<secret>@host:port) as HTTPS_PROXY; " +
	"ended and expired sessions are refused"

// handleConnect is goproxy's CONNECT hook: authenticate, decide, reserve.
func (s *Server) handleConnect(host string, ctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
	r := ctx.Req
	st, _ := r.Context().Value(connectStateKey{}).(*connectState)
	start := s.now()
	ev := audit.Event{Event: audit.EventDenied, Method: http.MethodConnect, Host: host, Source: contract.SourceProxy}
	if st == nil {
		ctx.Resp = s.refuseConnect(ev, start, http.StatusInternalServerError, errorDetail{Code: contract.CodeInternal, Message: "CONNECT reached the proxy by an unexpected path"}, nil)
		return s.rejectAction, host
	}
	sess, err := s.authenticate(r)
	if resp := s.throttledConnect(err); resp != nil {
		ctx.Resp = resp
		return s.rejectAction, host
	}
	if err != nil {
		s.log.Debug("proxy authentication failed", zap.String("host", host), zap.Error(err))
		hdr := http.Header{headerProxyAuthentic: {proxyAuthRealm}}
		ctx.Resp = s.refuseConnect(ev, start, http.StatusProxyAuthRequired,
			errorDetail{Code: contract.CodeProxyAuthRequired, Message: proxyAuthMessage}, hdr)
		return s.rejectAction, host
	}
	ev.SessionID = sess.ID
	hp, err := hostport.New(host)
	target, hostname, port := hp.WithDefaultPort(443).String(), hp.Host, hp.WithDefaultPort(443).Port
	if err != nil {
		ctx.Resp = s.refuseConnect(ev, start, http.StatusBadRequest, errorDetail{Code: contract.CodeBadTarget,
			Message: fmt.Sprintf("CONNECT target %q is not host:port", host)}, nil)
		return s.rejectAction, host
	}
	ev.Host = target
	mode := ""
	snap := s.cfg.Policy()
	switch {
	case snap != nil && snap.Intercepts(sess.Scope, target):
		mode = modeIntercept
	case s.cfg.Learn != nil && hostport.MatchAny(sess.Learn, hostname, port):
		mode = modeIntercept // learned forwarding (learn.go)
	case hostport.MatchAny(s.globs, hostname, port):
		mode = modePassthrough
	default:
		var hosts []string
		if snap != nil {
			hosts = snap.Hosts(sess.Scope)
		}
		ctx.Resp = s.refuseConnect(ev, start, http.StatusForbidden, hostNotAllowed(target, sess.ID, hosts), nil)
		return s.rejectAction, host
	}
	if mode == modePassthrough && !s.auditOK() {
		// A passthrough tunnel is audited when it closes; intercepted
		// ones are checked per request inside.
		s.metrics.decision(false, contract.CodeAuditUnavailable.String())
		ctx.Resp = connectResponse(http.StatusServiceUnavailable, contract.DecisionError, "", auditUnavailableDetail(), nil)
		return s.rejectAction, host
	}
	t, status, code := s.openTunnel(sess, mode, target, hostname, port)
	if t == nil {
		d := errorDetail{Code: code, Host: target}
		var hdr http.Header
		if code == contract.CodeTooManyTunnels {
			d.Message = fmt.Sprintf("session %s already has %d open tunnels, the limit; close idle connections or retry later",
				sess.ID, s.limits.MaxTunnelsPerSession)
			secs := int((s.limits.RetryAfter + time.Second - 1) / time.Second)
			hdr = http.Header{"Retry-After": {strconv.Itoa(secs)}}
		} else {
			d.Message = "the proxy is shutting down; retry against the new daemon"
		}
		ctx.Resp = s.refuseConnect(ev, start, status, d, hdr)
		return s.rejectAction, host
	}
	if mode == modeIntercept {
		var leaf *tls.Certificate
		err := errors.New("the session has no CA")
		if sess.CA != nil {
			leaf, err = sess.CA.Leaf(hostname)
		}
		if err != nil {
			s.metrics.leafErr.Inc()
			t.release()
			s.log.Warn("issuing session leaf failed", zap.String("session_id", sess.ID), zap.String("host", target), zap.Error(err))
			ctx.Resp = s.refuseConnect(ev, start, http.StatusForbidden, errorDetail{Code: contract.CodeHostNotAllowed, Host: target,
				Message: fmt.Sprintf("session %s's certificate authority cannot vouch for %s (the host was added to a connector after the session was created); create a new session", sess.ID, hostname)}, nil)
			return s.rejectAction, host
		}
		s.metrics.leafOK.Inc()
		t.leaf = leaf
	} else {
		dctx, cancel := context.WithTimeout(r.Context(), s.limits.DialTimeout)
		up, err := s.dialer.DialContext(dctx, "tcp", target)
		cancel()
		if err != nil {
			t.release()
			status, code, msg := classifyUpstreamError(err, target)
			ev.Event = audit.EventPassthrough
			ctx.Resp = s.refuseConnect(ev, start, status, errorDetail{Code: code, Message: msg, Host: target}, nil)
			return s.rejectAction, host
		}
		s.mu.Lock()
		t.upstream = up
		s.mu.Unlock()
	}
	st.tunnel = t
	return s.hijackAction, host
}

// hostNotAllowed explains a refused CONNECT.
func hostNotAllowed(target, sessionID string, hosts []string) errorDetail {
	listed := hosts
	more := ""
	if len(listed) > maxListedHosts {
		more = fmt.Sprintf(" (and %d more)", len(listed)-maxListedHosts)
		listed = listed[:maxListedHosts]
	}
	msg := fmt.Sprintf("CONNECT to %s is not allowed: no connector of session %s lists this host and it is not a passthrough host", target, sessionID)
	if len(listed) > 0 {
		msg += "; hosts this session may reach: " + strings.Join(listed, ", ") + more
	} else {
		msg += "; this session may reach no hosts"
	}
	if listed == nil {
		listed = []string{}
	}
	return errorDetail{Code: contract.CodeHostNotAllowed, Message: msg, Host: target, AllowedHosts: listed}
}

// refuseConnect builds the response goproxy writes before closing the
// connection, and records the decision.
func (s *Server) refuseConnect(ev audit.Event, start time.Time, status int, d errorDetail, hdr http.Header) *http.Response {
	id := audit.NewID()
	ev.AuditID = id
	ev.Status = status
	ev.Reason = d.Code.String()
	ev.Decision = contract.DecisionDenied
	if status >= 500 {
		ev.Decision = contract.DecisionError
	}
	s.record(&exchange{start: start, ev: ev}, zapcore.WarnLevel, "connect refused")
	s.metrics.decision(false, d.Code.String())

	return connectResponse(status, ev.Decision, id, d, hdr)
}

// connectResponse is the response to a refused CONNECT; auditID may be
// empty.
func connectResponse(status int, decision, auditID string, d errorDetail, hdr http.Header) *http.Response {
	body := marshalError(d)
	if hdr == nil {
		hdr = http.Header{}
	}
	hdr.Set("Content-Type", contentTypeJSON)
	hdr.Set("Cache-Control", "no-store")
	hdr.Set(contract.HeaderDecision, decision)
	if auditID != "" {
		hdr.Set(contract.HeaderAuditID, auditID)
	}
	return &http.Response{
		Status:        strconv.Itoa(status) + " " + http.StatusText(status),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        hdr,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Close:         true,
	}
}

// hijackConnect runs on the client connection goproxy hijacked: reply 200,
// then intercept or tunnel.
func (s *Server) hijackConnect(req *http.Request, client net.Conn, _ *goproxy.ProxyCtx) {
	st, _ := req.Context().Value(connectStateKey{}).(*connectState)
	if st == nil || st.tunnel == nil {
		_ = client.Close()
		return
	}
	st.hijacked = true
	t := st.tunnel
	_ = client.SetDeadline(time.Time{})
	conn := client
	if t.mode == modeIntercept {
		conn = newRawConn(client) // rawconn.go; passthrough keeps splice
	}
	tc := &tunnelConn{Conn: conn, t: t}
	s.mu.Lock()
	t.client = tc
	closed := t.closed // CloseSession or Shutdown ran since handleConnect
	s.mu.Unlock()
	err := net.ErrClosed
	if !closed {
		_, err = io.WriteString(client, connectEstablishedMsg)
	}
	if err != nil {
		if t.upstream != nil {
			_ = t.upstream.Close()
		}
		_ = tc.Close()
		return
	}
	// The tunnel gets a goroutine of its own and this one returns, so the
	// CONNECT's http.Server connection (its 4 KiB reader and writer, the
	// request) and the stack under goproxy's handler are freed rather than
	// held for the tunnel's lifetime (docs/proxy-limits.md).
	if t.mode == modePassthrough {
		go s.runPassthrough(t, tc)
		return
	}
	go s.intercept(t, tc)
}

// getCertificate presents the tunnel's leaf, chosen by the CONNECT host; an
// SNI naming another host fails the handshake.
func (s *Server) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	tc, ok := hello.Conn.(*tunnelConn)
	if !ok || tc.t.leaf == nil {
		return nil, errors.New("no intercepted tunnel for this connection")
	}
	t := tc.t
	if sni := strings.TrimSuffix(hello.ServerName, "."); sni != "" && !strings.EqualFold(sni, t.host) {
		return nil, fmt.Errorf("client SNI %q does not match the CONNECT host %q", hello.ServerName, t.host)
	}
	return t.leaf, nil
}

// intercept terminates TLS and serves the connection: HTTP/1.1 on this
// goroutine (serve_h1.go), HTTP/2 (by ALPN) by the inner server; both
// through one handler.
func (s *Server) intercept(t *tunnel, tc *tunnelConn) {
	_ = tc.SetDeadline(time.Now().Add(s.limits.TLSHandshakeTimeout))
	conn := tls.Server(tc, s.tlsConfig)
	if err := conn.Handshake(); err != nil {
		s.log.Warn("client TLS handshake failed", zap.String("session_id", t.sess.ID), zap.String("host", t.target), zap.Error(err))
		_ = conn.Close()
		return
	}
	_ = tc.SetDeadline(time.Time{})
	if conn.ConnectionState().NegotiatedProtocol != "h2" {
		s.serveH1(t, tc, newFramedConn(conn, t)) // serve_h1.go; smuggle.go
		return
	}
	if !s.innerLn.push(conn) {
		_ = conn.Close()
	}
}
