package main

import (
	"errors"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/aileron-dev/aileron-proxy/credentials"
	"github.com/aileron-dev/aileron-proxy/daemon"
)

// serveGCPercent is serve's GOGC when the environment sets none. Measured
// in the bench harness (same run): 16 keep-alive clients 54.1 -> 47.9 us of
// proxy CPU per request at 300 against the default 100, 58 -> 66 KiB of RSS
// per idle tunnel.
const serveGCPercent = 300

func newServeCmd(a *app) *cobra.Command {
	var (
		configFile string
		cfg        daemon.Config
		resolve    []string
		upPwEnv    string
		upPwFile   string
		upPwExec   string
	)
	cmd := &cobra.Command{
		Use:   "serve [flags]",
		Short: "Run the MITM proxy and the control API",
		Long: `Run the data plane: the MITM forward proxy (--proxy-listen) and the control
API (--api-listen). The installed connectors and credentials.json are
reloaded when they change on disk; a bad reload keeps the last good state.

serve writes $AILERON_HOME/daemon.json (0600) with the API URL, the proxy
address, the admin token and its pid, and removes it on SIGINT/SIGTERM after
draining in-flight requests. The API listener also serves the web console
under /ui/; serve logs a one-time sign-in link at start and
` + "`aileron-proxy ui`" + ` prints fresh ones (docs/console.md).

Sessions, their CAs, remembered approval decisions and pending approvals
are kept in a state store and outlive the process: after a restart (or a
crash) every unexpired session works again with the same proxy URL, API
token and CA, and an approval that was pending is recorded as abandoned.
The store is an embedded SQLite database, $AILERON_HOME/state.db, whose CA
keys are sealed under $AILERON_HOME/state.key (0600, created on first
start; losing it loses the sessions). With --state postgres://..., several
serve replicas share one database and each needs the same key
(--state-key-file); --replica names each in its audit events (default: the
host name). Long-lived sandboxes are left running at shutdown unless
--shutdown-sandboxes.

Settings come from the config file ($AILERON_HOME/config.json when it
exists, or --config), then from flags, which win. The file is JSON with
optional comments; its keys use the flag words: proxy_listen, api_listen,
resolve, upstream_ca, passthrough, approval_timeout, reload_interval,
shutdown_timeout, advertise_proxy_addr, limits (the proxy's size, count
and timeout limits), state, state_key_file, replica, shutdown_sandboxes and
upstream_proxy, upstream_no_proxy,
upstream_proxy_user, upstream_proxy_password_env and
upstream_proxy_password_file. See configs/aileron.example.jsonc.

With --upstream-proxy, every upstream connection (intercepted or
passthrough) goes through that corporate proxy with CONNECT, except
--resolve targets and --upstream-no-proxy hosts; "env" takes serve's own
HTTPS_PROXY and NO_PROXY. Its basic credentials come from
--upstream-proxy-user and a password source, never from the URL; add the
root of a TLS-inspecting proxy with --upstream-ca.

The garbage collector runs at GOGC=300 unless GOGC is set: the proxy's live
heap is small and collecting it a third as often is about a tenth less CPU
per request (docs/bench.md); set GOGC=100 or GOMEMLIMIT to trade the CPU
back for memory.`,
		Example: `  aileron-proxy serve
  aileron-proxy serve --resolve api.example.com:443=127.0.0.1:8443 --upstream-ca upstream.pem
  aileron-proxy serve --passthrough '*.packages.example.com' --proxy-listen 0.0.0.0:3128
  aileron-proxy serve --upstream-proxy http://proxy.corp.example:3128 --upstream-proxy-user me --upstream-proxy-password-from-env PROXY_PASSWORD
  aileron-proxy serve --state postgres://aileron@db.internal/aileron --state-key-file /etc/aileron/state.key --replica serve-0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Getenv("GOGC") == "" {
				debug.SetGCPercent(serveGCPercent)
			}
			merged, err := daemon.LoadConfig(a.home, configFile)
			if err != nil {
				return err
			}
			flags := cmd.Flags()
			flagWins(flags, "proxy-listen", &merged.ProxyListen, cfg.ProxyListen)
			flagWins(flags, "api-listen", &merged.APIListen, cfg.APIListen)
			flagWins(flags, "advertise-proxy-addr", &merged.AdvertiseProxyAddr, cfg.AdvertiseProxyAddr)
			if flags.Changed("resolve") {
				m, err := daemon.ParseResolve(resolve)
				if err != nil {
					return usageError(err)
				}
				merged.Resolve = m
			}
			flagWins(flags, "upstream-ca", &merged.UpstreamCAFiles, cfg.UpstreamCAFiles)
			flagWins(flags, "passthrough", &merged.Passthrough, cfg.Passthrough)
			if err := upstreamProxyFlags(flags, cfg, &merged, upPwEnv, upPwFile, upPwExec); err != nil {
				return err
			}
			flagWins(flags, "approval-timeout", &merged.ApprovalTimeout, cfg.ApprovalTimeout)
			flagWins(flags, "state", &merged.StateURL, cfg.StateURL)
			flagWins(flags, "state-key-file", &merged.StateKeyFile, cfg.StateKeyFile)
			flagWins(flags, "replica", &merged.Replica, cfg.Replica)
			flagWins(flags, "shutdown-sandboxes", &merged.ShutdownSandboxes, cfg.ShutdownSandboxes)
			log, stopLog := a.jsonLogger()
			defer stopLog()
			d, err := daemon.New(merged, log)
			if err != nil {
				return err
			}
			return d.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "config file (default $AILERON_HOME/config.json when it exists)")
	f.StringVar(&cfg.ProxyListen, "proxy-listen", daemon.DefaultProxyListen, "proxy listen address")
	f.StringVar(&cfg.APIListen, "api-listen", daemon.DefaultAPIListen, "control API listen address")
	f.StringVar(&cfg.AdvertiseProxyAddr, "advertise-proxy-addr", "", "proxy address put in session proxy URLs (default: the listen address)")
	f.StringArrayVar(&resolve, "resolve", nil, "HOST:PORT=IP:PORT: dial this address for that upstream (repeatable; exempt from the private-address guard)")
	f.StringArrayVar(&cfg.UpstreamCAFiles, "upstream-ca", nil, "PEM file of extra roots trusted for upstream TLS (repeatable)")
	f.StringArrayVar(&cfg.Passthrough, "passthrough", nil, "host glob tunnelled without interception or credentials, e.g. '*.packages.example.com' (repeatable)")
	f.StringVar(&cfg.UpstreamProxy, "upstream-proxy", "", `corporate proxy for every upstream connection: http://HOST:PORT, or "env" for serve's HTTPS_PROXY and NO_PROXY`)
	f.StringSliceVar(&cfg.UpstreamNoProxy, "upstream-no-proxy", nil, "hosts dialled without the upstream proxy, in NO_PROXY syntax (comma-separated or repeated)")
	f.StringVar(&cfg.UpstreamProxyUser, "upstream-proxy-user", "", "user name for the upstream proxy's basic authentication")
	f.StringVar(&upPwEnv, "upstream-proxy-password-from-env", "", "read the upstream proxy password from serve's environment variable VAR")
	f.StringVar(&upPwFile, "upstream-proxy-password-from-file", "", "read the upstream proxy password from the file at PATH")
	f.StringVar(&upPwExec, "upstream-proxy-password-from-exec", "", "run CMD with /bin/sh -c and use its stdout as the upstream proxy password")
	f.DurationVar(&cfg.ApprovalTimeout, "approval-timeout", daemon.DefaultApprovalTimeout, "how long a request waits for an approval decision")
	f.StringVar(&cfg.StateURL, "state", "", "state store `URL`: postgres://... for a database replicas share (default: the embedded SQLite database $AILERON_HOME/state.db)")
	f.StringVar(&cfg.StateKeyFile, "state-key-file", "", "`FILE` holding the key that seals session CA keys in the state store (default: $AILERON_HOME/state.key; every replica needs the same key)")
	f.StringVar(&cfg.Replica, "replica", "", "`NAME` of this serve among replicas sharing a state store, recorded in audit events (default: the host name)")
	f.BoolVar(&cfg.ShutdownSandboxes, "shutdown-sandboxes", false, "remove long-lived sandboxes when serve stops instead of leaving them for the next start")
	return cmd
}

// flagWins sets *dst to v when the flag name was given: flags win over
// the config file.
func flagWins[T any](flags *pflag.FlagSet, name string, dst *T, v T) {
	if flags.Changed(name) {
		*dst = v
	}
}

// upstreamProxyFlags merges the --upstream-proxy* flags into merged.
func upstreamProxyFlags(flags *pflag.FlagSet, cfg daemon.Config, merged *daemon.Config, pwEnv, pwFile, pwExec string) error {
	flagWins(flags, "upstream-proxy", &merged.UpstreamProxy, cfg.UpstreamProxy)
	flagWins(flags, "upstream-no-proxy", &merged.UpstreamNoProxy, cfg.UpstreamNoProxy)
	flagWins(flags, "upstream-proxy-user", &merged.UpstreamProxyUser, cfg.UpstreamProxyUser)
	var srcs []credentials.Source
	if pwEnv != "" {
		srcs = append(srcs, credentials.Source{Type: credentials.SourceEnv, Ref: pwEnv})
	}
	if pwFile != "" {
		srcs = append(srcs, credentials.Source{Type: credentials.SourceFile, Ref: pwFile})
	}
	if pwExec != "" {
		srcs = append(srcs, credentials.Source{Type: credentials.SourceExec, Ref: pwExec})
	}
	switch len(srcs) {
	case 0:
	case 1:
		merged.UpstreamProxyPassword = srcs[0]
	default:
		return usageError(errors.New("give one of --upstream-proxy-password-from-env, -from-file and -from-exec"))
	}
	return nil
}
