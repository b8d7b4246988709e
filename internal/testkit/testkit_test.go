package testkit

import (
	"slices"
	"strings"
	"testing"
)

func TestCleanEnv(t *testing.T) {
	dropped := []string{"SSL_CERT_FILE", "SSL_CERT_DIR", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "GIT_SSL_CAINFO",
		"NODE_EXTRA_CA_CERTS", "NIX_SSL_CERT_FILE", "PIP_CERT", "AWS_CA_BUNDLE", "HTTPLIB2_CA_CERTS",
		"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", "CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE",
		"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy",
		"AILERON_HOME", "CURL_HOME", "OPENSSL_CONF", "PYTHONHTTPSVERIFY"}
	kept := []string{"DOCKER_CERT_PATH", "GOPROXY", "GONOPROXY", "TESTKIT_PLAIN"}
	for _, k := range append(slices.Clone(dropped), kept...) {
		t.Setenv(k, "v")
	}
	env := CleanEnv("HTTPS_PROXY=http://127.0.0.1:1")
	has := func(k string) bool {
		return slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
	}
	for _, k := range dropped {
		if has(k) && k != "HTTPS_PROXY" {
			t.Errorf("CleanEnv() keeps %s, want it dropped", k)
		}
	}
	for _, k := range kept {
		if !has(k) {
			t.Errorf("CleanEnv() drops %s, want it kept", k)
		}
	}
	if !slices.Contains(env, "HTTPS_PROXY=http://127.0.0.1:1") || slices.Contains(env, "HTTPS_PROXY=v") {
		t.Errorf("CleanEnv(HTTPS_PROXY=...) = %q, want the extra and not the inherited value", env)
	}
}

func TestFirstDiff(t *testing.T) {
	for _, tc := range []struct {
		got, want string
		n         int
		g, w      string
	}{
		{got: "a\nb\n", want: "a\nc\n", n: 2, g: `"b"`, w: `"c"`},
		{got: "a\n", want: "a\nb\n", n: 2, g: `""`, w: `"b"`},
		{got: "a\nb", want: "a", n: 2, g: `"b"`, w: "end of file"},
	} {
		n, g, w := firstDiff(tc.got, tc.want)
		if n != tc.n || g != tc.g || w != tc.w {
			t.Errorf("firstDiff(%q, %q) = %d, %s, %s; want %d, %s, %s", tc.got, tc.want, n, g, w, tc.n, tc.g, tc.w)
		}
	}
}
