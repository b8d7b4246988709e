package credentials

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Defaults for ResolverConfig's zero values.
const (
	DefaultExecTimeout  = 10 * time.Second
	DefaultExecCacheTTL = 30 * time.Second
	// DefaultTokenTimeout bounds every token-endpoint call, whatever
	// ResolverConfig.HTTPClient's own timeout.
	DefaultTokenTimeout = 30 * time.Second
)

// ErrUnavailable is matched (errors.Is) by every error Injector.Apply
// returns: the credential is configured but could not be resolved or
// applied. The proxy answers such requests itself; the error text says what
// to fix and never contains secret bytes.
var ErrUnavailable = errors.New("credential unavailable")

// ResolverConfig configures NewResolver.
type ResolverConfig struct {
	// File is the credentials snapshot; required. NewResolver copies it.
	File *File
	// Getenv reads the daemon's environment for env sources; nil means
	// os.Getenv.
	Getenv func(string) string
	// ExecTimeout bounds one run of an exec source; zero means
	// DefaultExecTimeout.
	ExecTimeout time.Duration
	// ExecCacheTTL is how long an exec source's output is reused; zero
	// means DefaultExecCacheTTL, negative disables the cache.
	ExecCacheTTL time.Duration
	// HTTPClient reaches OAuth2 token endpoints; nil means a client with
	// the system roots. Each call is bounded by DefaultTokenTimeout.
	HTTPClient *http.Client
	// Now is the clock for the exec cache; nil means time.Now. (OAuth2
	// expiry uses the x/oauth2 clock, which is the wall clock.)
	Now func() time.Time
	// Previous, when set, is the resolver this one replaces: injectors whose
	// binding and settings are unchanged are carried over with their caches
	// (OAuth2 access tokens and rotated refresh tokens, exec output).
	Previous *Resolver
}

// deps is the resolved configuration shared by a resolver's injectors.
type deps struct {
	getenv       func(string) string
	execTimeout  time.Duration
	execCacheTTL time.Duration
	httpClient   *http.Client
	now          func() time.Time
	// userClient is ResolverConfig.HTTPClient as given (nil for the default).
	userClient *http.Client
}

// same reports whether injectors built with o behave as ones built with d.
func (d *deps) same(o *deps) bool {
	return d.execTimeout == o.execTimeout && d.execCacheTTL == o.execCacheTTL && d.userClient == o.userClient
}

// Resolver maps (connector FQN, Kind) to an Injector. It is immutable and
// safe for concurrent use; the daemon builds a new one when credentials.json
// changes.
type Resolver struct {
	injectors map[bindingKey]*Injector
	deps      *deps
}

type bindingKey struct {
	fqn  string
	kind Kind
}

// NewResolver builds a Resolver from a File snapshot, validating every
// binding.
func NewResolver(cfg ResolverConfig) (*Resolver, error) {
	if cfg.File == nil {
		return nil, errors.New("creating credential resolver: ResolverConfig.File is required")
	}
	d := &deps{
		getenv:       cfg.Getenv,
		execTimeout:  cfg.ExecTimeout,
		execCacheTTL: cfg.ExecCacheTTL,
		httpClient:   cfg.HTTPClient,
		now:          cfg.Now,
		userClient:   cfg.HTTPClient,
	}
	if d.getenv == nil {
		d.getenv = os.Getenv
	}
	if d.execTimeout <= 0 {
		d.execTimeout = DefaultExecTimeout
	}
	if d.execCacheTTL == 0 {
		d.execCacheTTL = DefaultExecCacheTTL
	}
	if d.httpClient == nil {
		d.httpClient = &http.Client{Timeout: DefaultTokenTimeout}
	}
	if d.now == nil {
		d.now = time.Now
	}
	r := &Resolver{injectors: map[bindingKey]*Injector{}, deps: d}
	for _, b := range cfg.File.clone().bindings {
		if err := b.Validate(); err != nil {
			return nil, fmt.Errorf("creating credential resolver: credential for %s (%s): %w", b.FQN, b.Kind, err)
		}
		k := bindingKey{b.FQN, b.Kind}
		if p := cfg.Previous; p != nil && p.deps.same(d) {
			if old, ok := p.injectors[k]; ok && bindingEqual(old.b, b) {
				r.injectors[k] = old
				continue
			}
		}
		r.injectors[k] = newInjector(b, d)
	}
	return r, nil
}

// Lookup returns the injector for (fqn, kind).
func (r *Resolver) Lookup(fqn string, kind Kind) (*Injector, bool) {
	if r == nil {
		return nil, false
	}
	i, ok := r.injectors[bindingKey{fqn, kind}]
	return i, ok
}

// Headers returns the canonical names of the request headers the
// configured credentials are placed in (Authorization included when any
// binding uses it), sorted: what a learned request, which carries no
// credential, must not carry either.
func (r *Resolver) Headers() []string {
	if r == nil {
		return nil
	}
	var out []string
	for _, i := range r.injectors {
		if i.header != "" && !slices.Contains(out, i.header) {
			out = append(out, i.header)
		}
	}
	slices.Sort(out)
	return out
}

// Len returns the number of configured credentials.
func (r *Resolver) Len() int {
	if r == nil {
		return 0
	}
	return len(r.injectors)
}

// String describes the resolver without secrets.
func (r *Resolver) String() string {
	return fmt.Sprintf("credentials.Resolver(%d credentials)", r.Len())
}

// GoString is String.
func (r *Resolver) GoString() string { return r.String() }

// Format prints String for every verb.
func (r *Resolver) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, r.String()) }

// Injector applies one binding's credential to outbound requests. It is
// safe for concurrent use and caches what it may (exec output, OAuth2
// access tokens, and per secret the rendered value and compiled Scrubber).
type Injector struct {
	b      Binding
	header string // canonical header name; empty for query placement
	format string
	query  string

	secret *sourceReader // nil for OAuth2 refresh bindings
	oauth  *oauthSource  // nil otherwise
	aws    *awsSigner    // set for aws_sigv4 (sigv4.go)

	// last is what the secret last applied puts on the wire, with its
	// Scrubber; read without a lock on every Apply.
	last atomic.Pointer[applied]
}

// applied is what Apply derives from one secret: what it puts on the wire
// (the header value, or for query placement the escaped name=value pair)
// and the Scrubber for every injected form.
type applied struct {
	v    Value
	wire Value
	s    *Scrubber
}

func newInjector(b Binding, d *deps) *Injector {
	i := &Injector{b: b}
	i.header, i.format, i.query = b.placement()
	if b.AWS != nil {
		i.aws = newAWSSigner(b, d)
		i.header, i.format, i.query = "", "", ""
	} else if b.OAuth2 != nil {
		i.oauth = newOAuthSource(b, d)
	} else {
		i.secret = &sourceReader{src: b.Source, what: "secret", deps: d}
	}
	return i
}

// FQN returns the connector FQN of the binding.
func (i *Injector) FQN() string { return i.b.FQN }

// Kind returns the credential kind of the binding.
func (i *Injector) Kind() Kind { return i.b.Kind }

// String describes the injector without secrets, e.g.
// "github://acme/x (bearer, env GH_TOKEN → Authorization: Bearer {secret})".
func (i *Injector) String() string {
	return fmt.Sprintf("%s (%s, %s → %s)", i.b.FQN, i.b.Kind, i.b.DescribeSource(), i.b.DescribePlacement())
}

// GoString is String.
func (i *Injector) GoString() string { return i.String() }

// Format prints String for every verb.
func (i *Injector) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, i.String()) }

// applyError is what Apply returns; it matches ErrUnavailable and unwraps
// only to context errors.
type applyError struct {
	fqn   string
	kind  Kind
	msg   string
	cause error
}

func (e *applyError) Error() string {
	return fmt.Sprintf("resolving the %s credential for %s: %s", e.kind, e.fqn, e.msg)
}

func (e *applyError) Is(target error) bool { return target == ErrUnavailable }
func (e *applyError) Unwrap() error        { return e.cause }

func (i *Injector) fail(err error) error {
	ae := &applyError{fqn: i.b.FQN, kind: i.b.Kind, msg: err.Error()}
	var re *resolveErr
	if errors.As(err, &re) {
		ae.cause = re.cause
	}
	return ae
}

// Apply resolves the secret and sets it on out, the outbound request: for
// the Authorization header (and basic) any existing Authorization is
// removed first; a custom header replaces any value of that header; a query
// parameter replaces any parameter of that name, leaving the rest of the
// query as it was. It returns a Scrubber that knows every injected form of
// the secret. Errors match ErrUnavailable and never contain the secret.
func (i *Injector) Apply(ctx context.Context, out *http.Request) (*Scrubber, error) {
	if out == nil || out.URL == nil {
		return nil, i.fail(reasonf("no outbound request"))
	}
	if i.aws != nil {
		return i.applyAWS(ctx, out) // sigv4.go
	}
	var v Value
	var err error
	if i.oauth != nil {
		v, err = i.oauth.token(ctx)
	} else {
		v, err = i.secret.read(ctx)
	}
	if err != nil {
		return nil, i.fail(err)
	}
	a, err := i.applied(v)
	if err != nil {
		return nil, i.fail(err)
	}
	if out.Header == nil {
		out.Header = http.Header{}
	}
	if i.query != "" {
		out.URL.RawQuery = setQueryParam(out.URL.RawQuery, i.query, a.wire.Reveal())
		out.URL.ForceQuery = false
	} else {
		// i.header is canonical, so this is Header.Set without checking the
		// name again: it replaces every value.
		out.Header[i.header] = []string{a.wire.Reveal()}
	}
	return a.s, nil
}

// applied returns what v puts on the wire, deriving it only when the secret
// changed since the last Apply. Concurrent Applies that see a new secret may
// each derive it; the last stored wins, and every one is correct for v.
func (i *Injector) applied(v Value) (*applied, error) {
	if a := i.last.Load(); a != nil && a.v.Equal(v) {
		return a, nil
	}
	secret := v.Reveal()
	a := &applied{v: v}
	vals := []Value{v}
	switch {
	case i.b.Kind == KindBasic:
		token := base64.StdEncoding.EncodeToString([]byte(i.b.Username + ":" + secret))
		a.wire = NewValue("Basic " + token)
		vals = append(vals, NewValue(token), a.wire)
	case i.query != "":
		a.wire = NewValue(url.QueryEscape(i.query) + "=" + url.QueryEscape(secret))
	default:
		hv := strings.Replace(i.format, secretPlaceholder, secret, 1)
		if !httpguts.ValidHeaderFieldValue(hv) {
			return nil, reasonf("the secret from %s contains characters not allowed in a header value", i.b.DescribeSource())
		}
		a.wire = NewValue(hv)
		if hv != secret {
			vals = append(vals, a.wire)
		}
	}
	s, err := NewScrubber(vals...)
	if err != nil {
		return nil, reasonf("preparing the response scrubber: %s", err.Error())
	}
	a.s = s
	i.last.Store(a)
	return a, nil
}

// setQueryParam returns rawQuery with every name parameter removed and pair
// (name=value, escaped) appended, leaving the other parameters byte for
// byte.
func setQueryParam(rawQuery, name, pair string) string {
	var kept []string
	for _, part := range strings.Split(rawQuery, "&") {
		if part == "" {
			continue
		}
		k, _, _ := strings.Cut(part, "=")
		if uk, err := url.QueryUnescape(k); err == nil && uk == name {
			continue
		}
		kept = append(kept, part)
	}
	kept = append(kept, pair)
	return strings.Join(kept, "&")
}

// bindingEqual reports whether two bindings are the same, secrets included.
func bindingEqual(a, b Binding) bool {
	if a.FQN != b.FQN || a.Kind != b.Kind || a.Username != b.Username || a.Placement != b.Placement || !sourceEqual(a.Source, b.Source) {
		return false
	}
	if (a.AWS == nil) != (b.AWS == nil) || (a.AWS != nil && !a.AWS.equal(b.AWS)) {
		return false
	}
	if (a.OAuth2 == nil) != (b.OAuth2 == nil) {
		return false
	}
	if a.OAuth2 == nil {
		return true
	}
	x, y := a.OAuth2, b.OAuth2
	if x.TokenURL != y.TokenURL || x.ClientID != y.ClientID || !sourceEqual(x.ClientSecret, y.ClientSecret) ||
		!sourceEqual(x.RefreshToken, y.RefreshToken) || len(x.Scopes) != len(y.Scopes) {
		return false
	}
	for k := range x.Scopes {
		if x.Scopes[k] != y.Scopes[k] {
			return false
		}
	}
	return true
}

func sourceEqual(a, b Source) bool {
	return a.Type == b.Type && a.Ref == b.Ref && a.Value.Equal(b.Value)
}
