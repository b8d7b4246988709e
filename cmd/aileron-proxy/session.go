package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/aileron-dev/aileron-proxy/api"
	"github.com/aileron-dev/aileron-proxy/daemon"
	"github.com/aileron-dev/aileron-proxy/internal/hostport"
	"github.com/aileron-dev/aileron-proxy/launcher"
	"github.com/aileron-dev/aileron-proxy/shims"
)

// daemonClient returns an API client for the daemon of a.home.
func (a *app) daemonClient() (*api.Client, error) {
	return api.NewClient(a.homePath(daemon.DaemonFile))
}

// newSessionCmd is `aileron-proxy session`: create, list and end sessions
// on the running daemon.
func newSessionCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "session COMMAND",
		Short: "Create, list and end sandbox sessions on the running daemon",
		Long: `Create, list and end sandbox sessions on the running daemon (started with
` + "`aileron-proxy serve`" + `, found through $AILERON_HOME/daemon.json).

A session is what a sandbox runs as: its own proxy credential (in the proxy
URL), its own API token, its own CA and the connectors it may use. Ended and
expired sessions are refused everywhere.`,
		Example: `  aileron-proxy session create --connector github://acme/aileron-connector-github --ttl 2h
  aileron-proxy session list
  aileron-proxy session end ses_0123456789abcdef01234567`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRunE,
	}
	cmd.AddCommand(newSessionCreateCmd(a), newSessionListCmd(a), newSessionEndCmd(a))
	return cmd
}

func newSessionCreateCmd(a *app) *cobra.Command {
	var (
		connectors []string
		ttl        string
		asJSON     bool
		learnHosts []string
	)
	cmd := &cobra.Command{
		Use:   "create [--connector FQN]... [--ttl D] [--learn HOSTGLOB]... [--json]",
		Short: "Create a session and print its proxy URL, API token and CA files",
		Long: `Create a session on the running daemon and print what a sandbox needs: the
proxy URL (with the session's proxy credential), the API token, and the CA
files to trust. The secrets are shown only here; the daemon keeps only their
hashes.

Without --connector the session may use every active connector. --ttl is a
duration such as 90m, 8h or 2d (default 8h, at most 7d).

--learn makes a learn session: requests to hosts matching the patterns
("api.example.com", "*.example.org", comma-separated or repeated) that no
operation matches are forwarded without any credential and recorded; draft a
connector from them with ` + "`aileron-proxy connector draft --session ID --fqn FQN`" + `.
A learn session's TTL defaults to 1h. See docs/learn.md.`,
		Example: `  aileron-proxy session create
  aileron-proxy session create --connector github://acme/aileron-connector-github --ttl 2h
  aileron-proxy session create --learn 'api.example.com,*.example.org'
  aileron-proxy session create --json > session.json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := api.ParseTTL(ttl); err != nil {
				return usageError(fmt.Errorf("--ttl: %w", err))
			}
			if err := checkLearnFlag(learnHosts); err != nil {
				return err
			}
			c, err := a.daemonClient()
			if err != nil {
				return err
			}
			s, err := c.CreateSession(cmd.Context(), api.CreateSessionRequest{Connectors: connectors, TTL: ttl, Learn: learnHosts})
			if err != nil {
				return fmt.Errorf("creating a session: %w", err)
			}
			if asJSON {
				return writeJSON(a.stdout, s)
			}
			w := a.stdout
			fmt.Fprintf(w, "session %s created, expires %s\n", s.ID, s.ExpiresAt.Local().Format(time.RFC3339))
			fmt.Fprintf(w, "  connectors:     %s\n", orNone(s.Connectors))
			if line := launcher.LearnSummary(s.Learn); line != "" {
				fmt.Fprintf(w, "  learn:          %s\n", line)
			}
			fmt.Fprintf(w, "  proxy_url:      %s\n", s.ProxyURL)
			fmt.Fprintf(w, "  api_token:      %s\n", s.APIToken)
			if s.CAFile != "" {
				fmt.Fprintf(w, "  ca_file:        %s\n", s.CAFile)
				fmt.Fprintf(w, "  ca_bundle_file: %s\n", s.CABundleFile)
			}
			fmt.Fprintf(w, "\nFor a client in this shell:\n  export HTTPS_PROXY=%s\n", shims.ShellQuote(s.ProxyURL))
			if s.CABundleFile != "" {
				fmt.Fprintf(w, "  export SSL_CERT_FILE=%s\n", shims.ShellQuote(s.CABundleFile))
			}
			fmt.Fprintln(a.stderr, "The proxy URL and API token are secrets and are shown only once.")
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&connectors, "connector", nil, "connector FQN the session may use (repeatable; default every active connector)")
	cmd.Flags().StringVar(&ttl, "ttl", "", "session lifetime, e.g. 90m, 8h or 2d (default 8h, max 7d)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the daemon's JSON response")
	learnFlag(cmd.Flags(), &learnHosts)
	return cmd
}

// learnFlag adds --learn, the host patterns of a learn session.
func learnFlag(f *pflag.FlagSet, v *[]string) {
	f.StringArrayVar(v, "learn", nil, "make a learn session for hosts matching `HOSTGLOB` (api.example.com, *.example.org; repeatable, comma-separated): requests no operation matches go without credentials and are recorded for `connector draft`")
}

// checkLearnFlag refuses bad --learn patterns as a usage error.
func checkLearnFlag(v []string) error {
	if _, err := hostport.ParseGlobs(v, "learn pattern"); err != nil {
		return usageError(fmt.Errorf("--learn: %w", err))
	}
	return nil
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "(none)"
	}
	return strings.Join(s, ", ")
}

func newSessionListCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--json]",
		Short: "List the daemon's live sessions",
		Long: `List the running daemon's live sessions, oldest first, with their connectors
and expiry. Secrets are never shown.`,
		Example: `  aileron-proxy session list
  aileron-proxy session list --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.daemonClient()
			if err != nil {
				return err
			}
			sessions, err := c.ListSessions(cmd.Context())
			if err != nil {
				return fmt.Errorf("listing sessions: %w", err)
			}
			if asJSON {
				if sessions == nil {
					sessions = []api.SessionInfo{}
				}
				return writeJSON(a.stdout, sessions)
			}
			if len(sessions) == 0 {
				fmt.Fprintln(a.stdout, "no live sessions; create one with `aileron-proxy session create`")
				return nil
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tEXPIRES\tCONNECTORS")
			for _, s := range sessions {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", s.ID, s.ExpiresAt.Local().Format(time.RFC3339), orNone(s.Connectors))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newSessionEndCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "end ID",
		Short: "End a session now",
		Long: `End a session on the running daemon: its proxy credential, API token and CA
stop working at once, its open tunnels close and its CA files are removed.`,
		Example: `  aileron-proxy session end ses_0123456789abcdef01234567`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.daemonClient()
			if err != nil {
				return err
			}
			if err := c.EndSession(cmd.Context(), args[0]); err != nil {
				return fmt.Errorf("ending session %s: %w", args[0], err)
			}
			fmt.Fprintf(a.stdout, "session %s ended\n", args[0])
			return nil
		},
	}
}
