package main

import (
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"

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

Settings come from the config file ($AILERON_HOME/config.json when it
exists, or --config), then from flags, which win. The file is JSON with
optional comments; its keys use the flag words: proxy_listen, api_listen,
resolve, upstream_ca, passthrough, approval_timeout, reload_interval,
shutdown_timeout, advertise_proxy_addr and limits (the proxy's size, count
and timeout limits). See configs/aileron.example.jsonc.

The garbage collector runs at GOGC=300 unless GOGC is set: the proxy's live
heap is small and collecting it a third as often is about a tenth less CPU
per request (docs/bench.md); set GOGC=100 or GOMEMLIMIT to trade the CPU
back for memory.`,
		Example: `  aileron-proxy serve
  aileron-proxy serve --resolve api.example.com:443=127.0.0.1:8443 --upstream-ca upstream.pem
  aileron-proxy serve --passthrough '*.packages.example.com' --proxy-listen 0.0.0.0:3128`,
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
			if flags.Changed("proxy-listen") {
				merged.ProxyListen = cfg.ProxyListen
			}
			if flags.Changed("api-listen") {
				merged.APIListen = cfg.APIListen
			}
			if flags.Changed("advertise-proxy-addr") {
				merged.AdvertiseProxyAddr = cfg.AdvertiseProxyAddr
			}
			if flags.Changed("resolve") {
				m, err := daemon.ParseResolve(resolve)
				if err != nil {
					return usageError(err)
				}
				merged.Resolve = m
			}
			if flags.Changed("upstream-ca") {
				merged.UpstreamCAFiles = cfg.UpstreamCAFiles
			}
			if flags.Changed("passthrough") {
				merged.Passthrough = cfg.Passthrough
			}
			if flags.Changed("approval-timeout") {
				merged.ApprovalTimeout = cfg.ApprovalTimeout
			}
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
	f.DurationVar(&cfg.ApprovalTimeout, "approval-timeout", daemon.DefaultApprovalTimeout, "how long a request waits for an approval decision")
	return cmd
}
