package credentials

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/oauth2"
)

// TokenExpiryDelta is how long before expiry an OAuth2 access token is
// refreshed. Tokens that live less than twice this long are refreshed at
// half their lifetime instead, so short-lived tokens are not refreshed on
// every request.
const TokenExpiryDelta = time.Minute

// oauthSource yields access tokens for an OAuth2 refresh binding through
// oauth2.ReuseTokenSourceWithExpiry: one refresh at a time, the token reused
// until TokenExpiryDelta before it expires.
type oauthSource struct {
	ts oauth2.TokenSource
	// cur is the last token handed out, for the lock-free fast path.
	cur atomic.Pointer[cachedToken]
}

// cachedToken is a checked access token and when it stops being used.
type cachedToken struct {
	v      Value
	expiry time.Time // zero: never expires
}

// fresh reports whether c is set and not within TokenExpiryDelta of expiry,
// the same rule ReuseTokenSourceWithExpiry applies (x/oauth2's wall clock).
func (c *cachedToken) fresh() bool {
	return c != nil && (c.expiry.IsZero() || time.Now().Add(TokenExpiryDelta).Before(c.expiry))
}

func newOAuthSource(b Binding, d *deps) *oauthSource {
	o := b.OAuth2
	r := &refresher{
		fqn:      b.FQN,
		tokenURL: o.TokenURL,
		clientID: o.ClientID,
		refresh:  &sourceReader{src: o.RefreshToken, what: "refresh token", deps: d},
		deps:     d,
	}
	if !o.ClientSecret.IsZero() {
		r.secret = &sourceReader{src: o.ClientSecret, what: "client secret", deps: d}
	}
	r.client = d.httpClient
	if len(o.Scopes) > 0 {
		// x/oauth2 sends no scope on refresh; RFC 6749 section 6 allows it
		// to narrow the grant, so add it on the way out.
		c := *d.httpClient
		base := c.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		c.Transport = &scopeTransport{base: base, scope: strings.Join(o.Scopes, " ")}
		r.client = &c
	}
	return &oauthSource{ts: oauth2.ReuseTokenSourceWithExpiry(nil, r, TokenExpiryDelta)}
}

// tokenResult carries one Token call, so token can give up when ctx ends
// while the shared refresh continues for other callers.
type tokenResult struct {
	tok *oauth2.Token
	err error
}

// token returns a valid access token, refreshing it when needed. A token
// still fresh is returned without a goroutine or lock.
func (o *oauthSource) token(ctx context.Context) (Value, error) {
	if c := o.cur.Load(); c.fresh() {
		return c.v, nil
	}
	ch := make(chan tokenResult, 1)
	go func() {
		tok, err := o.ts.Token()
		ch <- tokenResult{tok, err}
	}()
	select {
	case res := <-ch:
		if res.err != nil {
			var re *resolveErr
			if errors.As(res.err, &re) {
				return Value{}, re
			}
			// Only refresher errors reach here; they are resolveErrs. Be
			// safe regardless.
			return Value{}, reasonf("refreshing the oauth2 access token failed")
		}
		v := NewValue(res.tok.AccessToken)
		if err := CheckSecret(v); err != nil {
			return Value{}, reasonf("the oauth2 access token is not usable: %s", err.Error())
		}
		o.cur.Store(&cachedToken{v: v, expiry: res.tok.Expiry})
		return v, nil
	case <-ctx.Done():
		return Value{}, &resolveErr{msg: "waiting for the oauth2 token refresh: " + ctx.Err().Error(), cause: ctx.Err()}
	}
}

// refresher is the oauth2.TokenSource that performs one refresh-token grant
// per call. ReuseTokenSourceWithExpiry serialises its calls.
type refresher struct {
	fqn      string
	tokenURL string
	clientID string
	refresh  *sourceReader
	secret   *sourceReader // nil for public clients
	deps     *deps
	client   *http.Client // reaches the token endpoint

	mu sync.Mutex // guards the fields below (calls are serialised already)
	// rotated is the refresh token the server issued last, used while the
	// configured source still yields lastSource.
	rotated    Value
	lastSource Value
}

// Token implements oauth2.TokenSource. Errors are *resolveErr and never
// contain token endpoint response bodies.
func (r *refresher) Token() (*oauth2.Token, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.deps.execTimeout)
	defer cancel()
	rt, err := r.refresh.read(ctx)
	if err != nil {
		return nil, err
	}
	var cs Value
	if r.secret != nil {
		if cs, err = r.secret.read(ctx); err != nil {
			return nil, err
		}
	}
	r.mu.Lock()
	use := rt
	if !r.rotated.IsZero() && rt.Equal(r.lastSource) {
		use = r.rotated
	}
	r.mu.Unlock()

	conf := &oauth2.Config{
		ClientID:     r.clientID,
		ClientSecret: cs.Reveal(),
		Endpoint:     oauth2.Endpoint{TokenURL: r.tokenURL, AuthStyle: oauth2.AuthStyleAutoDetect},
	}
	// Bounded even when the caller's client has no timeout: a hung refresh
	// would hold the token source's lock, and every request of this
	// credential would wait on it.
	hctx, hcancel := context.WithTimeout(context.WithValue(context.Background(), oauth2.HTTPClient, r.client), DefaultTokenTimeout)
	defer hcancel()
	tok, err := conf.TokenSource(hctx, &oauth2.Token{RefreshToken: use.Reveal()}).Token()
	if err != nil {
		return nil, r.explain(err, rt, use, cs)
	}
	if tok.AccessToken == "" {
		return nil, reasonf("token endpoint %s returned no access token", r.displayURL())
	}
	if tok.RefreshToken != "" && tok.RefreshToken != use.Reveal() {
		r.mu.Lock()
		r.rotated, r.lastSource = NewValue(tok.RefreshToken), rt
		r.mu.Unlock()
	}
	if !tok.Expiry.IsZero() {
		now := time.Now()
		if life := tok.Expiry.Sub(now); life < 2*TokenExpiryDelta {
			tok.Expiry = now.Add(max(life, 0)/2 + TokenExpiryDelta)
		}
	}
	return tok, nil
}

func (r *refresher) displayURL() string {
	u, err := url.Parse(r.tokenURL)
	if err != nil {
		return "(token url)"
	}
	return redactURL(u)
}

// explain turns a token-endpoint failure into a message with the status and
// OAuth2 error code only: response bodies and error descriptions may echo
// the refresh token or client secret.
func (r *refresher) explain(err error, secrets ...Value) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		status := 0
		if re.Response != nil {
			status = re.Response.StatusCode
		}
		msg := fmt.Sprintf("refreshing the oauth2 access token at %s: the token endpoint answered %d", r.displayURL(), status)
		if isErrorCode(re.ErrorCode) {
			msg += fmt.Sprintf(" with error %q", re.ErrorCode)
		}
		if re.ErrorCode == "invalid_grant" || re.ErrorCode == "invalid_client" || status == 400 || status == 401 {
			msg += fmt.Sprintf("; obtain a new refresh token (or check the client id and secret) and run `aileron-proxy credential set %s --kind oauth2 ...` again", r.fqn)
		}
		return reasonf("%s", msg)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return reasonf("refreshing the oauth2 access token: reaching %s: %s", r.displayURL(), scrubString(ue.Err.Error(), secrets...))
	}
	return reasonf("refreshing the oauth2 access token at %s: %s", r.displayURL(), scrubString(err.Error(), secrets...))
}

// isErrorCode reports whether s looks like an RFC 6749 error code.
func isErrorCode(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if c != '_' && (c < 'a' || c > 'z') {
			return false
		}
	}
	return true
}

// scrubString masks every form of secrets in s.
func scrubString(s string, secrets ...Value) string {
	var vs []Value
	for _, v := range secrets {
		if v.Len() >= MinSecretLen && v.Len() <= MaxSecretLen {
			vs = append(vs, v)
		}
	}
	sc, err := NewScrubber(vs...)
	if err != nil {
		return s
	}
	return string(sc.Bytes([]byte(s)))
}

// scopeTransport adds the configured scope to refresh-token grants that
// carry none.
type scopeTransport struct {
	base  http.RoundTripper
	scope string
}

func (s *scopeTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPost || r.Body == nil {
		return s.base.RoundTrip(r)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	r.Body.Close()
	if err != nil {
		return nil, errors.New("reading the token request body failed")
	}
	if form, err := url.ParseQuery(string(body)); err == nil && form.Get("grant_type") == "refresh_token" && form.Get("scope") == "" {
		form.Set("scope", s.scope)
		body = []byte(form.Encode())
	}
	c := r.Clone(r.Context())
	c.Body = io.NopCloser(bytes.NewReader(body))
	c.ContentLength = int64(len(body))
	c.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return s.base.RoundTrip(c)
}
