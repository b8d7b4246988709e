package proxy

import (
	"compress/gzip"
	"compress/zlib"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/credentials"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/learn"
)

// countingBody counts the request body bytes the transport reads; the
// transport may still be reading when the response arrives, hence atomic.
type countingBody struct {
	rc io.ReadCloser
	n  atomic.Int64
	// eof is set once a read returned io.EOF: the body was read whole.
	eof atomic.Bool
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.rc.Read(p)
	c.n.Add(int64(n))
	if err == io.EOF {
		c.eof.Store(true)
	}
	return n, err
}

func (c *countingBody) Close() error { return c.rc.Close() }

// upstreamRequest is forward's request to the upstream and its URL.
type upstreamRequest struct {
	req http.Request
	url url.URL
}

// forward sends an allowed request upstream and streams the response back.
func (s *Server) forward(w http.ResponseWriter, x *exchange, inj *credentials.Injector, reason string) {
	r, t := x.r, x.t
	id := audit.NewID()
	x.ev.AuditID = id
	x.ev.Event = audit.EventProxied
	x.ev.Decision = contract.DecisionAllowed
	x.ev.Reason = reason

	// The upstream request and its URL live in x (no allocation of their
	// own): a shallow copy of r, its context included, as
	// r.WithContext(r.Context()) makes.
	o := &x.up
	*o = upstreamRequest{req: *r, url: url.URL{Scheme: "https", Host: t.target, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}}
	out := &o.req
	out.RequestURI = ""
	out.Close = false
	out.URL = &o.url
	out.Host = t.hostHeader
	stripHeader(out.Header, true)
	var body *countingBody
	switch {
	case r.ContentLength == 0:
		// The HTTP/2 server gives even a bodiless request a non-nil Body;
		// forwarding it would cost the upstream an extra empty DATA frame
		// (and a flush) per request.
		out.Body = http.NoBody
	case r.Body != nil && r.Body != http.NoBody:
		body = &countingBody{rc: r.Body}
		out.Body = body
	}

	scrub, ok := s.applyCredential(w, x, inj, out)
	if !ok {
		return
	}

	sent := time.Now()
	var resp *http.Response
	var err error
	if r.ProtoMajor == 1 {
		resp, err = s.roundTripH1(out, clientWatcher{w: w, r: r, body: body}) // upstream_h1.go says why
	} else {
		resp, err = s.transport.RoundTrip(out)
	}
	if body != nil {
		x.ev.BytesIn = body.n.Load()
	}
	if err != nil && (errors.Is(err, errClientClosed) || r.Context().Err() != nil) {
		s.clientClosed(w, x)
		return
	}
	if err != nil {
		status, code, msg := classifyUpstreamError(err, t.target)
		s.log.Debug("upstream round trip failed", zap.String("host", t.target), zap.Error(err))
		s.upstreamFailed(w, x, status, code, msg)
		return
	}
	s.metrics.upstream.Observe(time.Since(sent).Seconds())
	if x.mcp != nil {
		s.filterMCPAnswer(x, resp) // mcp.go: tools/list shows only allowed tools
	}
	s.passResponse(w, x, resp, scrub, body, reason)
}

// passResponse streams an upstream response to the client, scrubbed when
// scrub is set, and records the exchange; body counts the request body, nil
// when there is none.
func (s *Server) passResponse(w http.ResponseWriter, x *exchange, resp *http.Response, scrub *credentials.Scrubber, body *countingBody, reason string) {
	r, t := x.r, x.t
	defer resp.Body.Close()
	if x.learned != nil {
		x.learned.req.ResponseContentType = learn.MediaType(resp.Header.Get("Content-Type"))
	}

	src := io.Reader(resp.Body)
	decoded := false
	if scrub != nil {
		// Scrub first: every header value, Content-Encoding included, may
		// echo the secret, and the refusal below quotes Content-Encoding.
		scrub.Header(resp.Header)
		rc, ok, err := identityBody(resp)
		if err != nil || !ok {
			s.upstreamFailed(w, x, http.StatusBadGateway, contract.CodeUpstreamEncoding,
				fmt.Sprintf("%s answered with Content-Encoding %q although asked for identity; the proxy cannot scrub credentials from it", t.target, resp.Header.Get("Content-Encoding")))
			return
		}
		decoded = rc != resp.Body
		if decoded {
			defer rc.Close()
		}
		if !decoded && r.Method != http.MethodHead && resp.ContentLength >= 0 && resp.ContentLength <= smallBodyMax {
			s.writeSmallScrubbed(w, x, resp, scrub, reason)
			return
		}
		src = scrub.Reader(rc)
	}

	writeResponseHeader(w, resp, decoded, x.auditHeader())
	length := resp.ContentLength
	if decoded {
		length = -1
	}
	if length < 0 && isEventStream(resp.Header) {
		// An event stream may stay idle (an MCP GET stream): its client
		// waits for the headers, so they go now, not with the first event.
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	n, cerr := s.copyBody(w, src, length)
	if body != nil {
		x.ev.BytesIn = body.n.Load()
	}
	x.ev.BytesOut = n
	x.ev.Status = resp.StatusCode
	s.finishProxied(w, x, resp, scrub, reason, "request proxied", cerr)
}

// applyCredential injects inj (when set) into out and returns the scrubber
// for the response, asking the upstream for an identity-encoded one the
// scrubber can read; on failure it answers the client (502) and returns
// false.
func (s *Server) applyCredential(w http.ResponseWriter, x *exchange, inj *credentials.Injector, out *http.Request) (*credentials.Scrubber, bool) {
	if inj == nil {
		return nil, true
	}
	scrub, err := inj.Apply(x.r.Context(), out)
	if errors.Is(err, credentials.ErrAWSRequest) { // credentials/sigv4.go: the client must change the request
		s.upstreamFailed(w, x, http.StatusBadRequest, contract.CodeInvalidBody, err.Error())
		return nil, false
	}
	if err != nil {
		s.log.Error("applying credential failed", zap.String("session_id", x.t.sess.ID),
			zap.String("connector", x.ev.ConnectorFQN), zap.String("credential_kind", x.ev.CredentialKind), zap.Error(err))
		s.upstreamFailed(w, x, http.StatusBadGateway, contract.CodeCredentialUnavailable,
			fmt.Sprintf("the %s credential of %s could not be produced (its source failed); ask the operator to check `aileron-proxy credential list`",
				x.ev.CredentialKind, x.ev.ConnectorFQN))
		return nil, false
	}
	if scrub != nil {
		out.Header.Set("Accept-Encoding", "identity")
	}
	return scrub, true
}

// reasonStreamAborted replaces the reason of an allowed exchange whose
// response body could not be passed on whole.
const reasonStreamAborted = "stream_aborted"

// finishProxied records an exchange whose response body has been passed on
// (or not, when err is set) and counts it under reason. On err it counts it
// under stream_aborted and aborts the handler, so the client cannot mistake
// a truncated body for a whole one; otherwise it sets the upstream's
// trailers, scrubbed.
func (s *Server) finishProxied(w http.ResponseWriter, x *exchange, resp *http.Response, scrub *credentials.Scrubber, reason, msg string, err error) {
	if err != nil {
		x.ev.Reason = reasonStreamAborted
		s.record(x, zapcore.WarnLevel, msg+", stream aborted")
		s.metrics.decision(true, reasonStreamAborted)
		panic(http.ErrAbortHandler)
	}
	if len(resp.Trailer) > 0 {
		scrub.Header(resp.Trailer)
		writeTrailers(w, resp)
	}
	s.record(x, zapcore.InfoLevel, msg)
	s.metrics.decision(true, reason)
}

// smallBodyMax is the largest known-length credentialed response body that is
// read whole (into a pooled buffer) and masked in one piece; larger and
// unknown-length bodies stream through Scrubber.Reader. Both keep memory
// bounded; this path only avoids the streaming scrubber's per-response window.
const smallBodyMax = 16 << 10

// writeSmallScrubbed finishes forward for a small known-length body.
func (s *Server) writeSmallScrubbed(w http.ResponseWriter, x *exchange, resp *http.Response, scrub *credentials.Scrubber, reason string) {
	bufp := s.bufPool.Get().(*[]byte)
	defer s.bufPool.Put(bufp)
	body := (*bufp)[:resp.ContentLength]
	n, err := io.ReadFull(resp.Body, body)
	x.ev.Status = resp.StatusCode
	if err != nil {
		s.log.Debug("reading upstream body failed", zap.String("host", x.t.target), zap.Error(err))
		s.upstreamFailed(w, x, http.StatusBadGateway, contract.CodeUpstreamUnreachable,
			fmt.Sprintf("%s closed the connection after %d of %d body bytes", x.t.target, n, resp.ContentLength))
		return
	}
	scrub.Mask(body) // body is our pooled buffer
	writeResponseHeader(w, resp, false, x.auditHeader())
	wn, werr := w.Write(body)
	x.ev.BytesOut = int64(wn)
	if werr == nil {
		// Read to EOF: the transport then reuses the connection, and
		// trailers (which follow the body) are filled in.
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	s.finishProxied(w, x, resp, scrub, reason, "request proxied", werr)
}

// upstreamFailed answers a request the proxy allowed but could not complete.
func (s *Server) upstreamFailed(w http.ResponseWriter, x *exchange, status int, code contract.Code, msg string) {
	s.metrics.upstreamErrors.WithLabelValues(code.String()).Inc()
	s.endUnanswered(w, x, status, code, msg, zapcore.WarnLevel, "request allowed, upstream failed")
}

// clientClosed ends an exchange whose client left before the upstream
// answered (an HTTP/2 stream reset, or an HTTP/1.1 connection that reached
// its end): 499 client_closed, as nginx logs it and the control API
// answers. A client that only shut down its sending side still reads the
// answer, so it gets one rather than an empty 200.
func (s *Server) clientClosed(w http.ResponseWriter, x *exchange) {
	s.endUnanswered(w, x, statusClientClosed, contract.CodeClientClosed,
		fmt.Sprintf("the client closed its connection before %s answered; the request to it was abandoned", x.t.target),
		zapcore.InfoLevel, "request allowed, client left before the answer")
}

// endUnanswered answers, audits and logs an allowed exchange that got no
// answer from upstream.
func (s *Server) endUnanswered(w http.ResponseWriter, x *exchange, status int, code contract.Code, msg string, level zapcore.Level, logMsg string) {
	writeError(w, status, contract.DecisionError, x.ev.AuditID, errorDetail{Code: code, Message: msg,
		Method: x.r.Method, Host: x.t.target, Path: x.path})
	x.ev.Status = status
	x.ev.Reason = code.String()
	x.ev.Decision = contract.DecisionError
	s.record(x, level, logMsg)
	s.metrics.decision(true, x.ev.Reason)
}

// statusClientClosed is the status of clientClosed.
const statusClientClosed = 499

// classifyUpstreamError maps a dial or round-trip failure to a status, a
// code and a message that leaks no internals.
func classifyUpstreamError(err error, target string) (int, contract.Code, string) {
	var ne net.Error
	if pe, ok := isUpstreamProxyError(err); ok { // upstreamproxy.go
		return http.StatusBadGateway, contract.CodeUpstreamUnreachable, pe.Error()
	}
	switch {
	case isAddressRefused(err):
		return http.StatusBadGateway, contract.CodeUpstreamAddressRefused,
			fmt.Sprintf("%s resolves only to private, loopback, link-local or metadata addresses, which the proxy never dials", target)
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return http.StatusGatewayTimeout, contract.CodeUpstreamTimeout, fmt.Sprintf("%s did not answer in time", target)
	default:
		return http.StatusBadGateway, contract.CodeUpstreamUnreachable, fmt.Sprintf("%s could not be reached", target)
	}
}

// hopHeaders are removed in both directions (RFC 9110 section 7.6.1, plus
// the de-facto Proxy-Connection and Keep-Alive).
var hopHeaders = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// stripHeader removes, in place, the client's hop-by-hop headers (including
// those the Connection header lists), Proxy-*, X-Aileron-* and, when
// dropAuth, Authorization. "Te: trailers" survives, as in
// httputil.ReverseProxy. The handler owns the inbound request's header, so
// the outbound request reuses it instead of copying.
func stripHeader(h http.Header, dropAuth bool) {
	if c := h["Connection"]; len(c) > 0 {
		for _, v := range c {
			for f := range strings.SplitSeq(v, ",") {
				if f = textproto.TrimString(f); f != "" {
					delete(h, textproto.CanonicalMIMEHeaderKey(f))
				}
			}
		}
	}
	for k, vv := range h {
		switch {
		case hopHeaders[k]:
			delete(h, k)
			if k == "Te" && hasToken(vv, "trailers") {
				h["Te"] = []string{"trailers"}
			}
		case dropAuth && k == "Authorization",
			strings.HasPrefix(k, "Proxy-"),
			strings.HasPrefix(k, contract.HeaderPrefix):
			delete(h, k)
		}
	}
}

// headerAdopter is a ResponseWriter that can take a relayed header map as
// its own instead of a copy (h1Response).
type headerAdopter interface {
	adoptHeader(h http.Header) bool
}

// writeResponseHeader sends the upstream's status and headers to w: without
// hop-by-hop, Proxy-* and X-Aileron-* headers (stripHeader, which edits
// resp.Header in place), without Content-Encoding and Content-Length when the
// body was decoded, with its trailers announced and with auditID. A writer
// that can adopt resp.Header takes it as its own: resp.Header is then the
// response's header, edits included.
func writeResponseHeader(w http.ResponseWriter, resp *http.Response, decoded bool, auditID []string) {
	stripHeader(resp.Header, false)
	delete(resp.Header, "Te") // a request header; stripHeader keeps "Te: trailers"
	if decoded {
		delete(resp.Header, "Content-Encoding")
		delete(resp.Header, "Content-Length")
	}
	var dst http.Header
	if a, ok := w.(headerAdopter); ok && a.adoptHeader(resp.Header) {
		dst = resp.Header
	} else {
		dst = w.Header()
		for k, vv := range resp.Header {
			dst[k] = vv
		}
	}
	if len(resp.Trailer) > 0 {
		keys := make([]string, 0, len(resp.Trailer))
		for k := range resp.Trailer {
			keys = append(keys, k)
		}
		dst["Trailer"] = []string{strings.Join(keys, ", ")}
	}
	dst[contract.HeaderAuditID] = auditID // a canonical key
	w.WriteHeader(resp.StatusCode)
}

// writeTrailers sets the upstream's trailers after the body; announced keys
// by name, late ones with http.TrailerPrefix.
func writeTrailers(w http.ResponseWriter, resp *http.Response) {
	announced := w.Header()["Trailer"]
	for k, vv := range resp.Trailer {
		if hopHeaders[k] || strings.HasPrefix(k, contract.HeaderPrefix) {
			continue
		}
		if hasToken(announced, k) {
			w.Header()[k] = vv
		} else {
			w.Header()[http.TrailerPrefix+k] = vv
		}
	}
}

// identityBody returns the response body without content coding, so the
// scrubber can see the bytes: gzip and deflate are decoded, identity passes,
// anything else is refused (ok false).
func identityBody(resp *http.Response) (io.ReadCloser, bool, error) {
	ce := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding")))
	switch ce {
	case "", "identity":
		return resp.Body, true, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return nil, false, fmt.Errorf("reading gzip body: %w", err)
		}
		return zr, true, nil
	case "deflate":
		zr, err := zlib.NewReader(resp.Body)
		if err != nil {
			return nil, false, fmt.Errorf("reading deflate body: %w", err)
		}
		return zr, true, nil
	default:
		return nil, false, nil
	}
}

// copyBody streams src to w and flushes after every write that leaves the
// body incomplete, so nothing the upstream sent waits in a buffer (SSE, slow
// or trickling bodies). length is the body's known length, or -1. The write
// that completes a known-length body is not flushed: the handler's return
// sends it, which over HTTP/2 puts END_STREAM on the same DATA frame instead
// of an extra empty one. A src that is an io.WriterTo (the scrubber) writes
// from its own buffer; any other goes through a pooled one, a larger one once
// a read fills it.
func (s *Server) copyBody(w http.ResponseWriter, src io.Reader, length int64) (int64, error) {
	fw := &flushWriter{w: w, length: length}
	fw.flusher, _ = w.(http.Flusher)
	if wt, ok := src.(io.WriterTo); ok {
		return wt.WriteTo(fw)
	}
	pool := &s.bufPool
	bufp := pool.Get().(*[]byte)
	defer func() { pool.Put(bufp) }()
	buf := *bufp
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if _, werr := fw.Write(buf[:n]); werr != nil {
				return fw.total, werr
			}
		}
		if n == len(buf) && pool == &s.bufPool {
			// The body arrives faster than it is sent: read larger pieces.
			pool.Put(bufp)
			pool = &s.bigBufPool
			bufp = pool.Get().(*[]byte)
			buf = *bufp
		}
		if rerr == io.EOF {
			return fw.total, nil
		}
		if rerr != nil {
			return fw.total, rerr
		}
	}
}

// flushWriter writes a response body, flushing after each write until length
// bytes (when known) have been written.
type flushWriter struct {
	w       http.ResponseWriter
	flusher http.Flusher
	length  int64
	total   int64
}

func (f *flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	f.total += int64(n)
	if err == nil && f.flusher != nil && (f.length < 0 || f.total < f.length) {
		f.flusher.Flush()
	}
	return n, err
}

func hasToken(values []string, token string) bool {
	for _, v := range values {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(textproto.TrimString(f), token) {
				return true
			}
		}
	}
	return false
}
