package proxy

import (
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/internal/hostport"
	"github.com/aileron-dev/aileron-proxy/learn"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// Learned forwarding. In a learn session, a request to a host matching the
// session's learn patterns that no operation matches is forwarded without
// any credential: nothing is injected, and the client's Authorization,
// Proxy-Authorization and every header a configured credential is placed in
// are removed. It is recorded as one connector.proxy.learned audit event
// (names and types, a masked path) and one line of the session's learn
// record (the path with its values). Requests that match an operation keep
// their normal path.

// LearnRecorder keeps the learn record of learn sessions; *learn.Store
// satisfies it.
type LearnRecorder interface {
	Append(sessionID string, r learn.Request) error
}

var _ LearnRecorder = (*learn.Store)(nil)

// reasonLearned is the allow reason of a learned request.
const reasonLearned = "learned"

// learnPrefixMax is how much of a JSON request body is kept, while it
// streams upstream, to read its top-level keys.
const learnPrefixMax = 64 << 10

// learnedExchange is what a learned request accumulates.
type learnedExchange struct {
	req    learn.Request
	prefix *prefixBody // nil when the body is not JSON
}

// prefixBody passes a body through and keeps its first bytes.
type prefixBody struct {
	rc  io.ReadCloser
	mu  sync.Mutex
	buf []byte
}

func (p *prefixBody) Read(b []byte) (int, error) {
	n, err := p.rc.Read(b)
	if n > 0 {
		p.mu.Lock()
		if room := learnPrefixMax - len(p.buf); room > 0 {
			p.buf = append(p.buf, b[:min(n, room)]...)
		}
		p.mu.Unlock()
	}
	return n, err
}

func (p *prefixBody) Close() error { return p.rc.Close() }

func (p *prefixBody) keys() []learn.Field {
	p.mu.Lock()
	defer p.mu.Unlock()
	return learn.BodyKeys(p.buf)
}

// learns reports whether the tunnel's session learns its host and the
// proxy can record what it learns.
func (s *Server) learns(t *tunnel) bool {
	return s.cfg.Learn != nil && len(t.sess.Learn) > 0 && hostport.MatchAny(t.sess.Learn, t.host, t.port)
}

// isLearnable reports whether a policy refusal is one a learn session turns
// into a learned request: no operation of the host matched (or the host has
// none). Non-canonical paths and ambiguous matches stay refused.
func isLearnable(r policy.Reason) bool {
	return r == policy.ReasonOperationNotAllowed || r == policy.ReasonHostNotAllowed
}

// startLearned prepares x's request for learned forwarding: it notes the
// kind of credential the client sent, strips every credential header, and
// keeps the prefix of a JSON body while it streams.
func (s *Server) startLearned(x *exchange) {
	r := x.r
	names := make([]string, 0, len(r.Header))
	for k := range r.Header {
		names = append(names, k)
	}
	lx := &learnedExchange{req: learn.Request{
		Method: x.ev.Method, Host: x.t.target, Path: x.path,
		ContentType: learn.MediaType(r.Header.Get("Content-Type")),
		Auth:        learn.InferClientAuth(r.Header.Get("Authorization"), names),
	}}
	if q := r.URL.RawQuery; q != "" {
		lx.req.Query = queryShape(q)
	}
	for _, h := range s.credentialHeaders() {
		r.Header.Del(h)
	}
	r.Header.Del("Authorization")
	r.Header.Del("Proxy-Authorization")
	if learn.IsJSON(r.Header.Get("Content-Type")) && r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		lx.prefix = &prefixBody{rc: r.Body}
		r.Body = lx.prefix
	}
	x.learned = lx
}

// queryShape returns the query's parameter names with the type of their
// values (string when they differ), in order of first appearance.
func queryShape(raw string) []learn.Field {
	var out []learn.Field
	for raw != "" {
		var kv string
		kv, raw, _ = cutAny(raw, "&;")
		if kv == "" {
			continue
		}
		k, v, _ := cutAny(kv, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			name = k
		}
		val, err := url.QueryUnescape(v)
		if err != nil {
			val = v
		}
		typ := learn.ValueType(val)
		if i := slices.IndexFunc(out, func(f learn.Field) bool { return f.Name == name }); i >= 0 {
			if out[i].Type != typ {
				out[i].Type = learn.TypeString
			}
			continue
		}
		if len(out) < 128 {
			out = append(out, learn.Field{Name: name, Type: typ})
		}
	}
	return out
}

// cutAny cuts s around the first byte of seps, as strings.Cut does
// around one separator.
func cutAny(s, seps string) (before, after string, found bool) {
	if i := strings.IndexAny(s, seps); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

// credentialHeaders returns the headers the configured credentials are
// placed in.
func (s *Server) credentialHeaders() []string {
	if s.cfg.Credentials == nil {
		return nil
	}
	src := s.cfg.Credentials()
	if hs, ok := src.(interface{ Headers() []string }); ok && src != nil {
		return hs.Headers()
	}
	return nil
}

// finishLearned turns x's audit event into connector.proxy.learned (masked
// path, names and types) and appends the request to the learn record. It
// runs for every event of a learned exchange, so no event of it carries the
// raw path.
func (s *Server) finishLearned(x *exchange) {
	lx := x.learned
	ev := &x.ev
	ev.Path = learn.MaskPath(x.path)
	if ev.Event != audit.EventProxied {
		return
	}
	ev.Event = audit.EventLearned
	if lx.prefix != nil {
		lx.req.Body = lx.prefix.keys()
	}
	lx.req.Time = x.start.UTC()
	lx.req.AuditID = ev.AuditID
	lx.req.Status = ev.Status
	al := &audit.Learned{ContentType: lx.req.ContentType, ResponseContentType: lx.req.ResponseContentType}
	for _, q := range lx.req.Query {
		al.QueryNames = append(al.QueryNames, q.Name)
	}
	for _, k := range lx.req.Body {
		al.BodyKeys = append(al.BodyKeys, audit.LearnedKey{Name: k.Name, Type: k.Type})
	}
	ev.Learned = al
	if err := s.cfg.Learn.Append(x.t.sess.ID, lx.req); err != nil {
		s.log.Warn("recording a learned request failed", zap.String("session_id", x.t.sess.ID), zap.String("audit_id", ev.AuditID), zap.Error(err))
	}
	s.metrics.learned.Inc()
}

// learnRefusal is the refusal of a WebSocket handshake on a learned host.
func learnRefusal(x *exchange) errorDetail {
	return errorDetail{Code: contract.CodeWebSocketNotAllowed,
		Message: "a learn session records plain requests only; WebSocket handshakes to " + x.t.target + " need a connector operation that declares \"websocket\": true"}
}
