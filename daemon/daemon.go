package daemon

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/actions"
	"github.com/aileron-dev/aileron-proxy/api"
	"github.com/aileron-dev/aileron-proxy/approval"
	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/ca"
	"github.com/aileron-dev/aileron-proxy/console"
	"github.com/aileron-dev/aileron-proxy/credentials"
	"github.com/aileron-dev/aileron-proxy/internal/atomicfile"
	"github.com/aileron-dev/aileron-proxy/launcher"
	"github.com/aileron-dev/aileron-proxy/learn"
	"github.com/aileron-dev/aileron-proxy/policy"
	"github.com/aileron-dev/aileron-proxy/proxy"
	"github.com/aileron-dev/aileron-proxy/session"
	"github.com/aileron-dev/aileron-proxy/state"
)

// Paths under $AILERON_HOME that the daemon owns.
const (
	ConfigFile      = "config.json"
	DaemonFile      = "daemon.json"
	CredentialsFile = "credentials.json"
	AuditFile       = "audit/audit.jsonl"
	SessionsDir     = "sessions"
)

// Daemon is a running serve process: the proxy and the API on their
// listeners, with the policy and credentials kept current.
type Daemon struct {
	cfg Config
	log *zap.Logger

	store    *policy.Store
	snapshot atomic.Pointer[policy.Snapshot]
	// compiler builds each installed package once per version (digest);
	// reloads reuse the unchanged ones.
	compiler policy.Compiler
	creds    atomic.Pointer[credentials.Resolver]

	// actionStore and actions are the installed actions and the runnable
	// set, reloaded with the policy (reloadActions).
	actionStore *actions.Store
	actions     atomic.Pointer[map[string]actions.Installed]

	audit *audit.Writer
	// stateStore is where sessions, approvals, remembered decisions and
	// long-lived sandboxes outlive the process (state.go, sandboxes.go).
	stateStore state.Store
	sessions   *session.Registry
	// learn keeps the learn records of learn sessions.
	learn   *learn.Store
	broker  *approval.Broker
	proxy   *proxy.Server
	api     *api.Server
	console *console.Console
	apiHTTP *http.Server
	// sandboxes are the long-lived sandboxes (sandboxes.go).
	sandboxes *launcher.SandboxManager

	proxyLn, apiLn net.Listener
	adminToken     string
	systemRoots    []byte

	// storeState and credsState are the fingerprints taken just before
	// New's first load, so the watchers also catch a change made between
	// that load and Run.
	storeState, credsState [sha256.Size]byte

	// endedIssued and endedHits carry the leaf counters of ended sessions
	// so the exported totals stay monotonic.
	endedIssued, endedHits atomic.Uint64
	reloadMu               sync.Mutex
}

// New loads the state in cfg.Home, binds both listeners and builds every
// component. Nothing is served until Run.
func New(cfg Config, log *zap.Logger) (_ *Daemon, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Home, 0o700); err != nil {
		return nil, fmt.Errorf("creating state directory %s: %w", cfg.Home, err)
	}
	d := &Daemon{cfg: cfg, log: log}
	if d.store, err = policy.OpenStore(cfg.Home); err != nil {
		return nil, fmt.Errorf("opening connector store: %w", err)
	}
	if d.actionStore, err = actions.OpenStore(cfg.Home); err != nil {
		return nil, fmt.Errorf("opening action store: %w", err)
	}
	d.storeState = fingerprint(d.store.Dir(), d.actionStore.Dir())
	if err := d.reloadPolicy(); err != nil {
		return nil, err
	}
	d.credsState = fingerprint(d.credentialsPath())
	if err := d.reloadCredentials(); err != nil {
		return nil, err
	}
	upstreamRoots, err := loadCertFiles(cfg.UpstreamCAFiles)
	if err != nil {
		return nil, err
	}
	upstreamProxy, err := upstreamProxyConfig(cfg, os.Getenv) // upstreamproxy.go
	if err != nil {
		return nil, err
	}
	if roots, err := ca.SystemRootsPEM(); err == nil {
		d.systemRoots = roots
	} else {
		log.Warn("no system root bundle found; session CA bundles will hold only the session CA", zap.Error(err))
	}
	if d.audit, err = audit.OpenWith(filepath.Join(cfg.Home, AuditFile), audit.Options{OnChange: auditEpisodeLogger(log), Replica: cfg.Replica}); err != nil {
		return nil, fmt.Errorf("opening audit log: %w", err)
	}
	defer func() {
		if err != nil {
			d.closeListeners()
			_ = d.audit.Close()
		}
	}()
	if d.stateStore, err = openState(cfg, log); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = d.stateStore.Close()
		}
	}()
	d.broker = approval.NewBroker(approval.BrokerConfig{
		Store:   d.stateStore,
		Replica: cfg.Replica,
		Logger:  log.Named("approval"),
		Timeout: cfg.ApprovalTimeout,
		Audit:   d.audit,
		OnRequested: func(p approval.Pending) {
			log.Warn("approval pending", zap.String("approval_id", p.ID), zap.String("session_id", p.SessionID),
				zap.String("connector", p.ConnectorFQN), zap.String("operation", p.Tool+" "+p.Operation),
				zap.String("hint", "aileron-proxy approvals approve "+p.ID))
		},
	})
	d.sessions = session.NewRegistry(session.RegistryConfig{
		OnEnd:  d.sessionEnded,
		Store:  d.stateStore,
		Policy: d.snapshot.Load,
		Logger: log.Named("session"),
	})
	if d.learn, err = learn.OpenStore(cfg.Home); err != nil {
		return nil, err
	}
	if err := d.restoreState(); err != nil {
		return nil, err
	}

	if d.adminToken, err = randomToken(); err != nil {
		return nil, err
	}
	internalKey, err := randomToken()
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(auditCollectors(d.audit)...)

	if d.proxyLn, err = net.Listen("tcp", cfg.ProxyListen); err != nil {
		return nil, fmt.Errorf("listening for the proxy on %s: %w (pick another address with --proxy-listen)", cfg.ProxyListen, err)
	}
	if d.apiLn, err = net.Listen("tcp", cfg.APIListen); err != nil {
		return nil, fmt.Errorf("listening for the API on %s: %w (pick another address with --api-listen)", cfg.APIListen, err)
	}
	d.proxy, err = proxy.New(proxy.Config{
		Logger:        log,
		Sessions:      api.ProxySessions{Registry: d.sessions},
		Policy:        d.snapshot.Load,
		Credentials:   d.credentialSource,
		Audit:         d.audit,
		Approver:      api.ProxyApprover{Broker: d.broker},
		Learn:         d.learn,
		Registerer:    reg,
		LeafStats:     d.leafStats,
		InternalKey:   internalKey,
		Passthrough:   cfg.Passthrough,
		Resolve:       cfg.Resolve,
		UpstreamRoots: upstreamRoots,
		UpstreamProxy: upstreamProxy,
		Limits:        cfg.Limits,
	})
	if err != nil {
		return nil, fmt.Errorf("configuring the proxy: %w", err)
	}
	d.console, err = console.New(console.Config{
		Logger:    log,
		Sessions:  d.sessions,
		Approvals: d.broker,
		Policy:    d.snapshot.Load,
		AuditPath: d.audit.Path(),
		BaseURL:   d.APIURL(),
		Sandboxes: consoleSandboxes{d},
	})
	if err != nil {
		return nil, fmt.Errorf("configuring the web console: %w", err)
	}
	if d.sandboxes, err = d.newSandboxManager(d.stateStore, cfg.Replica); err != nil {
		return nil, err
	}
	d.api, err = api.New(api.Config{
		Logger:             log,
		Sessions:           d.sessions,
		Policy:             d.snapshot.Load,
		Approvals:          d.broker,
		Audit:              d.audit,
		AdminToken:         d.adminToken,
		ProxyAddr:          d.proxyLn.Addr().String(),
		AdvertiseProxyAddr: cfg.AdvertiseProxyAddr,
		ProxyInternalKey:   internalKey,
		SessionFiles:       d.writeSessionFiles,
		Actions:            d.activeActions,
		Registerer:         reg,
		Gatherer:           reg,
		Console:            d.console,
		Sandboxes:          d.sandboxes,
	})
	if err != nil {
		return nil, fmt.Errorf("configuring the API: %w", err)
	}
	d.apiHTTP = d.api.HTTPServer()
	return d, nil
}

// ProxyAddr is the bound proxy address.
func (d *Daemon) ProxyAddr() string { return d.proxyLn.Addr().String() }

// ConsoleLoginURL mints a one-time sign-in link for the web console.
func (d *Daemon) ConsoleLoginURL() (string, error) {
	u, _, err := d.console.NewLoginURL()
	return u, err
}

// APIURL is the control API's base URL (no /v1).
func (d *Daemon) APIURL() string { return "http://" + d.apiLn.Addr().String() }

// Run serves until ctx ends, then drains in-flight requests (bounded by
// ShutdownTimeout), removes daemon.json and closes the audit log and the
// state store. Sessions are not ended: they outlive the process.
func (d *Daemon) Run(ctx context.Context) error {
	errc := make(chan error, 2)
	go func() { errc <- d.proxy.Serve(d.proxyLn) }()
	go func() { errc <- d.apiHTTP.Serve(d.apiLn) }()

	d.recoverSandboxes(ctx)
	info := api.DaemonInfo{APIURL: d.APIURL(), ProxyAddr: d.ProxyAddr(), AdminToken: d.adminToken, PID: os.Getpid()}
	raw, _ := json.MarshalIndent(info, "", "  ")
	daemonFile := filepath.Join(d.cfg.Home, DaemonFile)
	if err := atomicfile.WriteFile(daemonFile, append(raw, '\n'), 0o600); err != nil {
		d.shutdown()
		return fmt.Errorf("writing %s: %w", daemonFile, err)
	}
	defer os.Remove(daemonFile)

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	// Expired sessions are ended (files removed, session.ended audited)
	// soon after expiring, at most a tenth of a core's worth at a time.
	go d.sessions.Run(watchCtx, 0)
	go watch(watchCtx, d.cfg.ReloadInterval, d.storeState, func() {
		if err := d.reloadPolicy(); err != nil {
			d.log.Error("connector reload failed; keeping the last good policy", zap.Error(err))
		}
	}, d.store.Dir(), d.actionStore.Dir())
	go d.sessions.Follow(watchCtx)
	go d.broker.Follow(watchCtx)
	go watch(watchCtx, d.cfg.ReloadInterval, d.credsState, func() {
		if err := d.reloadCredentials(); err != nil {
			d.log.Error("credential reload failed; keeping the last good credentials", zap.Error(err))
		}
	}, d.credentialsPath())

	d.log.Info("serving", zap.String("proxy_addr", d.ProxyAddr()), zap.String("api_url", d.APIURL()),
		zap.Int("connectors", len(d.snapshot.Load().Connectors())), zap.String("daemon_file", daemonFile))
	if u, _, err := d.console.NewLoginURL(); err == nil {
		// The one line a sign-in code appears in; `aileron-proxy ui` mints more.
		d.log.Info("web console sign-in (one-time link, valid "+console.CodeTTL.String()+")", zap.String("url", u))
	}

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		if errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
			err = nil
		}
		if err != nil {
			err = fmt.Errorf("serving: %w", err)
		}
	}
	d.shutdown()
	return err
}

func (d *Daemon) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.ShutdownTimeout)
	defer cancel()
	d.closeSandboxes(ctx)
	// Held requests are refused now rather than at the drain's end; they
	// are recorded as abandoned, as a crash's are at the next start.
	if n := d.broker.Abandon(); n > 0 {
		d.log.Info("pending approvals abandoned", zap.Int("approvals", n))
	}
	if err := d.apiHTTP.Shutdown(ctx); err != nil {
		d.log.Warn("API shutdown", zap.Error(err))
	}
	if err := d.proxy.Shutdown(ctx); err != nil {
		d.log.Warn("proxy shutdown", zap.Error(err))
	}
	d.api.Close()
	// Sessions outlive the process: they stay live in the state store (and
	// their files under sessions/) for the next start or another replica.
	if err := d.audit.Close(); err != nil {
		d.log.Warn("closing audit log", zap.Error(err))
	}
	if err := d.stateStore.Close(); err != nil {
		d.log.Warn("closing the state store", zap.Error(err))
	}
	d.log.Info("stopped")
}

func (d *Daemon) closeListeners() {
	if d.proxyLn != nil {
		d.proxyLn.Close()
	}
	if d.apiLn != nil {
		d.apiLn.Close()
	}
}

// reloadPolicy compiles the store's active connectors and swaps the
// snapshot in; on error the previous snapshot stays. Connectors whose
// package did not change since the last reload are not compiled again.
func (d *Daemon) reloadPolicy() error {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	res, err := d.store.Load()
	if err != nil {
		return fmt.Errorf("loading connector store: %w", err)
	}
	for _, p := range res.Problems {
		d.log.Error("skipping installed connector", zap.String("reason", p))
	}
	snap, err := d.compiler.Compile(res.Active)
	if err != nil {
		return fmt.Errorf("compiling policy: %w", err)
	}
	prev := d.snapshot.Swap(snap)
	d.log.Info("policy loaded", zap.Int("connectors", len(snap.Connectors())), zap.Bool("reload", prev != nil))
	d.reloadActions(res.Active)
	return nil
}

// credentialsPath is $AILERON_HOME/credentials.json.
func (d *Daemon) credentialsPath() string { return filepath.Join(d.cfg.Home, CredentialsFile) }

// reloadCredentials rebuilds the resolver from credentials.json.
func (d *Daemon) reloadCredentials() error {
	path := d.credentialsPath()
	f, err := credentials.LoadFile(path)
	if err != nil {
		return fmt.Errorf("loading %s: %w", path, err)
	}
	// Previous keeps cached OAuth2 tokens and exec output of unchanged
	// bindings across reloads.
	r, err := credentials.NewResolver(credentials.ResolverConfig{File: f, Previous: d.creds.Load()})
	if err != nil {
		return fmt.Errorf("loading %s: %w", path, err)
	}
	prev := d.creds.Swap(r)
	d.log.Info("credentials loaded", zap.Int("bindings", f.Len()), zap.Bool("reload", prev != nil))
	return nil
}

func (d *Daemon) credentialSource() proxy.CredentialSource {
	if r := d.creds.Load(); r != nil {
		return r
	}
	return nil
}

func (d *Daemon) leafStats() (issued, hits uint64) {
	issued, hits = d.endedIssued.Load(), d.endedHits.Load()
	for _, s := range d.sessions.List() {
		st := s.CA.Stats()
		issued += st.Issued
		hits += st.CacheHits
	}
	return issued, hits
}

// sessionEnded closes the session's tunnels, drops its API client, removes
// its files and audits session.ended.
func (d *Daemon) sessionEnded(s *session.Session, e session.Ending) {
	st := s.CA.Stats()
	d.endedIssued.Add(st.Issued)
	d.endedHits.Add(st.CacheHits)
	if d.proxy != nil {
		d.proxy.CloseSession(s.ID)
	}
	if d.api != nil {
		d.api.SessionEnded(s.ID)
	}
	_ = os.RemoveAll(filepath.Join(d.cfg.Home, SessionsDir, s.ID))
	// The learn record stays for `connector draft`, which removes it.
	d.learn.Close(s.ID)
	d.broker.ForgetSession(s.ID)
	fields := []zap.Field{zap.String("session_id", s.ID), zap.String("reason", e.Reason.String())}
	if e.Elsewhere {
		// The replica that ended it recorded session.ended in its log.
		fields = append(fields, zap.Bool("elsewhere", true))
	} else {
		d.audit.Record(audit.Event{Event: audit.EventSessionEnded, SessionID: s.ID, Reason: e.Reason.String(), ExitCode: e.ExitCode})
	}
	if e.ExitCode != nil {
		fields = append(fields, zap.Int("exit_code", *e.ExitCode))
	}
	d.log.Info("session ended", fields...)
}

// writeSessionFiles writes the session CA and the CA bundle (session CA then
// system roots) under sessions/<id>/ for clients and the launcher to mount.
func (d *Daemon) writeSessionFiles(s *session.Session) (caFile, bundleFile string, err error) {
	dir := filepath.Join(d.cfg.Home, SessionsDir, s.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("creating %s: %w", dir, err)
	}
	caFile = filepath.Join(dir, "ca.pem")
	bundleFile = filepath.Join(dir, "ca-bundle.pem")
	// The CA certificate is public; 0644 lets a container user read it.
	if err := atomicfile.WriteFile(caFile, s.CAPEM, 0o644); err != nil {
		return "", "", fmt.Errorf("writing %s: %w", caFile, err)
	}
	if err := atomicfile.WriteFile(bundleFile, ca.BundlePEM(s.CAPEM, d.systemRoots), 0o644); err != nil {
		return "", "", fmt.Errorf("writing %s: %w", bundleFile, err)
	}
	if s.IsLearning() {
		if err := d.learn.Start(learn.Header{SessionID: s.ID, Hosts: s.Learn, CreatedAt: s.CreatedAt.UTC(), Agent: s.Agent, Project: s.Project}); err != nil {
			return "", "", err
		}
	}
	return caFile, bundleFile, nil
}

func loadCertFiles(paths []string) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading --upstream-ca %s: %w", p, err)
		}
		n := 0
		for block, rest := pem.Decode(raw); block != nil; block, rest = pem.Decode(rest) {
			if block.Type != "CERTIFICATE" {
				continue
			}
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("parsing --upstream-ca %s: %w", p, err)
			}
			certs = append(certs, c)
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("--upstream-ca %s holds no PEM certificate; pass a PEM file", p)
		}
	}
	return certs, nil
}

func randomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating a token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
