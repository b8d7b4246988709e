package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/ca"
	"github.com/aileron-dev/aileron-proxy/credentials"
	"github.com/aileron-dev/aileron-proxy/internal/hostport"
	"github.com/aileron-dev/aileron-proxy/internal/preview"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// The packages the daemon wires in satisfy the proxy's interfaces directly.
var (
	_ LeafIssuer       = (*ca.Authority)(nil)
	_ CredentialSource = (*credentials.Resolver)(nil)
)

// Session is what the proxy needs of an authenticated session. The daemon
// adapts session.Session to it.
type Session struct {
	// ID names the session in audit events, logs and the tunnel limit.
	ID string
	// Scope is the set of connectors the session may use; the zero Scope
	// allows nothing.
	Scope policy.Scope
	// CA issues the session's leaf for an intercepted CONNECT host. Required
	// for interception; *ca.Authority satisfies it.
	CA LeafIssuer
	// ExpiresAt ends the session: requests after it are refused even on an
	// open tunnel. The zero time means the proxy does not check expiry itself.
	ExpiresAt time.Time
	// Learn are the learn patterns of a learn session: requests to a
	// matching host that no operation matches are forwarded without
	// credentials and recorded (learn.go). Nil for an ordinary session.
	Learn []hostport.Glob
}

// LeafIssuer returns the TLS certificate presented for host (a DNS name or an
// unbracketed IP literal, no port). Implementations cache; the proxy calls it
// once per intercepted tunnel.
type LeafIssuer interface {
	Leaf(host string) (*tls.Certificate, error)
}

// SessionAuthenticator checks a proxy credential. It compares the secret in
// constant time and refuses ended and expired sessions; *session.Registry
// does both behind a small adapter.
type SessionAuthenticator interface {
	AuthenticateProxy(id, secret string) (Session, error)
}

// CredentialSource finds the injector bound to a connector and credential
// kind. *credentials.Resolver satisfies it.
type CredentialSource interface {
	Lookup(fqn string, kind credentials.Kind) (*credentials.Injector, bool)
}

// ApprovalRequest describes a held request to the person deciding it.
type ApprovalRequest struct {
	SessionID, ConnectorFQN, Tool, Operation, Method, Host, Path string
	// Fields are the operation's audit fields (redacted where the spec asks).
	Fields map[string]string
	// Preview is what the person is shown: the request's fields, its
	// body's digest and the preview fetch's answer. It is for the person
	// only and must not be recorded.
	Preview *preview.Preview
}

// ApprovalOutcome is what became of a held request. Its zero value denies.
type ApprovalOutcome int

// Approval outcomes.
const (
	ApprovalDenied ApprovalOutcome = iota
	ApprovalApproved
	ApprovalTimedOut
)

// String returns "denied", "approved" or "timeout".
func (o ApprovalOutcome) String() string {
	switch o {
	case ApprovalApproved:
		return "approved"
	case ApprovalTimedOut:
		return "timeout"
	default:
		return "denied"
	}
}

// Approver holds a request until a person decides it, the approval times
// out, or ctx ends (the client went away); the daemon adapts approval.Broker.
type Approver interface {
	Await(ctx context.Context, r ApprovalRequest) ApprovalOutcome
}

// Defaults for Limits fields left zero.
const (
	DefaultMaxHeaderBytes        = 64 << 10
	DefaultMaxTunnelsPerSession  = 256
	DefaultIdleTimeout           = 2 * time.Minute
	DefaultConnectTimeout        = 10 * time.Second
	DefaultTLSHandshakeTimeout   = 10 * time.Second
	DefaultDialTimeout           = 10 * time.Second
	DefaultResponseHeaderTimeout = 60 * time.Second
	DefaultMaxIdleConnsPerHost   = 64
	DefaultMaxConcurrentStreams  = 250
	DefaultRetryAfter            = time.Second
)

// Limits bound what one client can make the proxy hold. Zero fields take the
// defaults above; negative values are refused by New.
type Limits struct {
	// MaxHeaderBytes caps the request line plus headers of a CONNECT, a plain
	// request or a request inside a tunnel. Default 64 KiB.
	MaxHeaderBytes int
	// MaxTunnelsPerSession caps the open tunnels (intercepted and
	// passthrough) of one session; more CONNECTs get 429 with Retry-After.
	// Default 256.
	MaxTunnelsPerSession int
	// IdleTimeout closes a client connection (plain, or an intercepted
	// tunnel between requests) with no request for this long, and a
	// passthrough tunnel with no bytes in either direction. Default 2 min.
	IdleTimeout time.Duration
	// ConnectTimeout bounds reading a request's headers on the proxy port
	// and inside a tunnel. Default 10 s.
	ConnectTimeout time.Duration
	// TLSHandshakeTimeout bounds the client's handshake inside a tunnel and
	// the proxy's handshake with an upstream. Default 10 s.
	TLSHandshakeTimeout time.Duration
	// DialTimeout bounds resolving and connecting to an upstream. Default 10 s.
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for an upstream's response
	// headers once the request is sent; past it the client gets 504.
	// Default 60 s.
	ResponseHeaderTimeout time.Duration
	// MaxIdleConnsPerHost is the idle upstream connections kept per host for
	// reuse. Default 64.
	MaxIdleConnsPerHost int
	// MaxConcurrentStreams caps concurrent HTTP/2 streams per client
	// connection. Default 250.
	MaxConcurrentStreams uint32
	// RetryAfter is the Retry-After sent with 429. Default 1 s (rounded up to
	// whole seconds).
	RetryAfter time.Duration
}

func (l Limits) withDefaults() (Limits, error) {
	durations := []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"idle_timeout", &l.IdleTimeout, DefaultIdleTimeout},
		{"connect_timeout", &l.ConnectTimeout, DefaultConnectTimeout},
		{"tls_handshake_timeout", &l.TLSHandshakeTimeout, DefaultTLSHandshakeTimeout},
		{"dial_timeout", &l.DialTimeout, DefaultDialTimeout},
		{"response_header_timeout", &l.ResponseHeaderTimeout, DefaultResponseHeaderTimeout},
		{"retry_after", &l.RetryAfter, DefaultRetryAfter},
	}
	for _, d := range durations {
		if *d.v < 0 {
			return l, fmt.Errorf("checking limits: %s is %s; use a positive duration, or zero for the default %s", d.name, *d.v, d.def)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	ints := []struct {
		name string
		v    *int
		def  int
	}{
		{"max_header_bytes", &l.MaxHeaderBytes, DefaultMaxHeaderBytes},
		{"max_tunnels_per_session", &l.MaxTunnelsPerSession, DefaultMaxTunnelsPerSession},
		{"max_idle_conns_per_host", &l.MaxIdleConnsPerHost, DefaultMaxIdleConnsPerHost},
	}
	for _, n := range ints {
		if *n.v < 0 {
			return l, fmt.Errorf("checking limits: %s is %d; use a positive number, or zero for the default %d", n.name, *n.v, n.def)
		}
		if *n.v == 0 {
			*n.v = n.def
		}
	}
	if l.MaxConcurrentStreams == 0 {
		l.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	return l, nil
}

// Config is everything New needs.
type Config struct {
	// Logger receives one line per decision (Info allow, Warn deny) and
	// proxy faults. Required.
	Logger *zap.Logger
	// Sessions authenticates Proxy-Authorization. Required.
	Sessions SessionAuthenticator
	// Policy returns the current snapshot; it is called for every decision
	// so a reload applies to the next request. Required; a nil snapshot
	// denies everything.
	Policy func() *policy.Snapshot
	// Credentials returns the current credential source, called per
	// credentialed request. Nil, or a nil result, means no credential is
	// configured (credentialed operations get 403 credential_not_configured).
	// Return an untyped nil, never a typed nil pointer.
	Credentials func() CredentialSource
	// Audit records one event per decision. Required. When it also
	// implements audit.Health (audit.Writer does), the proxy forwards
	// nothing while it is unavailable: requests that would need an audit
	// line get 503 audit_unavailable (denials are still answered).
	Audit audit.Recorder
	// Learn keeps the learn records of learn sessions. Nil refuses learned
	// requests (a learn session then gets only its operations).
	Learn LearnRecorder
	// Approver holds operations whose spec says approval: required. Nil
	// refuses them (fail closed).
	Approver Approver
	// Registerer receives the proxy's Prometheus collectors. Nil means the
	// metrics are kept but not exported; the global registry is never used.
	Registerer prometheus.Registerer
	// LeafStats, when set, exports the CA leaf counters (issued, cache hits)
	// summed over sessions as aileron_ca_leaves_issued_total and
	// aileron_ca_leaf_cache_hits_total. It must be monotonic.
	LeafStats func() (issued, cacheHits uint64)
	// InternalKey is the per-process key the control API's run endpoint
	// sends in X-Aileron-Internal; only a request carrying it (compared in
	// constant time) may set X-Aileron-Source and X-Aileron-Audit-Args.
	// Empty disables those headers entirely.
	InternalKey string
	// Passthrough are host globs tunnelled blind (no interception, no
	// credentials): an exact host or a leading "*." matching one or more
	// labels (not the bare domain), with an optional ":port" that restricts
	// the port (any port when absent). "*" alone and "*.<tld>" are refused.
	Passthrough []string
	// Resolve maps an upstream host:port (e.g. "api.example.com:443"; a key
	// without a port means :443, so plain-HTTP passthrough hosts need ":80")
	// to the ip:port dialled for it, like curl's --resolve. Operator-set, so
	// exempt from the private-address guard.
	Resolve map[string]string
	// SystemRoots are the roots trusted for upstream TLS; nil means
	// x509.SystemCertPool. Tests pass an empty pool.
	SystemRoots *x509.CertPool
	// UpstreamRoots are extra roots trusted for upstream TLS on top of
	// SystemRoots (--upstream-ca). Upstream verification is never skipped.
	UpstreamRoots []*x509.Certificate
	// UpstreamProxy, when set, is the corporate proxy every upstream
	// connection goes through with CONNECT (upstreamproxy.go); Resolve
	// targets and its NoProxy hosts are dialled directly. Nil dials
	// directly.
	UpstreamProxy *UpstreamProxy
	// Limits bound sizes, counts and waits; zero fields take defaults.
	Limits Limits
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (c *Config) validate() error {
	var errs []error
	if c.Logger == nil {
		errs = append(errs, errors.New("logger is required; pass zap.NewNop() to discard logs"))
	}
	if c.Sessions == nil {
		errs = append(errs, errors.New("sessions is required: the proxy authenticates every CONNECT"))
	}
	if c.Policy == nil {
		errs = append(errs, errors.New("policy is required: pass a func returning the current *policy.Snapshot"))
	}
	if c.Audit == nil {
		errs = append(errs, errors.New("audit is required: pass an audit.Recorder (audit.Open)"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("configuring the proxy: %w", errors.Join(errs...))
	}
	return nil
}
