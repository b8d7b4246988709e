package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/aileron-dev/aileron-proxy/credentials"
	"github.com/aileron-dev/aileron-proxy/proxy"
)

// UpstreamProxyEnv is the UpstreamProxy value that takes the corporate
// proxy from serve's own HTTPS_PROXY and NO_PROXY.
const UpstreamProxyEnv = "env"

// upstreamProxyConfig turns the upstream_proxy settings into the proxy's;
// nil when none is set. getenv reads serve's environment.
func upstreamProxyConfig(cfg Config, getenv func(string) string) (*proxy.UpstreamProxy, error) {
	raw := cfg.UpstreamProxy
	noProxy := append([]string(nil), cfg.UpstreamNoProxy...)
	fromEnv := raw == UpstreamProxyEnv
	if fromEnv {
		raw = firstEnv(getenv, "HTTPS_PROXY", "https_proxy")
		for _, e := range strings.Split(firstEnv(getenv, "NO_PROXY", "no_proxy"), ",") {
			noProxy = append(noProxy, e)
		}
		if raw == "" {
			return nil, nil // no proxy in the environment: dial directly
		}
	}
	if raw == "" {
		if cfg.UpstreamProxyUser != "" || !cfg.UpstreamProxyPassword.IsZero() {
			return nil, fmt.Errorf("upstream proxy credentials are set but no upstream proxy; add --upstream-proxy URL")
		}
		return nil, nil
	}
	addr, user, err := proxy.ParseUpstreamProxyURL(raw)
	if err != nil {
		return nil, fmt.Errorf("upstream_proxy: %w", err)
	}
	up := &proxy.UpstreamProxy{Addr: addr, NoProxy: noProxy, Username: cfg.UpstreamProxyUser}
	if user != nil {
		if !fromEnv {
			return nil, fmt.Errorf("upstream_proxy: the URL carries credentials, which must never be in argv or the config; " +
				"use --upstream-proxy-user and --upstream-proxy-password-from-env, -from-file or -from-exec")
		}
		if up.Username == "" {
			up.Username = user.Username()
		}
		if pw, ok := user.Password(); ok && cfg.UpstreamProxyPassword.IsZero() {
			v := credentials.NewValue(pw)
			up.Password = func(context.Context) (string, error) { return v.Reveal(), nil }
		}
	}
	if src := cfg.UpstreamProxyPassword; !src.IsZero() {
		if src.Type == credentials.SourceFile && !filepath.IsAbs(src.Ref) {
			if src.Ref, err = filepath.Abs(src.Ref); err != nil {
				return nil, fmt.Errorf("upstream proxy password file: %w", err)
			}
		}
		r, err := credentials.NewSecretReader(src, "upstream proxy password", getenv)
		if err != nil {
			return nil, err
		}
		up.Password = func(ctx context.Context) (string, error) {
			v, err := r.Read(ctx)
			return v.Reveal(), err
		}
	}
	if up.Password != nil && up.Username == "" {
		return nil, fmt.Errorf("an upstream proxy password source is set without --upstream-proxy-user")
	}
	return up, nil
}

func firstEnv(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := getenv(n); v != "" {
			return v
		}
	}
	return ""
}
