package launcher

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/api"
	"github.com/aileron-dev/aileron-proxy/ca"
	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"github.com/aileron-dev/aileron-proxy/policy"
	"github.com/aileron-dev/aileron-proxy/shims"
)

// Paths inside the sandbox.
const (
	// SandboxToolsFile is tools.txt, one line per tool.
	SandboxToolsFile = "/etc/aileron/tools.txt"
	// SandboxShimsDir holds one shim per tool.
	SandboxShimsDir = "/usr/local/bin"
	// SandboxCAFile is the session CA certificate (PEM).
	SandboxCAFile = "/etc/aileron/ca.pem"
	// SandboxCABundle is the session CA followed by the host's system roots.
	SandboxCABundle = "/etc/aileron/ca-bundle.pem"
	// SandboxSystemBundle is the system trust store of Debian, Ubuntu and
	// Alpine images. The CA bundle is mounted over it (read-only), so
	// clients that read only the system store trust the session CA without
	// root: GNU wget (GnuTLS reads this file) and OpenSSL-based tools
	// (Debian's /usr/lib/ssl/cert.pem is a symlink to it).
	SandboxSystemBundle = "/etc/ssl/certs/ca-certificates.crt"
	// SandboxManifestsDir holds the session's connector packages, laid out
	// as in the store: sha256/<hex>/aileron.connector.v1.json.
	SandboxManifestsDir = "/opt/aileron/manifests/connectors"
)

// SandboxEnvInput is what SandboxEnv assembles the environment from.
type SandboxEnvInput struct {
	// Session is the created session (ID, APIToken and ProxyURL are used).
	Session *api.CreatedSession
	// ProxyAddr is the gateway ip:port of the proxy relay; it replaces the
	// host of Session.ProxyURL.
	ProxyAddr string
	// APIURL is the daemon's API base URL; only its scheme and path are
	// kept, its host becomes APIAddr.
	APIURL string
	// APIAddr is the gateway ip:port of the API relay.
	APIAddr string
	// HostAlias is the runtime's host name (pinned to the gateway); it is
	// added to NO_PROXY.
	HostAlias string
	// ContainerEnv and RemoteEnv are the devcontainer's, resolved
	// (Plan.ResolveEnv), applied in that order: neither can set a
	// variable launch sets, nor any AILERON_* one.
	ContainerEnv, RemoteEnv map[string]string
}

// SandboxEnv returns the agent's environment: the devcontainer's
// containerEnv and remoteEnv, then the session's variables (which win; each override is
// reported in warnings). It holds secrets (the API token and the proxy
// credential), so it travels only in the runtime's 0600 env file.
func SandboxEnv(in SandboxEnvInput) (env map[string]string, warnings []string, err error) {
	if in.Session == nil {
		return nil, nil, errors.New("assembling the sandbox environment: no session")
	}
	gwHost, _, err := net.SplitHostPort(in.ProxyAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("assembling the sandbox environment: proxy relay address %q is not ip:port", in.ProxyAddr)
	}
	apiGW, _, err := net.SplitHostPort(in.APIAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("assembling the sandbox environment: API relay address %q is not ip:port", in.APIAddr)
	}
	pu, err := url.Parse(in.Session.ProxyURL)
	if err != nil || pu.User == nil || pu.Host == "" {
		// The URL carries the proxy secret: never quote it.
		return nil, nil, errors.New("assembling the sandbox environment: the daemon's session proxy_url is not an http URL with a credential (upgrade or restart `aileron-proxy serve`)")
	}
	pu.Host = in.ProxyAddr
	au, err := url.Parse(in.APIURL)
	if err != nil || (au.Scheme != "http" && au.Scheme != "https") {
		return nil, nil, fmt.Errorf("assembling the sandbox environment: API URL %q is not an http(s) URL (restart `aileron-proxy serve`)", in.APIURL)
	}
	apiURL := (&url.URL{Scheme: au.Scheme, Host: in.APIAddr, Path: strings.TrimSuffix(au.Path, "/") + "/v1"}).String()

	noProxy := []string{gwHost}
	if apiGW != gwHost {
		noProxy = append(noProxy, apiGW)
	}
	if in.HostAlias != "" {
		noProxy = append(noProxy, in.HostAlias)
	}
	noProxy = append(noProxy, "localhost", "127.0.0.1", "::1")
	proxyURL := pu.String()
	ours := map[string]string{
		"AILERON_API_URL":    apiURL,
		"AILERON_TOKEN":      in.Session.APIToken,
		"AILERON_SESSION_ID": in.Session.ID,
		"AILERON_TOOLS_FILE": SandboxToolsFile,
		"AILERON_SHIMS_DIR":  SandboxShimsDir,
		"HTTPS_PROXY":        proxyURL,
		"https_proxy":        proxyURL,
		"HTTP_PROXY":         proxyURL,
		"http_proxy":         proxyURL,
		"NO_PROXY":           strings.Join(noProxy, ","),
		"no_proxy":           strings.Join(noProxy, ","),
		"SSL_CERT_FILE":      SandboxCABundle,
		"CURL_CA_BUNDLE":     SandboxCABundle,
		"REQUESTS_CA_BUNDLE": SandboxCABundle,
		"GIT_SSL_CAINFO":     SandboxCABundle,
		// Node adds these to its bundled roots: the CA alone is enough.
		"NODE_EXTRA_CA_CERTS": SandboxCAFile,
		"NODE_USE_ENV_PROXY":  "1",
	}
	env = make(map[string]string, len(in.ContainerEnv)+len(in.RemoteEnv)+len(ours))
	for _, layer := range []struct {
		key  string
		vars map[string]string
	}{{"containerEnv", in.ContainerEnv}, {"remoteEnv", in.RemoteEnv}} {
		for k, v := range layer.vars {
			if _, taken := ours[k]; taken || strings.HasPrefix(k, "AILERON_") {
				warnings = append(warnings, fmt.Sprintf("ignoring %s %s from %s: launch sets it for the session (AILERON_*, proxy and CA variables are reserved)", layer.key, k, devcontainer.Path))
				continue
			}
			env[k] = v
		}
	}
	sort.Strings(warnings)
	for k, v := range ours {
		env[k] = v
	}
	return env, warnings, nil
}

// apiHostPort returns the host:port of the daemon's API URL.
func apiHostPort(apiURL string) (string, error) {
	u, err := url.Parse(apiURL)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("relaying to the daemon's API: api_url %q is not a URL (restart `aileron-proxy serve`)", apiURL)
	}
	if u.Port() != "" {
		return u.Host, nil
	}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

// sandboxFiles are the files launch mounts, in a temporary directory.
type sandboxFiles struct {
	dir string
	// tools is the shims.WriteDir output: tools.txt and bin/.
	tools string
	// caFile and bundleFile are the session CA and the CA bundle.
	caFile, bundleFile string
	// manifests is the copy of the session's connector packages; empty
	// when there is none.
	manifests string
	// actions is the copy of the session's action manifests (writeActions);
	// empty when there is none.
	actions string
}

// writeSandboxFiles writes the rendered tools, the session CA, the CA
// bundle and the session's connector packages into a new temporary
// directory. Nothing in it is secret. files is non-nil whenever the
// directory was created, also on error, so the caller can remove it.
func writeSandboxFiles(sess *api.CreatedSession, r *shims.Rendered, conns []policy.Connector, storeDir string, log *zap.Logger) (*sandboxFiles, error) {
	if strings.TrimSpace(sess.CAPEM) == "" {
		return nil, errors.New("preparing the sandbox files: the daemon returned no session CA (upgrade or restart `aileron-proxy serve`)")
	}
	dir, err := os.MkdirTemp("", "aileron-launch-*")
	if err != nil {
		return nil, fmt.Errorf("preparing the sandbox files: %w", err)
	}
	f := &sandboxFiles{dir: dir, tools: filepath.Join(dir, "tools")}
	if err := shims.WriteDir(f.tools, r); err != nil {
		return f, err
	}
	roots, err := ca.SystemRootsPEM()
	if err != nil {
		log.Warn("no system root bundle on the host; the sandbox's CA bundle holds only the session CA", zap.Error(err))
	}
	f.caFile = filepath.Join(dir, "ca.pem")
	f.bundleFile = filepath.Join(dir, "ca-bundle.pem")
	for _, w := range []struct {
		path string
		data []byte
	}{{f.caFile, []byte(sess.CAPEM)}, {f.bundleFile, ca.BundlePEM([]byte(sess.CAPEM), roots)}} {
		// Certificates are public; 0644 lets the image's user read them.
		if err := os.WriteFile(w.path, w.data, 0o644); err != nil {
			return f, fmt.Errorf("preparing the sandbox files: %w", err)
		}
	}
	if storeDir != "" && len(conns) > 0 {
		m := filepath.Join(dir, "manifests")
		if err := copyPackages(storeDir, m, conns, log); err != nil {
			return f, err
		}
		f.manifests = m
	}
	return f, nil
}

// copyPackages copies each connector's package directory from the store
// (0700, unreadable by the image's user) to dst/sha256/<hex>, readable.
func copyPackages(storeDir, dst string, conns []policy.Connector, log *zap.Logger) error {
	if err := os.MkdirAll(filepath.Join(dst, "sha256"), 0o755); err != nil {
		return fmt.Errorf("copying connector packages: %w", err)
	}
	for _, c := range conns {
		hex, ok := strings.CutPrefix(c.Hash, "sha256:")
		if !ok || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" {
			log.Warn("not mounting a connector package with an unexpected hash", zap.String("connector", c.Spec.Connector.FQN), zap.String("hash", c.Hash))
			continue
		}
		src := filepath.Join(storeDir, "sha256", hex)
		if _, err := os.Stat(src); errors.Is(err, fs.ErrNotExist) {
			log.Warn("connector package not in the store; not mounting it", zap.String("connector", c.Spec.Connector.FQN), zap.String("dir", src))
			continue
		}
		if err := copyTree(src, filepath.Join(dst, "sha256", hex)); err != nil {
			return fmt.Errorf("copying the package of %s: %w", c.Spec.Connector.FQN, err)
		}
	}
	return nil
}

// copyTree copies the directories and regular files under src (symlinks
// and other files are skipped) with modes 0755 and 0644.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
			return os.Chmod(target, 0o755)
		case d.Type().IsRegular():
			in, err := os.Open(p)
			if err != nil {
				return err
			}
			defer in.Close()
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, in); err != nil {
				out.Close()
				return err
			}
			return out.Close()
		}
		return nil
	})
}

// mounts lists the sandbox's mounts: the project (workspace, read-write
// by default) and the devcontainer's checked mounts (Plan.Mounts), then
// launch's own, read-only.
func (f *sandboxFiles) mounts(plan *Plan, r *shims.Rendered) []runtime.Mount {
	ms := append([]runtime.Mount{plan.Workspace}, plan.Mounts...)
	ms = append(ms,
		runtime.Mount{Source: filepath.Join(f.tools, shims.ToolsFile), Target: SandboxToolsFile, ReadOnly: true},
	)
	for _, s := range r.Shims {
		ms = append(ms, runtime.Mount{Source: filepath.Join(f.tools, shims.BinDir, s.Command), Target: SandboxShimsDir + "/" + s.Command, ReadOnly: true})
	}
	ms = append(ms,
		runtime.Mount{Source: f.caFile, Target: SandboxCAFile, ReadOnly: true},
		runtime.Mount{Source: f.bundleFile, Target: SandboxCABundle, ReadOnly: true},
		runtime.Mount{Source: f.bundleFile, Target: SandboxSystemBundle, ReadOnly: true},
	)
	if f.manifests != "" {
		ms = append(ms, runtime.Mount{Source: f.manifests, Target: SandboxManifestsDir, ReadOnly: true})
	}
	if f.actions != "" {
		ms = append(ms, runtime.Mount{Source: f.actions, Target: SandboxActionsDir, ReadOnly: true})
	}
	return ms
}

// bannerInfo is what the launch banner shows.
type bannerInfo struct {
	session  string
	plan     *Plan
	rt       runtime.Runtime
	tools    []shims.Shim
	network  runtime.Network
	proxy    string
	auditLog string
	// guard is the egress guard's GuardSummary; user the AgentUser's.
	guard, user string
	// learn are the session's learn patterns; nil for an ordinary session.
	learn []string
}

// writeBanner prints the short summary launch shows on stderr before the
// agent starts.
func writeBanner(w io.Writer, b bannerInfo) {
	tools := "none"
	if len(b.tools) > 0 {
		parts := make([]string, len(b.tools))
		for i, s := range b.tools {
			parts[i] = fmt.Sprintf("%s (%s)", s.Command, s.ConnectorFQN)
		}
		tools = strings.Join(parts, ", ")
	}
	selection := b.rt.Selection()
	if strings.HasPrefix(selection, "--runtime ") {
		selection = "--sandbox=" + b.rt.Kind().String()
	}
	audit := "aileron-proxy audit tail -f --session " + b.session
	if b.auditLog != "" {
		audit = b.auditLog + "; follow it with `" + audit + "`"
	}
	fmt.Fprintf(w, "aileron-proxy launch\n"+
		"  session  %s\n"+
		"  tier     %s\n"+
		"  image    %s\n"+
		"  runtime  %s (%s)\n"+
		"  user     %s\n"+
		"  tools    %s\n"+
		"  egress   internal network %s (%s): only the proxy at %s and the API\n"+
		"  guard    %s\n"+
		"  hardened %s\n"+
		"  audit    %s\n",
		b.session, b.plan.Tier, b.plan.Image, b.rt.Kind(), selection, b.user, tools,
		b.network.Name, b.network.Subnet, b.proxy, b.guard, hardeningSummary(b.plan), audit)
	if line := LearnSummary(b.learn); line != "" {
		fmt.Fprintf(w, "  learn    %s; then `aileron-proxy connector draft --session %s --fqn FQN`\n", line, b.session)
	}
}

// LearnSummary says which hosts a learn session learns, for the launch
// banner and `sandbox plan`; empty for none.
func LearnSummary(patterns []string) string {
	if len(patterns) == 0 {
		return ""
	}
	return strings.Join(patterns, ", ") + " (requests no operation matches go without credentials and are recorded)"
}
