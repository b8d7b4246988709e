package openapiimport

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/aileron-dev/aileron-proxy/internal/envname"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// CredentialHint is the credential set command for one security scheme.
type CredentialHint struct {
	// Scheme is the document's scheme name ("--credential" for an override).
	Scheme string
	Kind   policy.CredentialKind
	// Command is the `aileron-proxy credential set` line; "" when the
	// credential cannot be placed (Note says why).
	Command string
	// Note says what the import could not tell, or "".
	Note string
}

// formatPattern finds a header value shape such as "Bearer <token>",
// "Token token={api_key}" or "token YOUR-TOKEN" in a scheme's description.
var formatPattern = regexp.MustCompile("[`\"']((?:[A-Za-z][A-Za-z-]*)(?: [a-z_]+=)?) ?[<{][^>}` \"']+[>}][`\"']")

// bearerDesc finds a scheme described as a bearer token ("Bearer Token
// authentication", Kubernetes' words for its apiKey in Authorization).
var bearerDesc = regexp.MustCompile(`(?i)^\s*bearer\s+token\b`)

// hint renders the credential set command that places the secret the way
// scheme sc says.
func hint(fqn, tool, name string, sc scheme) CredentialHint {
	kind := schemeKind(sc)
	h := CredentialHint{Scheme: name, Kind: kind}
	env := envStem(tool)
	base := fmt.Sprintf("aileron-proxy credential set %s --kind %s", fqn, kind)
	switch kind {
	case policy.CredentialBearer:
		h.Command = fmt.Sprintf("%s --from-env %s_TOKEN", base, env)
	case policy.CredentialBasic:
		h.Command = fmt.Sprintf("%s --username USER --from-env %s_PASSWORD", base, env)
	case policy.CredentialAPIKey:
		switch strings.ToLower(sc.in) {
		case "query":
			h.Command = fmt.Sprintf("%s --query %s --from-env %s_API_KEY", base, sc.name, env)
		case "header":
			if strings.EqualFold(sc.name, "Authorization") {
				if m := formatPattern.FindStringSubmatch(sc.desc); m != nil {
					h.Command = fmt.Sprintf("%s --format '%s {secret}' --from-env %s_API_KEY", base, m[1], env)
					if strings.HasSuffix(m[1], "=") {
						h.Command = fmt.Sprintf("%s --format '%s{secret}' --from-env %s_API_KEY", base, m[1], env)
					}
				} else if bearerDesc.MatchString(sc.desc) {
					h.Command = fmt.Sprintf("%s --format 'Bearer {secret}' --from-env %s_API_KEY", base, env)
				} else {
					h.Command = fmt.Sprintf("%s --format '{secret}' --from-env %s_API_KEY", base, env)
					h.Note = "the description does not say how the key is written in Authorization; change --format if it takes a prefix (e.g. 'Token {secret}')"
				}
			} else {
				h.Command = fmt.Sprintf("%s --header %s --from-env %s_API_KEY", base, sc.name, env)
			}
		case "cookie":
			h.Note = fmt.Sprintf("the key goes in cookie %q, which the proxy cannot place; set --credential to a kind the API also accepts, or send the cookie from the sandbox", sc.name)
		default:
			h.Command = fmt.Sprintf("%s --from-env %s_API_KEY", base, env)
			h.Note = "the description does not say where the key goes; add --header NAME or --query NAME"
		}
	case policy.CredentialOAuth2:
		h.Command = fmt.Sprintf("%s --from-env %s_ACCESS_TOKEN", base, env)
		switch {
		case sc.tokenURL != "":
			h.Note = fmt.Sprintf("to let serve refresh tokens instead: --kind oauth2 --token-url %s --client-id ID --refresh-token-from-env %s_REFRESH_TOKEN", sc.tokenURL, env)
		case sc.oidcURL != "":
			h.Note = fmt.Sprintf("the token endpoint is in the OpenID Connect discovery document %s; pass it as --token-url to let serve refresh tokens", sc.oidcURL)
		}
	}
	return h
}

// overrideScheme is the scheme a --credential override stands for.
func overrideScheme(kind policy.CredentialKind) scheme {
	switch kind {
	case policy.CredentialBearer:
		return scheme{typ: "http", httpScheme: "bearer"}
	case policy.CredentialBasic:
		return scheme{typ: "http", httpScheme: "basic"}
	case policy.CredentialAPIKey:
		return scheme{typ: "apiKey"}
	case policy.CredentialOAuth2:
		return scheme{typ: "oauth2"}
	}
	return scheme{}
}

// envStem is the tool name as an environment variable stem ("gh-api" →
// "GH_API").
func envStem(tool string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(tool) {
		if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := strings.Trim(b.String(), "_")
	if s == "" || !envname.Valid(s) {
		return "API"
	}
	return s
}
