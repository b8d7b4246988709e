package launcher

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"
)

// Build arguments through which a tier-1 Dockerfile asks for the host's
// package-registry setup (the agent recipes declare both).
const (
	// BuildArgNPMRegistry receives the host's `npm config get registry`.
	BuildArgNPMRegistry = "npm_config_registry"
	// BuildArgCAURL receives a loopback URL that serves the host's CA bundle
	// for the duration of the build; the Dockerfile must fetch, use and
	// delete it within one RUN step so that no layer holds it.
	BuildArgCAURL = "AILERON_BUILD_CA_URL"
)

// hostCABundles are the system CA bundles tried when SSL_CERT_FILE is unset.
var hostCABundles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

// declaresArg reports whether dockerfile has an ARG instruction for name.
func declaresArg(dockerfile []byte, name string) bool {
	re := regexp.MustCompile(`(?mi)^\s*ARG\s+` + regexp.QuoteMeta(name) + `(=|\s|$)`)
	return re.Match(dockerfile)
}

// HostCABundle is the CA bundle the host trusts: $SSL_CERT_FILE, else the
// first system bundle found; "" when there is none.
func HostCABundle() string {
	if f := os.Getenv("SSL_CERT_FILE"); f != "" {
		return f
	}
	for _, f := range hostCABundles {
		if st, err := os.Stat(f); err == nil && st.Mode().IsRegular() {
			return f
		}
	}
	return ""
}

// hostNPMRegistry is the host's npm registry, "" when npm is absent or
// answers nothing usable.
func hostNPMRegistry(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "npm", "config", "get", "registry").Output()
	if err != nil {
		return ""
	}
	return buildRegistryArg(string(out))
}

// buildRegistryArg is reg (npm's answer) when it can be a build argument:
// an http(s) URL without userinfo, since build arguments reach the
// runtime's argv and the image history; "" otherwise.
func buildRegistryArg(reg string) string {
	reg = strings.TrimSpace(reg)
	u, err := url.Parse(reg)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return ""
	}
	return reg
}

// withHostRegistries fills the build arguments a Dockerfile declares for
// the host's registry setup (unless build.args sets them): the npm
// registry, and the CA bundle served from an ephemeral loopback-only HTTP
// server under an unguessable path. That build then runs on the host
// network, the only one from which loopback is reachable; Docker's classic
// builder has no build secrets, so this works the same for both runtimes.
// The returned stop closes the server; call it after the build.
func withHostRegistries(ctx context.Context, req *runtime.BuildRequest, dockerfile []byte) (stop func(), err error) {
	stop = func() {}
	setArg := func(k, v string) {
		if _, ok := req.Args[k]; ok || v == "" {
			return
		}
		args := make(map[string]string, len(req.Args)+1)
		for ak, av := range req.Args {
			args[ak] = av
		}
		args[k] = v
		req.Args = args
	}
	if declaresArg(dockerfile, BuildArgNPMRegistry) {
		setArg(BuildArgNPMRegistry, hostNPMRegistry(ctx))
	}
	if !declaresArg(dockerfile, BuildArgCAURL) || req.Args[BuildArgCAURL] != "" || req.Network != "" {
		return stop, nil
	}
	bundle := HostCABundle()
	if bundle == "" {
		return stop, nil
	}
	pem, err := os.ReadFile(bundle)
	if err != nil {
		return stop, fmt.Errorf("reading the host CA bundle %s for the build: %w (set SSL_CERT_FILE to a readable PEM bundle)", bundle, err)
	}
	if !bytes.Contains(pem, []byte("-----BEGIN CERTIFICATE-----")) {
		return stop, fmt.Errorf("reading the host CA bundle %s for the build: no PEM certificate in it (set SSL_CERT_FILE to a PEM bundle)", bundle)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return stop, fmt.Errorf("serving the host CA bundle to the build: %w", err)
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		ln.Close()
		return stop, fmt.Errorf("serving the host CA bundle to the build: %w", err)
	}
	path := "/" + hex.EncodeToString(tok) + "/ca.pem"
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet || r.URL.Path != path {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/x-pem-file")
			_, _ = w.Write(pem)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = srv.Serve(ln) }() // ends with ErrServerClosed on stop
	setArg(BuildArgCAURL, "http://"+ln.Addr().String()+path)
	req.Network = "host"
	return func() { _ = srv.Close() }, nil
}
