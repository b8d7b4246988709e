package credentials

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/aileron-dev/aileron-proxy/internal/envname"
)

// Kind is the credential kind an operation asks for. The spellings match the
// connector spec's credential field. The zero value is not a valid kind.
type Kind string

// Credential kinds.
const (
	KindOAuth2 Kind = "oauth2"
	KindAPIKey Kind = "api_key"
	KindBearer Kind = "bearer"
	KindBasic  Kind = "basic"
	// KindAWSSigV4 re-signs requests with AWS Signature Version 4
	// (sigv4.go); the secret is the secret access key.
	KindAWSSigV4 Kind = "aws_sigv4"
)

// kinds lists the valid kinds in the order help text shows them.
var kinds = [...]Kind{KindOAuth2, KindAPIKey, KindBearer, KindBasic, KindAWSSigV4}

// String returns the spec spelling.
func (k Kind) String() string { return string(k) }

// IsValid reports whether k is one of the four kinds.
func (k Kind) IsValid() bool {
	for _, v := range kinds {
		if k == v {
			return true
		}
	}
	return false
}

// ParseKind parses a kind spelling such as "api_key".
func ParseKind(s string) (Kind, error) {
	k := Kind(s)
	if !k.IsValid() {
		return "", fmt.Errorf("parsing credential kind %q: use oauth2, api_key, bearer, basic or aws_sigv4", s)
	}
	return k, nil
}

// SourceType says where a secret comes from. The zero value is not valid.
type SourceType string

// Source types.
const (
	// SourceEnv reads the daemon's environment variable Source.Ref.
	SourceEnv SourceType = "env"
	// SourceFile reads the file at the absolute path Source.Ref.
	SourceFile SourceType = "file"
	// SourceExec runs Source.Ref with /bin/sh -c and uses its stdout.
	SourceExec SourceType = "exec"
	// SourceStored uses Source.Value, kept in credentials.json.
	SourceStored SourceType = "stored"
)

// Source is where one secret comes from.
type Source struct {
	// Type selects the source; the zero value means "no source".
	Type SourceType
	// Ref is the environment variable name (env), absolute file path (file)
	// or shell command (exec); empty for stored.
	Ref string
	// Value is the secret itself; only for stored.
	Value Value
}

// IsZero reports whether no source is configured.
func (s Source) IsZero() bool { return s.Type == "" && s.Ref == "" && s.Value.IsZero() }

// Describe renders the source without its secret, e.g. "env GH_TOKEN".
func (s Source) Describe() string {
	switch s.Type {
	case SourceStored:
		return "stored"
	case SourceExec:
		return "exec " + shellQuote(s.Ref)
	case "":
		return "none"
	default:
		return string(s.Type) + " " + s.Ref
	}
}

// OAuth2 configures the refresh-token grant: the injector exchanges the
// refresh token for access tokens at TokenURL and refreshes them before they
// expire.
type OAuth2 struct {
	// TokenURL is the token endpoint (https; http only for loopback hosts).
	TokenURL string
	// ClientID identifies the OAuth2 client.
	ClientID string
	// ClientSecret is the client secret; a zero Source means a public client.
	ClientSecret Source
	// RefreshToken is required.
	RefreshToken Source
	// Scopes are sent with each refresh; empty means the grant's scopes.
	Scopes []string
}

// Placement says where the secret goes on the outbound request. The zero
// value means "Authorization: Bearer {secret}" (for basic: Authorization:
// Basic base64(username:secret)).
type Placement struct {
	// Header is the request header that carries the secret; empty means
	// Authorization unless Query is set.
	Header string
	// Format is the header value, with {secret} standing for the secret once;
	// empty means "Bearer {secret}" for Authorization and "{secret}" otherwise.
	Format string
	// Query names the query parameter that carries the secret; it excludes
	// Header and Format.
	Query string
}

// Binding is one configured credential: the secret for (FQN, Kind), where it
// comes from and where it goes.
type Binding struct {
	// FQN is the connector, e.g. github://acme/aileron-connector-github.
	FQN string
	// Kind is the credential kind the connector's operations ask for.
	Kind Kind
	// Source supplies the secret directly; zero when OAuth2 is set.
	Source Source
	// OAuth2, when set (Kind oauth2 only), obtains access tokens with a
	// refresh-token grant instead of Source.
	OAuth2 *OAuth2
	// Username is the HTTP Basic user name; required for Kind basic, the
	// secret being the password.
	Username string
	// Placement says where the secret goes; see Placement.
	Placement Placement
	// AWS is set for Kind aws_sigv4 (sigv4.go): the access key id, the
	// session token, the host profile, and region and service overrides.
	AWS *AWSSigV4
}

// Secret limits. Shorter secrets cannot be scrubbed from responses without
// masking ordinary text, so they are refused.
const (
	MinSecretLen = 4
	MaxSecretLen = 8 << 10
)

const secretPlaceholder = "{secret}"

const (
	headerAuthorization = "Authorization"
	defaultAuthFormat   = "Bearer " + secretPlaceholder
)

// placement returns the header name and value format, or query != "" for
// query placement. basic returns Authorization with an empty format.
func (b Binding) placement() (header, format, query string) {
	if b.Kind == KindBasic {
		return headerAuthorization, "", ""
	}
	p := b.Placement
	if p.Query != "" {
		return "", "", p.Query
	}
	header = headerAuthorization
	if p.Header != "" {
		header = http.CanonicalHeaderKey(p.Header)
	}
	format = p.Format
	if format == "" {
		format = secretPlaceholder
		if header == headerAuthorization {
			format = defaultAuthFormat
		}
	}
	return header, format, ""
}

// DescribePlacement renders where the secret goes, without the secret.
func (b Binding) DescribePlacement() string {
	if b.AWS != nil {
		return b.AWS.describePlacement()
	}
	if b.Kind == KindBasic {
		return fmt.Sprintf("Authorization: Basic (user %q)", b.Username)
	}
	h, f, q := b.placement()
	if q != "" {
		return "query " + q + "=" + secretPlaceholder
	}
	return h + ": " + f
}

// DescribeSource renders where the secret comes from, without the secret.
func (b Binding) DescribeSource() string {
	if b.AWS != nil {
		return b.AWS.describeSource(b.Source)
	}
	if b.OAuth2 != nil {
		return "oauth2 refresh (" + b.OAuth2.RefreshToken.Describe() + ")"
	}
	return b.Source.Describe()
}

// Validate checks the binding's structure and, for stored values, the secret.
// Sources read at request time (env, file, exec) are checked when resolved.
func (b Binding) Validate() error {
	if err := validateFQN(b.FQN); err != nil {
		return err
	}
	if !b.Kind.IsValid() {
		return fmt.Errorf("kind %q is not valid: use oauth2, api_key, bearer, basic or aws_sigv4", b.Kind)
	}
	if b.Kind == KindAWSSigV4 || b.AWS != nil {
		return b.validateAWS() // sigv4.go
	}
	switch {
	case b.OAuth2 != nil:
		if b.Kind != KindOAuth2 {
			return fmt.Errorf("an oauth2 refresh configuration needs kind oauth2, not %q", b.Kind)
		}
		if !b.Source.IsZero() {
			return errors.New("set either a secret source or an oauth2 refresh configuration, not both")
		}
		if err := b.OAuth2.validate(); err != nil {
			return err
		}
	default:
		if b.Source.IsZero() {
			return errors.New("no secret source: set one of env, file, exec or stored")
		}
		if err := b.Source.validate("secret"); err != nil {
			return err
		}
	}
	return b.validatePlacement()
}

func (b Binding) validatePlacement() error {
	p := b.Placement
	if b.Kind == KindBasic {
		if b.Username == "" {
			return errors.New("kind basic needs a username (the secret is the password)")
		}
		if strings.Contains(b.Username, ":") || hasControl(b.Username) {
			return fmt.Errorf("username %q must not contain ':' or control characters", b.Username)
		}
		if p != (Placement{}) {
			return errors.New("kind basic always uses the Authorization header; drop the header, format and query settings")
		}
		return nil
	}
	if b.Username != "" {
		return fmt.Errorf("a username is only used with kind basic, not %q", b.Kind)
	}
	if p.Query != "" {
		if p.Header != "" || p.Format != "" {
			return errors.New("query placement excludes header and format: pick one")
		}
		if hasControl(p.Query) || len(p.Query) > 256 {
			return fmt.Errorf("query parameter name %q is not valid", p.Query)
		}
		return nil
	}
	if p.Header != "" {
		if !httpguts.ValidHeaderFieldName(p.Header) {
			return fmt.Errorf("header %q is not a valid header name; use a name like X-Api-Key", p.Header)
		}
		if isForbiddenHeader(p.Header) {
			return fmt.Errorf("header %q is managed by the proxy and cannot carry a credential; use Authorization or an API-specific header", p.Header)
		}
	}
	if p.Format != "" {
		if strings.Count(p.Format, secretPlaceholder) != 1 {
			return fmt.Errorf("format %q must contain %s exactly once, e.g. 'token %s'", p.Format, secretPlaceholder, secretPlaceholder)
		}
		if !httpguts.ValidHeaderFieldValue(p.Format) {
			return fmt.Errorf("format %q contains characters not allowed in a header value", p.Format)
		}
	}
	return nil
}

// isForbiddenHeader reports whether the proxy owns the header.
func isForbiddenHeader(name string) bool {
	c := http.CanonicalHeaderKey(name)
	switch c {
	case "Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Te", "Trailer", "Upgrade":
		return true
	}
	return strings.HasPrefix(c, "Proxy-") || strings.HasPrefix(c, "X-Aileron-")
}

func (o *OAuth2) validate() error {
	if err := validateTokenURL(o.TokenURL); err != nil {
		return err
	}
	if o.ClientID == "" || hasControl(o.ClientID) {
		return errors.New("oauth2 needs a client id without control characters")
	}
	if !o.ClientSecret.IsZero() {
		if err := o.ClientSecret.validate("client secret"); err != nil {
			return err
		}
	}
	if o.RefreshToken.IsZero() {
		return errors.New("oauth2 needs a refresh token source")
	}
	if err := o.RefreshToken.validate("refresh token"); err != nil {
		return err
	}
	for _, s := range o.Scopes {
		if s == "" || strings.ContainsAny(s, " \t\r\n") {
			return fmt.Errorf("oauth2 scope %q must be one non-empty word", s)
		}
	}
	return nil
}

func validateTokenURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		// Not quoted: what cannot be parsed cannot be stripped of user info
		// or query, which may carry a client secret.
		return errors.New("oauth2 token url does not parse as a URL; use https://host/path")
	}
	if u.Host == "" {
		return fmt.Errorf("oauth2 token url %q is not an absolute URL; use https://host/path", redactURL(u))
	}
	if u.User != nil {
		return fmt.Errorf("oauth2 token url must not carry user info; pass the client secret with a client secret source")
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if isLoopbackHost(u.Hostname()) {
			return nil
		}
	}
	return fmt.Errorf("oauth2 token url %q must use https (http only for loopback hosts)", redactURL(u))
}

func isLoopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

func (s Source) validate(what string) error {
	switch s.Type {
	case SourceEnv:
		if !envname.Valid(s.Ref) {
			return fmt.Errorf("%s: environment variable name %q is not valid; use letters, digits and _", what, s.Ref)
		}
	case SourceFile:
		if s.Ref == "" || !filepath.IsAbs(s.Ref) {
			return fmt.Errorf("%s: file path %q must be absolute", what, s.Ref)
		}
	case SourceExec:
		if strings.TrimSpace(s.Ref) == "" {
			return fmt.Errorf("%s: the command is empty", what)
		}
		if strings.ContainsRune(s.Ref, 0) {
			return fmt.Errorf("%s: the command contains a NUL byte", what)
		}
	case SourceStored:
		if s.Ref != "" {
			return fmt.Errorf("%s: a stored source has no reference", what)
		}
		if err := CheckSecret(s.Value); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	default:
		return fmt.Errorf("%s: source type %q is not valid; use env, file, exec or stored", what, s.Type)
	}
	if !s.Value.IsZero() {
		return fmt.Errorf("%s: only a stored source holds a value", what)
	}
	return nil
}

// CheckSecret reports why v cannot be used as a secret: shorter than
// MinSecretLen, longer than MaxSecretLen, or containing CR, LF or NUL. The
// error never contains the secret.
func CheckSecret(v Value) error {
	s := v.Reveal()
	switch {
	case len(s) == 0:
		return errors.New("the secret is empty")
	case len(s) < MinSecretLen:
		return fmt.Errorf("the secret is shorter than %d bytes; such short values cannot be scrubbed from responses, use the real credential", MinSecretLen)
	case len(s) > MaxSecretLen:
		return fmt.Errorf("the secret is longer than %d bytes", MaxSecretLen)
	case strings.ContainsAny(s, "\r\n\x00"):
		return errors.New("the secret contains a line break or NUL byte")
	}
	return nil
}

func validateFQN(fqn string) error {
	scheme, rest, ok := strings.Cut(fqn, "://")
	if !ok || scheme == "" || rest == "" || len(fqn) > 512 || strings.ContainsAny(fqn, " \t") || hasControl(fqn) {
		return fmt.Errorf("connector %q is not a connector FQN; use scheme://owner/repo, as shown by `aileron-proxy connector list`", fqn)
	}
	return nil
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// shellQuote quotes s for display as one shell word.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// redactURL renders u without user info and query.
func redactURL(u *url.URL) string {
	c := *u
	c.User = nil
	c.RawQuery = ""
	c.Fragment = ""
	return c.String()
}
