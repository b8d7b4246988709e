// Package daemon wires one `aileron-proxy serve` process together: it loads
// the installed connectors and credentials, builds the proxy and the control
// API on their listeners, publishes daemon.json, reloads policy when the
// store or the credentials change on disk, and shuts down cleanly.
package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tailscale/hujson"

	"github.com/aileron-dev/aileron-proxy/credentials"

	"github.com/aileron-dev/aileron-proxy/internal/hostport"
	"github.com/aileron-dev/aileron-proxy/proxy"
	"github.com/aileron-dev/aileron-proxy/state"
)

// Defaults for Config fields left zero.
const (
	DefaultProxyListen     = "127.0.0.1:3128"
	DefaultAPIListen       = "127.0.0.1:7700"
	DefaultReloadInterval  = time.Second
	DefaultApprovalTimeout = 120 * time.Second
	DefaultShutdownTimeout = 10 * time.Second
)

// Config is everything serve needs. Zero fields take the defaults above.
type Config struct {
	// Home is the state directory ($AILERON_HOME). Required.
	Home string
	// ProxyListen is the MITM proxy's listen address.
	ProxyListen string
	// APIListen is the control API's listen address.
	APIListen string
	// Resolve maps an upstream host:port to the ip:port dialled for it, like
	// curl's --resolve. Operator-set, so exempt from the private-address guard.
	Resolve map[string]string
	// UpstreamCAFiles are PEM files trusted for upstream TLS on top of the
	// system roots.
	UpstreamCAFiles []string
	// UpstreamProxy is the corporate proxy every upstream connection goes
	// through with CONNECT: an http:// URL without credentials, "env" for
	// serve's HTTPS_PROXY and NO_PROXY, or empty to dial directly.
	UpstreamProxy string
	// UpstreamNoProxy are hosts dialled directly, in NO_PROXY syntax.
	UpstreamNoProxy []string
	// UpstreamProxyUser and UpstreamProxyPassword are the corporate proxy's
	// basic credentials; the password comes from an env, file or exec
	// source, never from argv or the config file.
	UpstreamProxyUser     string
	UpstreamProxyPassword credentials.Source
	// Passthrough are host globs (exact or leading "*.") tunnelled without
	// interception or credentials.
	Passthrough []string
	// ReloadInterval is how often the store and credentials are checked for
	// changes.
	ReloadInterval time.Duration
	// ApprovalTimeout is how long a request waits for a person's decision.
	ApprovalTimeout time.Duration
	// ShutdownTimeout bounds the drain of in-flight requests on shutdown.
	ShutdownTimeout time.Duration
	// Limits bound what one client can make the proxy hold; zero fields
	// take the proxy's defaults (see proxy.Limits).
	Limits proxy.Limits
	// AdvertiseProxyAddr, when set, is the proxy address put in session
	// proxy URLs instead of the listen address (e.g. a gateway address that
	// containers reach).
	AdvertiseProxyAddr string
	// StateURL is the state store that sessions, approvals and
	// remembered decisions outlive the process in: empty means the
	// embedded SQLite database under Home; a postgres:// URL is a
	// database shared by replicas.
	StateURL string
	// StateKeyFile is the file holding the key that seals session CA keys
	// in the store; empty means Home's state.key (created on first start
	// with the embedded database). Every replica sharing a database needs
	// the same key.
	StateKeyFile string
	// Replica names this process among those sharing a state store (in
	// audit events and as the holder of its pending approvals); empty
	// means the host name.
	Replica string
	// Store, when set, is an open state store used instead of opening
	// StateURL (an embedding program's, or a test's replicas sharing one
	// in-memory store); the caller keeps it and closes it after Run.
	Store state.Store
	// ShutdownSandboxes removes the long-lived sandboxes at shutdown, as
	// before sandboxes outlived serve; false leaves them running for the
	// next start to find.
	ShutdownSandboxes bool
}

// fileConfig is the schema of the JSONC config file; keys use the same words
// as the serve flags.
type fileConfig struct {
	ProxyListen     string      `json:"proxy_listen"`
	APIListen       string      `json:"api_listen"`
	Resolve         []string    `json:"resolve"`
	UpstreamCA      []string    `json:"upstream_ca"`
	Passthrough     []string    `json:"passthrough"`
	UpstreamProxy   string      `json:"upstream_proxy"`
	UpstreamNoProxy []string    `json:"upstream_no_proxy"`
	UpstreamUser    string      `json:"upstream_proxy_user"`
	UpstreamPwEnv   string      `json:"upstream_proxy_password_env"`
	UpstreamPwFile  string      `json:"upstream_proxy_password_file"`
	ReloadInterval  string      `json:"reload_interval"`
	ApprovalTimeout string      `json:"approval_timeout"`
	ShutdownTimeout string      `json:"shutdown_timeout"`
	AdvertiseProxy  string      `json:"advertise_proxy_addr"`
	Limits          *fileLimits `json:"limits"`
	State           string      `json:"state"`
	StateKeyFile    string      `json:"state_key_file"`
	Replica         string      `json:"replica"`
	// ShutdownSandboxes is a pointer so that an absent key leaves the flag's
	// value alone.
	ShutdownSandboxes *bool `json:"shutdown_sandboxes"`
}

// fileLimits is the "limits" object of the config file; durations are Go
// duration strings ("30s").
type fileLimits struct {
	MaxHeaderBytes        int    `json:"max_header_bytes"`
	MaxTunnelsPerSession  int    `json:"max_tunnels_per_session"`
	IdleTimeout           string `json:"idle_timeout"`
	ConnectTimeout        string `json:"connect_timeout"`
	TLSHandshakeTimeout   string `json:"tls_handshake_timeout"`
	DialTimeout           string `json:"dial_timeout"`
	ResponseHeaderTimeout string `json:"response_header_timeout"`
	MaxIdleConnsPerHost   int    `json:"max_idle_conns_per_host"`
	MaxConcurrentStreams  uint32 `json:"max_concurrent_streams"`
}

// LoadConfig returns the Config of home: the settings of the config file at
// path, or of $home/config.json (ConfigFile) when path is empty and that
// file exists; without a file, only Home is set.
func LoadConfig(home, path string) (Config, error) {
	cfg := Config{Home: home}
	if path == "" {
		path = filepath.Join(home, ConfigFile)
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return cfg, nil
		}
	}
	if err := LoadConfigFile(path, &cfg); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// LoadConfigFile reads a JSONC config file (comments and trailing commas
// allowed) into cfg, overwriting the fields the file sets. Unknown keys are
// errors so a typo never silently falls back to a default.
func LoadConfigFile(path string, cfg *Config) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading config %s: %w", path, err)
	}
	std, err := hujson.Standardize(raw)
	if err != nil {
		return fmt.Errorf("parsing config %s: %w (the file is JSON with optional comments and trailing commas)", path, err)
	}
	var fc fileConfig
	dec := json.NewDecoder(bytes.NewReader(std))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fc); err != nil {
		return fmt.Errorf("parsing config %s: %w (accepted keys: proxy_listen, api_listen, resolve, upstream_ca, passthrough, upstream_proxy, upstream_no_proxy, upstream_proxy_user, upstream_proxy_password_env, upstream_proxy_password_file, reload_interval, approval_timeout, shutdown_timeout, advertise_proxy_addr, limits, state, state_key_file, replica, shutdown_sandboxes)", path, err)
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&cfg.ProxyListen, fc.ProxyListen)
	set(&cfg.APIListen, fc.APIListen)
	set(&cfg.AdvertiseProxyAddr, fc.AdvertiseProxy)
	set(&cfg.StateURL, fc.State)
	set(&cfg.StateKeyFile, fc.StateKeyFile)
	set(&cfg.Replica, fc.Replica)
	if fc.ShutdownSandboxes != nil {
		cfg.ShutdownSandboxes = *fc.ShutdownSandboxes
	}
	if len(fc.Resolve) > 0 {
		m, err := ParseResolve(fc.Resolve)
		if err != nil {
			return fmt.Errorf("config %s: resolve: %w", path, err)
		}
		cfg.Resolve = m
	}
	if len(fc.UpstreamCA) > 0 {
		cfg.UpstreamCAFiles = fc.UpstreamCA
	}
	if len(fc.Passthrough) > 0 {
		cfg.Passthrough = fc.Passthrough
	}
	set(&cfg.UpstreamProxy, fc.UpstreamProxy)
	set(&cfg.UpstreamProxyUser, fc.UpstreamUser)
	if len(fc.UpstreamNoProxy) > 0 {
		cfg.UpstreamNoProxy = fc.UpstreamNoProxy
	}
	switch {
	case fc.UpstreamPwEnv != "" && fc.UpstreamPwFile != "":
		return fmt.Errorf("config %s: set one of upstream_proxy_password_env and upstream_proxy_password_file", path)
	case fc.UpstreamPwEnv != "":
		cfg.UpstreamProxyPassword = credentials.Source{Type: credentials.SourceEnv, Ref: fc.UpstreamPwEnv}
	case fc.UpstreamPwFile != "":
		cfg.UpstreamProxyPassword = credentials.Source{Type: credentials.SourceFile, Ref: fc.UpstreamPwFile}
	}
	type durationKey struct {
		key, v string
		dst    *time.Duration
	}
	durations := []durationKey{
		{"reload_interval", fc.ReloadInterval, &cfg.ReloadInterval},
		{"approval_timeout", fc.ApprovalTimeout, &cfg.ApprovalTimeout},
		{"shutdown_timeout", fc.ShutdownTimeout, &cfg.ShutdownTimeout},
	}
	if l := fc.Limits; l != nil {
		if l.MaxHeaderBytes < 0 || l.MaxTunnelsPerSession < 0 || l.MaxIdleConnsPerHost < 0 {
			return fmt.Errorf("config %s: limits: counts must be positive (or omitted for the default)", path)
		}
		cfg.Limits.MaxHeaderBytes = l.MaxHeaderBytes
		cfg.Limits.MaxTunnelsPerSession = l.MaxTunnelsPerSession
		cfg.Limits.MaxIdleConnsPerHost = l.MaxIdleConnsPerHost
		cfg.Limits.MaxConcurrentStreams = l.MaxConcurrentStreams
		durations = append(durations,
			durationKey{"limits.idle_timeout", l.IdleTimeout, &cfg.Limits.IdleTimeout},
			durationKey{"limits.connect_timeout", l.ConnectTimeout, &cfg.Limits.ConnectTimeout},
			durationKey{"limits.tls_handshake_timeout", l.TLSHandshakeTimeout, &cfg.Limits.TLSHandshakeTimeout},
			durationKey{"limits.dial_timeout", l.DialTimeout, &cfg.Limits.DialTimeout},
			durationKey{"limits.response_header_timeout", l.ResponseHeaderTimeout, &cfg.Limits.ResponseHeaderTimeout},
		)
	}
	for _, d := range durations {
		if d.v == "" {
			continue
		}
		v, err := time.ParseDuration(d.v)
		if err != nil || v <= 0 {
			return fmt.Errorf("config %s: %s: %q is not a positive duration (use e.g. \"30s\" or \"2m\")", path, d.key, d.v)
		}
		*d.dst = v
	}
	return nil
}

// ParseResolve parses HOST:PORT=IP:PORT entries into a map keyed by the
// lower-case host:port.
func ParseResolve(entries []string) (map[string]string, error) {
	m := make(map[string]string, len(entries))
	for _, e := range entries {
		from, to, ok := strings.Cut(e, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want HOST:PORT=IP:PORT, e.g. api.example.com:443=127.0.0.1:8443", e)
		}
		key, err := hostport.NewAddr(from)
		if err != nil {
			return nil, fmt.Errorf("%q: %q is not HOST:PORT (e.g. api.example.com:443)", e, from)
		}
		addr, err := hostport.NewAddr(to)
		if err != nil || !addr.IsIP() {
			return nil, fmt.Errorf("%q: %q is not IP:PORT (e.g. 127.0.0.1:8443 or [::1]:8443)", e, to)
		}
		m[key.String()] = addr.String()
	}
	return m, nil
}

// withDefaults returns cfg with zero fields defaulted, or an error naming
// the missing required field.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Home == "" {
		return cfg, errors.New("daemon config: Home is required (set --home or AILERON_HOME)")
	}
	if cfg.ProxyListen == "" {
		cfg.ProxyListen = DefaultProxyListen
	}
	if cfg.APIListen == "" {
		cfg.APIListen = DefaultAPIListen
	}
	if cfg.ReloadInterval <= 0 {
		cfg.ReloadInterval = DefaultReloadInterval
	}
	if cfg.ApprovalTimeout <= 0 {
		cfg.ApprovalTimeout = DefaultApprovalTimeout
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.Replica == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "serve"
		}
		cfg.Replica = host
	}
	if err := checkReplica(cfg.Replica); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// MaxReplicaBytes bounds a replica name.
const MaxReplicaBytes = 128

// checkReplica refuses a replica name that would not read well in an audit
// line or a log: too long, or holding spaces or control characters.
func checkReplica(name string) error {
	if len(name) > MaxReplicaBytes {
		return fmt.Errorf("replica name %q is %d bytes long; use at most %d (--replica)", name, len(name), MaxReplicaBytes)
	}
	for _, r := range name {
		if r <= ' ' || r == 0x7f || r == utf8.RuneError {
			return fmt.Errorf("replica name %q holds a space, a control character or invalid UTF-8; use a name such as serve-0 (--replica)", name)
		}
	}
	return nil
}
