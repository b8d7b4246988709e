package api

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"
	"golang.org/x/net/http/httpguts"

	"github.com/aileron-dev/aileron-proxy/policy"
)

// SandboxProxyRequest is the body of POST /v1/sandbox-proxy/requests: a
// caller that already has a URL asks the daemon to send it as one of its
// session's operations.
type SandboxProxyRequest struct {
	ConnectorFQN string            `json:"connector_fqn"`
	Tool         string            `json:"tool"`
	Operation    string            `json:"operation"`
	Method       string            `json:"method"`
	URL          string            `json:"url"`
	Headers      map[string]string `json:"headers,omitempty"`
	BodyBase64   string            `json:"body_base64,omitempty"`
}

// maxForwardedHeaders bounds SandboxProxyRequest.Headers.
const maxForwardedHeaders = 64

// droppedHeader reports whether a caller-supplied header is never
// forwarded: credentials (the proxy injects its own), hop-by-hop and
// framing headers, and the daemon's own X-Aileron-* headers.
func droppedHeader(canonical string) bool {
	switch canonical {
	case "Authorization", "Cookie", "Host", "Connection", "Keep-Alive", "Te", "Trailer",
		"Transfer-Encoding", "Upgrade", "Content-Length", "Expect", "Forwarded", "Via":
		return true
	}
	return strings.HasPrefix(canonical, "Proxy-") || strings.HasPrefix(canonical, "X-Aileron-") ||
		strings.HasPrefix(canonical, "X-Forwarded-")
}

// sandboxProxy is POST /v1/sandbox-proxy/requests.
func (s *Server) sandboxProxy(c echo.Context) error {
	sess := sessionFrom(c)
	var req SandboxProxyRequest
	if err := decodeJSON(c.Request(), &req); err != nil {
		return err
	}
	if err := missingFields([2]string{"connector_fqn", req.ConnectorFQN}, [2]string{"tool", req.Tool},
		[2]string{"operation", req.Operation}, [2]string{"method", req.Method}, [2]string{"url", req.URL}); err != nil {
		return err
	}
	snap, m, err := s.lookupOperation(sess, SourceSandboxProxy, CodeSandboxOperationNotFound, req.ConnectorFQN, req.Tool, req.Operation)
	if err != nil {
		return err
	}
	op := m.Compiled.Operation()
	refuse := func(msg string) *Error {
		return s.refused(sess, SourceSandboxProxy, req.ConnectorFQN, req.Tool, req.Operation,
			apiErr(http.StatusNotFound, CodeSandboxOperationNotFound, msg))
	}
	method := strings.ToUpper(strings.TrimSpace(req.Method))
	u, err := url.Parse(req.URL)
	switch {
	case err != nil:
		return refuse(fmt.Sprintf("url is not a valid URL; it must be https://<host><path> for operation %s (%s %s)", op.Name, op.Method, op.Path))
	case u.Scheme != "https":
		return refuse(fmt.Sprintf("url must use https, not %q", u.Scheme))
	case u.User != nil:
		return refuse("url must not carry userinfo; the proxy injects the operation's credential")
	case u.Host == "":
		return refuse("url has no host")
	case u.Fragment != "":
		u.Fragment = ""
	}
	if method != op.Method {
		return refuse(fmt.Sprintf("method %s does not match operation %s, which is %s %s", method, op.Name, op.Method, op.Path))
	}
	host := policy.NormalizeHost(u.Host)
	d := snap.Decide(sess.Scope, policy.Request{Method: method, Host: host, Path: u.EscapedPath()})
	if !d.Allow || d.Match == nil || d.Match.Compiled != m.Compiled {
		msg := fmt.Sprintf("%s %s%s is not operation %s of tool %s (%s %s on %s)", method, host, u.EscapedPath(), op.Name, m.Tool, op.Method, op.Path, strings.Join(op.Hosts, ", "))
		if !d.Allow && d.Message != "" {
			msg += ": " + d.Message
		}
		return refuse(msg)
	}

	if len(req.Headers) > maxForwardedHeaders {
		return apiErr(http.StatusBadRequest, CodeInvalidBody, fmt.Sprintf("at most %d headers may be forwarded", maxForwardedHeaders))
	}
	hdr := http.Header{}
	for k, v := range req.Headers {
		if !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidHeaderFieldValue(v) {
			return apiErr(http.StatusBadRequest, CodeInvalidBody, fmt.Sprintf("header %q has an invalid name or value", k))
		}
		ck := http.CanonicalHeaderKey(k)
		if droppedHeader(ck) {
			continue
		}
		hdr.Set(ck, v)
	}
	var body []byte
	if req.BodyBase64 != "" {
		body, err = base64.StdEncoding.DecodeString(req.BodyBase64)
		if err != nil {
			if body, err = base64.RawURLEncoding.DecodeString(strings.TrimRight(req.BodyBase64, "=")); err != nil {
				return apiErr(http.StatusBadRequest, CodeInvalidBody, "body_base64 is not valid base64")
			}
		}
	}
	cl := &call{method: method, url: u.String(), body: body}
	return s.forward(c, outbound{
		sess:       sess,
		call:       cl,
		header:     hdr,
		idempotent: op.Idempotency.IsRetryable(),
		source:     SourceSandboxProxy,
		operation:  op.Name,
	})
}
