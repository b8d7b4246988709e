// Package console is the daemon's local web console, served under /ui/ on
// the API listener: pending approvals (live, through server-sent events),
// sessions and the audit trail.
//
// Sign-in needs no password: the daemon mints a one-time code (NewLoginURL)
// and prints http://HOST:PORT/ui/login?code=...; opening it uses the code up
// and sets an HttpOnly, SameSite=Strict cookie. Every state-changing request
// needs that cookie and the page's CSRF token, and comes from the console's
// own origin. The API listener's guard checks the Host header before any of
// this runs. The console never sees a session's secrets: the registry keeps
// only their digests, and a request carrying an Authorization header is
// refused.
package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/approval"
	"github.com/aileron-dev/aileron-proxy/policy"
	"github.com/aileron-dev/aileron-proxy/session"
)

// Defaults and names.
const (
	// Prefix is the path every console URL starts with.
	Prefix = "/ui/"
	// LoginPath takes the one-time code.
	LoginPath = "/ui/login"
	// CodeTTL is how long a sign-in code stays valid.
	CodeTTL = 5 * time.Minute
	// CookieTTL is how long a signed-in browser stays signed in.
	CookieTTL = 12 * time.Hour
	// CookieName is the console's session cookie.
	CookieName = "aileron_console"
	// CSRFField is the hidden form field carrying the CSRF token.
	CSRFField = "csrf"
	// HeaderCSRF carries the CSRF token on script requests.
	HeaderCSRF = "X-CSRF-Token"
	// maxCodes bounds the unused codes kept; the oldest goes first.
	maxCodes = 64
)

// CSP is the Content-Security-Policy of every console response: scripts,
// styles and connections from the console's own origin only, no inline
// code, no plugins, no framing.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; base-uri 'none'; object-src 'none'; frame-ancestors 'none'"

// Config holds the console's dependencies.
type Config struct {
	// Logger receives sign-in and decision lines. Required.
	Logger *zap.Logger
	// Sessions is the daemon's session registry. Required.
	Sessions *session.Registry
	// Approvals is the approval broker. Required.
	Approvals *approval.Broker
	// Policy returns the current policy snapshot, for operation summaries
	// and path templates; nil shows the request path only.
	Policy func() *policy.Snapshot
	// AuditPath is the audit log the Audit page reads. Required.
	AuditPath string
	// BaseURL is the API listener's URL (http://127.0.0.1:PORT), used in
	// sign-in links. Required.
	BaseURL string
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// Tick is how often the event stream checks for changes; zero means
	// 250ms.
	Tick time.Duration
	// Sandboxes lists and removes the daemon's long-lived sandboxes; nil
	// shows none.
	Sandboxes Sandboxes
}

// Sandboxes is what the console needs of the daemon's long-lived
// sandboxes (launcher's manager, adapted by daemon).
type Sandboxes interface {
	// List returns the running sandboxes.
	List() []Sandbox
	// Remove removes one, as `aileron-proxy sandbox down ID` does; an
	// unknown id is ErrSandboxNotFound.
	Remove(ctx context.Context, id string) error
}

// ErrSandboxNotFound is Sandboxes.Remove's error for an unknown sandbox.
var ErrSandboxNotFound = errors.New("no such sandbox")

// Sandbox is a long-lived sandbox as the Sessions page shows it, under
// the session it belongs to. It carries no token.
type Sandbox struct {
	ID, SessionID, Runtime, Image, User string
}

// Console serves the web console. It is safe for concurrent use.
type Console struct {
	cfg Config
	log *zap.Logger
	mux *http.ServeMux
	// viewers counts the open event streams (events.go).
	viewers atomic.Int64

	mu      sync.Mutex
	codes   map[[sha256.Size]byte]time.Time // digest → expiry
	signins map[[sha256.Size]byte]signin    // cookie digest → sign-in
}

// signin is one signed-in browser.
type signin struct {
	csrf    string
	expires time.Time
}

// New checks cfg and builds the console.
func New(cfg Config) (*Console, error) {
	var missing []string
	if cfg.Logger == nil {
		missing = append(missing, "Logger")
	}
	if cfg.Sessions == nil {
		missing = append(missing, "Sessions")
	}
	if cfg.Approvals == nil {
		missing = append(missing, "Approvals")
	}
	if cfg.AuditPath == "" {
		missing = append(missing, "AuditPath")
	}
	if cfg.BaseURL == "" {
		missing = append(missing, "BaseURL")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("creating the console: required config missing: %s", strings.Join(missing, ", "))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 250 * time.Millisecond
	}
	c := &Console{
		cfg:     cfg,
		log:     cfg.Logger.Named("console"),
		codes:   map[[sha256.Size]byte]time.Time{},
		signins: map[[sha256.Size]byte]signin{},
	}
	c.mux = c.routes()
	return c, nil
}

// NewLoginURL mints a one-time sign-in code and returns its URL and expiry.
// The URL is the only place the code appears.
func (c *Console) NewLoginURL() (string, time.Time, error) {
	code, err := randomToken()
	if err != nil {
		return "", time.Time{}, err
	}
	exp := c.cfg.Now().Add(CodeTTL)
	c.mu.Lock()
	c.pruneLocked()
	for len(c.codes) >= maxCodes {
		var oldest [sha256.Size]byte
		first := true
		for k, e := range c.codes {
			if first || e.Before(c.codes[oldest]) {
				oldest, first = k, false
			}
		}
		delete(c.codes, oldest)
	}
	c.codes[sha256.Sum256([]byte(code))] = exp
	c.mu.Unlock()
	return strings.TrimSuffix(c.cfg.BaseURL, "/") + LoginPath + "?code=" + url.QueryEscape(code), exp, nil
}

// pruneLocked drops expired codes and sign-ins.
func (c *Console) pruneLocked() {
	now := c.cfg.Now()
	for k, e := range c.codes {
		if !now.Before(e) {
			delete(c.codes, k)
		}
	}
	for k, s := range c.signins {
		if !now.Before(s.expires) {
			delete(c.signins, k)
		}
	}
}

// redeem uses code up and reports whether it was valid.
func (c *Console) redeem(code string) bool {
	d := sha256.Sum256([]byte(code))
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pruneLocked()
	if _, ok := c.codes[d]; !ok {
		return false
	}
	delete(c.codes, d)
	return true
}

// signIn starts a browser session and returns its cookie value.
func (c *Console) signIn() (string, error) {
	tok, err := randomToken()
	if err != nil {
		return "", err
	}
	csrf, err := randomToken()
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	c.signins[sha256.Sum256([]byte(tok))] = signin{csrf: csrf, expires: c.cfg.Now().Add(CookieTTL)}
	c.mu.Unlock()
	return tok, nil
}

// signedIn returns the sign-in of r's cookie.
func (c *Console) signedIn(r *http.Request) (signin, bool) {
	ck, err := r.Cookie(CookieName)
	if err != nil || ck.Value == "" {
		return signin{}, false
	}
	d := sha256.Sum256([]byte(ck.Value))
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.signins[d]
	if !ok || !c.cfg.Now().Before(s.expires) {
		return signin{}, false
	}
	return s, true
}

// HasViewer reports whether a browser has the console open (an event
// stream is connected), so the launcher can stay quiet about held
// approvals.
func (c *Console) HasViewer() bool { return c.viewers.Load() > 0 }

// ServeHTTP serves the console's routes.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin") // "no-referrer" would make forms send Origin: null
	h.Set("Cache-Control", "no-store")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	if r.Header.Get("Authorization") != "" {
		// An API token (admin or a sandbox's) never opens the console.
		c.refuse(w, http.StatusForbidden, "the console takes no Authorization header; sign in with `aileron-proxy ui`")
		return
	}
	if !sameOrigin(r) {
		c.refuse(w, http.StatusForbidden, "cross-origin requests are refused; open the console at the address `aileron-proxy ui` prints")
		return
	}
	c.mux.ServeHTTP(w, r)
}

// sameOrigin reports whether r, if a browser says where it comes from,
// comes from the console's own origin. State-changing requests must carry
// one of Origin or Sec-Fetch-Site (every current browser sends them).
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		if err != nil || !strings.EqualFold(u.Host, r.Host) || u.Scheme != "http" {
			return false
		}
	} else if o == "null" {
		return false
	}
	return true
}

// guard wraps a page handler: without a valid cookie it redirects to the
// sign-in help page (GET) or refuses (anything else); state-changing
// methods also need the CSRF token.
func (c *Console) guard(next func(http.ResponseWriter, *http.Request, signin)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, ok := c.signedIn(r)
		if !ok {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, LoginPath, http.StatusSeeOther)
				return
			}
			c.refuse(w, http.StatusUnauthorized, "not signed in; run `aileron-proxy ui` for a sign-in link")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if r.Header.Get("Origin") == "" && r.Header.Get("Sec-Fetch-Site") == "" {
				c.refuse(w, http.StatusForbidden, "a state-changing request must come from the console page (no Origin or Sec-Fetch-Site header)")
				return
			}
			tok := r.Header.Get(HeaderCSRF)
			if tok == "" {
				tok = r.PostFormValue(CSRFField)
			}
			if subtle.ConstantTimeCompare([]byte(tok), []byte(s.csrf)) != 1 {
				c.refuse(w, http.StatusForbidden, "missing or wrong CSRF token; reload the page and try again")
				return
			}
		}
		next(w, r, s)
	}
}

// refuse answers a plain-text error.
func (c *Console) refuse(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = fmt.Fprintln(w, msg)
}

// login is GET /ui/login?code=...: it uses the code up, sets the cookie
// and redirects to the console, so the code leaves the address bar.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	code := r.URL.Query().Get("code")
	if code == "" || !c.redeem(code) {
		msg := "This sign-in link is not valid: it was already used, has expired (after " + CodeTTL.String() +
			") or was mistyped. Run `aileron-proxy ui` for a fresh one."
		if code == "" {
			msg = "Sign in with the one-time link that `aileron-proxy serve` or `aileron-proxy ui` prints."
		}
		c.refuse(w, http.StatusUnauthorized, msg)
		return
	}
	tok, err := c.signIn()
	if err != nil {
		c.log.Error("signing in", zap.Error(err))
		c.refuse(w, http.StatusInternalServerError, "signing in failed; see the daemon log")
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name:     CookieName,
		Value:    tok,
		Path:     Prefix,
		MaxAge:   int(CookieTTL.Seconds()),
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
	})
	c.log.Info("console signed in")
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// logout is POST /ui/logout.
func (c *Console) logout(w http.ResponseWriter, r *http.Request, _ signin) {
	if ck, err := r.Cookie(CookieName); err == nil {
		c.mu.Lock()
		delete(c.signins, sha256.Sum256([]byte(ck.Value)))
		c.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Path: Prefix, MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, LoginPath, http.StatusSeeOther)
}

func randomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating a console token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
