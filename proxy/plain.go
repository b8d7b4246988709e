package proxy

import (
	"fmt"
	"net/http"
	"net/url"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/internal/hostport"
)

// servePlain handles absolute-form plain-HTTP proxy requests: forwarded,
// without credentials, only to passthrough hosts.
func (s *Server) servePlain(w http.ResponseWriter, r *http.Request) {
	x := &exchange{start: s.now(), r: r, path: r.URL.EscapedPath()}
	x.ev = audit.Event{Method: r.Method, Host: r.URL.Host, Path: x.path, Source: contract.SourceProxy}
	x.t = &tunnel{target: r.URL.Host}
	if !r.URL.IsAbs() || r.URL.Host == "" {
		s.deny(w, x, http.StatusBadRequest, errorDetail{Code: contract.CodeNotAProxyRequest,
			Message: "this is a forward proxy: send CONNECT host:443 (HTTPS_PROXY), or an absolute http:// URL for a passthrough host"})
		return
	}
	if r.URL.Scheme != "http" {
		s.deny(w, x, http.StatusBadRequest, errorDetail{Code: contract.CodeNotAProxyRequest,
			Message: fmt.Sprintf("scheme %q cannot be proxied in absolute form; use CONNECT for https", r.URL.Scheme)})
		return
	}
	sess, err := s.authenticate(r)
	if s.refuseThrottled(w, err) {
		return
	}
	if err != nil {
		w.Header().Set(headerProxyAuthentic, proxyAuthRealm)
		s.deny(w, x, http.StatusProxyAuthRequired, errorDetail{Code: contract.CodeProxyAuthRequired, Message: proxyAuthMessage})
		return
	}
	x.ev.SessionID = sess.ID
	x.t.sess = sess
	hp, err := hostport.New(r.URL.Host)
	hp = hp.WithDefaultPort(80)
	target, host, port := hp.String(), hp.Host, hp.Port
	if err != nil {
		s.deny(w, x, http.StatusBadRequest, errorDetail{Code: contract.CodeBadTarget, Message: fmt.Sprintf("host %q is not host[:port]", r.URL.Host)})
		return
	}
	x.t.target, x.ev.Host = target, target
	if !hostport.MatchAny(s.globs, host, port) {
		code, msg := contract.CodeHostNotAllowed, fmt.Sprintf("plain http to %s is not allowed: only passthrough hosts are reachable over http://", target)
		if snap := s.cfg.Policy(); snap != nil && snap.Intercepts(sess.Scope, hostport.Join(host, 443)) {
			code = contract.CodePlainHTTPNotAllowed
			msg = fmt.Sprintf("use https://%s: the session's connectors are reachable over HTTPS only, where credentials are injected", host)
		}
		s.deny(w, x, http.StatusForbidden, errorDetail{Code: code, Message: msg})
		return
	}

	if !s.auditOK() {
		s.refuseAuditUnavailable(w, x)
		return
	}
	x.ev.Event = audit.EventPassthrough
	x.ev.Decision = contract.DecisionAllowed
	x.ev.Reason = modePassthrough
	x.ev.AuditID = audit.NewID()
	out := r.WithContext(r.Context())
	out.RequestURI = ""
	out.Close = false
	out.URL = &url.URL{Scheme: "http", Host: target, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	out.Host = r.Host
	stripHeader(out.Header, false)
	var body *countingBody
	if r.Body != nil && r.Body != http.NoBody {
		body = &countingBody{rc: r.Body}
		out.Body = body
	}
	resp, err := s.transport.RoundTrip(out)
	if err != nil {
		status, code, msg := classifyUpstreamError(err, target)
		s.log.Debug("plain upstream round trip failed", zap.String("host", target), zap.Error(err))
		s.upstreamFailed(w, x, status, code, msg)
		return
	}
	defer resp.Body.Close()
	writeResponseHeader(w, resp, false, x.auditHeader())
	n, cerr := s.copyBody(w, resp.Body, resp.ContentLength)
	if body != nil {
		x.ev.BytesIn = body.n.Load()
	}
	x.ev.BytesOut, x.ev.Status = n, resp.StatusCode
	s.finishProxied(w, x, resp, nil, modePassthrough, "plain request passed through", cerr)
}
