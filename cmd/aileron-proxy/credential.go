package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/aileron-dev/aileron-proxy/credentials"
	"github.com/aileron-dev/aileron-proxy/daemon"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// credentialStorePath returns $AILERON_HOME/credentials.json.
func credentialStorePath(a *app) string { return a.homePath(daemon.CredentialsFile) }

func newCredentialCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "credential COMMAND",
		Short: "Manage the credentials the proxy injects into connector requests",
		Long: `Credentials are bound to a connector FQN and a credential kind (the "credential" of the connector's operations). They live in $AILERON_HOME/credentials.json (mode 0600) and never enter the sandbox: the proxy injects them into allowed upstream requests and scrubs them from responses.

A running serve picks up changes automatically. No command takes a secret as an argument: secrets come from an environment variable, a file, a command or stdin.`,
		Example: `  aileron-proxy credential set github://acme/aileron-connector-github --kind bearer --from-exec 'gh auth token'
  aileron-proxy credential list
  aileron-proxy credential remove github://acme/aileron-connector-github`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRunE,
	}
	cmd.AddCommand(newCredentialSetCmd(a), newCredentialListCmd(a), newCredentialRemoveCmd(a))
	return cmd
}

// credentialSetFlags holds `credential set` flags. None takes a secret value.
type credentialSetFlags struct {
	kind             string
	fromEnv          string
	fromFile         string
	fromExec         string
	stdin            bool
	username         string
	header           string
	format           string
	query            string
	tokenURL         string
	clientID         string
	clientSecretEnv  string
	clientSecretFile string
	refreshEnv       string
	refreshFile      string
	refreshStdin     bool
	scopes           []string
	aws              awsCredentialFlags
}

func newCredentialSetCmd(a *app) *cobra.Command {
	f := &credentialSetFlags{}
	cmd := &cobra.Command{
		Use:   "set FQN --kind KIND (--from-env VAR | --from-file PATH | --from-exec CMD | --stdin | --token-url URL ...)",
		Short: "Bind a credential to a connector",
		Long: `Bind the credential of kind KIND (oauth2, api_key, bearer, basic or aws_sigv4) for connector FQN, replacing any existing one of that kind.

The secret comes from exactly one source, read by serve at request time:
  --from-env VAR     serve's environment variable VAR
  --from-file PATH   the file at PATH (trailing newline removed)
  --from-exec CMD    the stdout of CMD, run with /bin/sh -c (10s timeout, output reused for 30s)
  --stdin            read once now and stored in credentials.json

It is sent as "Authorization: Bearer <secret>" unless:
  --kind basic --username NAME     sends Authorization: Basic base64(NAME:<secret>)
  --header NAME [--format FMT]     sends header NAME with FMT, where {secret} stands for the secret (default "{secret}")
  --format FMT                     sends Authorization with FMT, e.g. 'token {secret}'
  --query NAME                     adds the query parameter NAME=<secret>

With --kind oauth2, instead of a source, --token-url, --client-id, a refresh token (--refresh-token-from-env, --refresh-token-from-file or --refresh-token-stdin) and optionally a client secret (--client-secret-from-env or --client-secret-from-file) and --scope make serve refresh access tokens before they expire.

With --kind aws_sigv4, serve drops the client's AWS Signature Version 4 and signs each request again: the secret source holds the secret access key, --access-key-id-from-env or --access-key-id-from-file the access key id, and optionally --session-token-from-env or --session-token-from-file a session token; or --from-aws-profile NAME takes all three from the host's AWS configuration. Region and service come from the host name unless --aws-region and --aws-service say them.

Secrets shorter than 4 bytes are refused: they cannot be scrubbed from responses. Exit status 2 means the flags do not form a valid credential.`,
		Example: `  aileron-proxy credential set github://acme/aileron-connector-github --kind bearer --from-exec 'gh auth token'
  printf %s "$JIRA_API_TOKEN" | aileron-proxy credential set github://acme/jira --kind basic --username me@example.com --stdin
  aileron-proxy credential set github://acme/aws --kind aws_sigv4 --access-key-id-from-env AWS_ACCESS_KEY_ID --from-env AWS_SECRET_ACCESS_KEY
  aileron-proxy credential set github://acme/google --kind oauth2 --token-url https://oauth2.googleapis.com/token --client-id ID --client-secret-from-env GOOGLE_CLIENT_SECRET --refresh-token-from-file ~/.config/google/refresh --scope https://www.googleapis.com/auth/gmail.readonly`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			fqn, err := policy.ParseFQN(args[0])
			if err != nil {
				return usageError(fmt.Errorf("connector FQN %w", err))
			}
			b, err := f.binding(cmd, a, fqn.String())
			if err != nil {
				return err
			}
			file, err := credentials.LoadFile(credentialStorePath(a))
			if err != nil {
				return err
			}
			file.Set(b)
			if err := file.Save(credentialStorePath(a)); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "Set the %s credential for %s: %s -> %s\n", b.Kind, b.FQN, b.DescribeSource(), b.DescribePlacement())
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.kind, "kind", "", "credential `KIND`: oauth2, api_key, bearer, basic or aws_sigv4 (required)")
	fl.StringVar(&f.fromEnv, "from-env", "", "read the secret from serve's environment variable `VAR`")
	fl.StringVar(&f.fromFile, "from-file", "", "read the secret from the file at `PATH`")
	fl.StringVar(&f.fromExec, "from-exec", "", "run `CMD` with /bin/sh -c and use its stdout")
	fl.BoolVar(&f.stdin, "stdin", false, "read the secret from stdin now and store it")
	fl.StringVar(&f.username, "username", "", "user `NAME` for --kind basic (the secret is the password)")
	fl.StringVar(&f.header, "header", "", "send the secret in header `NAME` instead of Authorization")
	fl.StringVar(&f.format, "format", "", "header value `FMT`, with {secret} standing for the secret")
	fl.StringVar(&f.query, "query", "", "send the secret as query parameter `NAME`")
	fl.StringVar(&f.tokenURL, "token-url", "", "oauth2 token endpoint `URL`")
	fl.StringVar(&f.clientID, "client-id", "", "oauth2 client `ID`")
	fl.StringVar(&f.clientSecretEnv, "client-secret-from-env", "", "read the oauth2 client secret from serve's environment variable `VAR`")
	fl.StringVar(&f.clientSecretFile, "client-secret-from-file", "", "read the oauth2 client secret from the file at `PATH`")
	fl.StringVar(&f.refreshEnv, "refresh-token-from-env", "", "read the oauth2 refresh token from serve's environment variable `VAR`")
	fl.StringVar(&f.refreshFile, "refresh-token-from-file", "", "read the oauth2 refresh token from the file at `PATH`")
	fl.BoolVar(&f.refreshStdin, "refresh-token-stdin", false, "read the oauth2 refresh token from stdin now and store it")
	fl.StringArrayVar(&f.scopes, "scope", nil, "oauth2 `SCOPE` to request on refresh (repeatable)")
	f.aws.register(cmd) // credential_aws.go
	return cmd
}

// binding turns the flags into a validated Binding. Flag mistakes are usage
// errors (exit 2) naming the flags to pass.
func (f *credentialSetFlags) binding(cmd *cobra.Command, a *app, fqn string) (credentials.Binding, error) {
	changed := cmd.Flags().Changed
	given := func(names ...string) []string {
		var out []string
		for _, n := range names {
			if changed(n) {
				out = append(out, "--"+n)
			}
		}
		return out
	}
	usagef := func(format string, args ...any) error { return usageError(fmt.Errorf(format, args...)) }

	if !changed("kind") {
		return credentials.Binding{}, usagef("--kind is required: pass --kind oauth2, api_key, bearer, basic or aws_sigv4 (the credential the connector's operations declare)")
	}
	kind, err := credentials.ParseKind(f.kind)
	if err != nil {
		return credentials.Binding{}, usagef("--kind %q is not a credential kind: pass oauth2, api_key, bearer, basic or aws_sigv4", f.kind)
	}
	b := credentials.Binding{FQN: fqn, Kind: kind, Username: f.username,
		Placement: credentials.Placement{Header: f.header, Format: f.format, Query: f.query}}

	sources := given("from-env", "from-file", "from-exec", "stdin")
	if kind == credentials.KindAWSSigV4 {
		return f.aws.awsBinding(a, b, given, sources, f)
	}
	if aws := given(awsFlagNames...); len(aws) > 0 {
		return b, usagef("%s only apply to --kind aws_sigv4", strings.Join(aws, ", "))
	}
	oauthFlags := given("token-url", "client-id", "client-secret-from-env", "client-secret-from-file",
		"refresh-token-from-env", "refresh-token-from-file", "refresh-token-stdin", "scope")
	const sourceHelp = "--from-env VAR, --from-file PATH, --from-exec 'CMD' or --stdin"
	switch {
	case len(oauthFlags) > 0 && kind != credentials.KindOAuth2:
		return b, usagef("%s only apply to --kind oauth2; for --kind %s pass one of %s", strings.Join(oauthFlags, ", "), kind, sourceHelp)
	case len(oauthFlags) > 0 && len(sources) > 0:
		return b, usagef("pass either a secret source (%s) or an oauth2 refresh configuration (--token-url ...), not both", strings.Join(sources, ", "))
	case len(oauthFlags) > 0:
		o, err := f.oauth2(a, given)
		if err != nil {
			return b, err
		}
		b.OAuth2 = o
	case len(sources) == 0 && kind == credentials.KindOAuth2:
		return b, usagef("pass a secret source (%s) holding an access token, or --token-url, --client-id and --refresh-token-from-env|--refresh-token-from-file|--refresh-token-stdin to refresh access tokens", sourceHelp)
	case len(sources) == 0:
		return b, usagef("pass exactly one secret source: %s", sourceHelp)
	case len(sources) > 1:
		return b, usagef("pass only one secret source, not %s", strings.Join(sources, " and "))
	default:
		src, err := credentialSource(a, sources[0], f.fromEnv, f.fromFile, f.fromExec, "secret")
		if err != nil {
			return b, err
		}
		b.Source = src
	}

	placement := given("header", "format", "query")
	switch {
	case kind == credentials.KindBasic && len(placement) > 0:
		return b, usagef("--kind basic always sends Authorization: Basic; drop %s", strings.Join(placement, ", "))
	case kind == credentials.KindBasic && f.username == "":
		return b, usagef("--kind basic needs --username NAME (the secret is the password)")
	case kind != credentials.KindBasic && changed("username"):
		return b, usagef("--username is only for --kind basic; use --header or --format to place a %s credential", kind)
	case changed("query") && (changed("header") || changed("format")):
		return b, usagef("--query excludes --header and --format: pick where the secret goes")
	}
	if err := b.Validate(); err != nil {
		return b, usageError(fmt.Errorf("invalid credential for %s: %w", fqn, err))
	}
	return b, nil
}

// oauth2 builds the refresh configuration from the oauth2 flags.
func (f *credentialSetFlags) oauth2(a *app, given func(...string) []string) (*credentials.OAuth2, error) {
	usagef := func(format string, args ...any) error { return usageError(fmt.Errorf(format, args...)) }
	if f.tokenURL == "" || f.clientID == "" {
		return nil, usagef("oauth2 refresh needs --token-url URL and --client-id ID")
	}
	refresh := given("refresh-token-from-env", "refresh-token-from-file", "refresh-token-stdin")
	if len(refresh) != 1 {
		return nil, usagef("pass exactly one of --refresh-token-from-env VAR, --refresh-token-from-file PATH or --refresh-token-stdin")
	}
	o := &credentials.OAuth2{TokenURL: f.tokenURL, ClientID: f.clientID, Scopes: f.scopes}
	var err error
	if o.RefreshToken, err = credentialSource(a, strings.Replace(refresh[0], "refresh-token-", "", 1), f.refreshEnv, f.refreshFile, "", "refresh token"); err != nil {
		return nil, err
	}
	switch cs := given("client-secret-from-env", "client-secret-from-file"); len(cs) {
	case 0:
	case 1:
		if o.ClientSecret, err = credentialSource(a, strings.Replace(cs[0], "client-secret-", "", 1), f.clientSecretEnv, f.clientSecretFile, "", "client secret"); err != nil {
			return nil, err
		}
	default:
		return nil, usagef("pass only one of --client-secret-from-env and --client-secret-from-file")
	}
	return o, nil
}

// credentialSource builds a Source from one of --from-env, --from-file,
// --from-exec, --stdin (flag is the flag given, normalised to those names).
func credentialSource(a *app, flag, env, file, command, what string) (credentials.Source, error) {
	switch flag {
	case "--from-env":
		if env != "" && a.getenv(env) == "" {
			fmt.Fprintf(a.stderr, "note: %s is not set in this shell; serve reads it from its own environment at request time\n", env)
		}
		return credentials.Source{Type: credentials.SourceEnv, Ref: env}, nil
	case "--from-file":
		if file == "" {
			return credentials.Source{}, usageError(errors.New("--from-file needs a PATH"))
		}
		abs, err := filepath.Abs(file)
		if err != nil {
			return credentials.Source{}, usageError(fmt.Errorf("resolving --from-file %q: %w", file, err))
		}
		if _, err := os.Stat(abs); err != nil {
			fmt.Fprintf(a.stderr, "note: %s cannot be read now (%v); serve reads it at request time\n", abs, errors.Unwrap(err))
		}
		return credentials.Source{Type: credentials.SourceFile, Ref: abs}, nil
	case "--from-exec":
		return credentials.Source{Type: credentials.SourceExec, Ref: command}, nil
	case "--stdin":
		v, err := credentialReadStdin(a.stdin, what)
		if err != nil {
			return credentials.Source{}, err
		}
		return credentials.Source{Type: credentials.SourceStored, Value: v}, nil
	}
	return credentials.Source{}, fmt.Errorf("unknown source flag %s", flag)
}

// credentialReadStdin reads one secret from stdin, dropping a trailing
// newline. Errors never include what was read.
func credentialReadStdin(r io.Reader, what string) (credentials.Value, error) {
	if r == nil {
		return credentials.Value{}, usageError(fmt.Errorf("no stdin to read the %s from", what))
	}
	data, err := io.ReadAll(io.LimitReader(r, credentials.MaxSecretLen+3))
	if err != nil {
		return credentials.Value{}, fmt.Errorf("reading the %s from stdin: %w", what, err)
	}
	v := credentials.NewValue(strings.TrimRight(string(data), "\r\n"))
	if err := credentials.CheckSecret(v); err != nil {
		return credentials.Value{}, usageError(fmt.Errorf("reading the %s from stdin: %w; pipe the value in, e.g. printf %%s \"$TOKEN\" | aileron-proxy credential set ... --stdin", what, err))
	}
	return v, nil
}

func newCredentialListCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--json]",
		Short: "List configured credentials without their secrets",
		Long:  "List every credential binding: connector, kind, where the secret comes from (environment variable name, file path, command, stored or oauth2) and where it is placed. Secret values are never printed.",
		Example: `  aileron-proxy credential list
  aileron-proxy credential list --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			file, err := credentials.LoadFile(credentialStorePath(a))
			if err != nil {
				return err
			}
			infos := file.List()
			if asJSON {
				return writeJSON(a.stdout, infos)
			}
			if len(infos) == 0 {
				fmt.Fprintln(a.stdout, "No credentials set. Add one with: aileron-proxy credential set FQN --kind bearer --from-env VAR")
				return nil
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CONNECTOR\tKIND\tSOURCE\tPLACEMENT")
			for _, in := range infos {
				src := in.Source
				switch {
				case in.OAuth2 != nil:
					src = fmt.Sprintf("oauth2 %s (client %s, refresh token %s)", in.OAuth2.TokenURL, in.OAuth2.ClientID, in.OAuth2.RefreshToken)
				case in.Ref != "":
					src += " " + in.Ref
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", in.FQN, in.Kind, src, in.Placement)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return cmd
}

func newCredentialRemoveCmd(a *app) *cobra.Command {
	var kind string
	cmd := &cobra.Command{
		Use:   "remove FQN [--kind KIND]",
		Short: "Remove a connector's credentials",
		Long:  "Remove the credential of kind KIND for connector FQN, or every credential of that connector when --kind is not given. Exit status 1 when there is nothing to remove.",
		Example: `  aileron-proxy credential remove github://acme/aileron-connector-github
  aileron-proxy credential remove github://acme/google --kind oauth2`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			fqn := args[0]
			if f, err := policy.ParseFQN(fqn); err == nil {
				fqn = f.String() // as `set` stored it
			}
			var kinds []credentials.Kind
			if cmd.Flags().Changed("kind") {
				k, err := credentials.ParseKind(kind)
				if err != nil {
					return usageError(fmt.Errorf("--kind %q is not a credential kind: pass oauth2, api_key, bearer or basic", kind))
				}
				kinds = append(kinds, k)
			}
			file, err := credentials.LoadFile(credentialStorePath(a))
			if err != nil {
				return err
			}
			if kinds == nil {
				for _, in := range file.List() {
					if in.FQN == fqn {
						kinds = append(kinds, in.Kind)
					}
				}
			}
			var removed []string
			for _, k := range kinds {
				if file.Remove(fqn, k) {
					removed = append(removed, string(k))
				}
			}
			if len(removed) == 0 {
				what := "no credential"
				if kind != "" {
					what = "no " + kind + " credential"
				}
				return fmt.Errorf("removing credentials: %s for %s; see `aileron-proxy credential list`", what, fqn)
			}
			if err := file.Save(credentialStorePath(a)); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "Removed the %s credential for %s\n", strings.Join(removed, ", "), fqn)
			return nil
		},
	}
	cmd.Flags().StringVar(&kind, "kind", "", "remove only the credential of this `KIND` (oauth2, api_key, bearer or basic)")
	return cmd
}
