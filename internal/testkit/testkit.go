// Package testkit holds the helpers the module's tests share (Caddy's
// caddytest is the model): golden files, required tools, dead ports, a
// clean child environment and compiled policy snapshots. It is imported by
// _test.go files and by the harnesses internal/registrytest and bench; the
// package map in docs/architecture.md says which packages may.
package testkit

import (
	"bytes"
	"flag"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// update is the -update flag of every test binary that imports testkit:
// Golden rewrites golden files instead of comparing. A package that imports
// testkit must not define its own "update" flag.
var update = flag.Bool("update", false, "rewrite golden files in testdata/ instead of comparing")

// Updating reports whether the test binary runs with -update.
func Updating() bool { return *update }

// Golden compares got with the golden file at path (usually under
// testdata/), or rewrites the file under -update. A difference fails t with
// the first line that differs, both texts, and how to refresh.
func Golden(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatalf("updating %s: %v", path, err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatalf("updating %s: %v", path, err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s (run go test -update to create it): %v", path, err)
	}
	if !bytes.Equal(got, want) {
		n, g, w := firstDiff(string(got), string(want))
		t.Errorf("%s differs from the golden file at line %d (run go test -update and review the diff):\n got %s\nwant %s\n--- got ---\n%s\n--- want ---\n%s", path, n, g, w, got, want)
	}
}

// firstDiff returns the 1-based number of the first line where got and want
// differ, and that line of each, quoted ("end of file" past the end).
func firstDiff(got, want string) (n int, g, w string) {
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	i := 0
	for i < len(gl) && i < len(wl) && gl[i] == wl[i] {
		i++
	}
	line := func(ls []string) string {
		if i < len(ls) {
			return strconv.Quote(ls[i])
		}
		return "end of file"
	}
	return i + 1, line(gl), line(wl)
}

// RequireTool returns the path of an external program a test needs. A
// missing program skips the test, except under CI=true (where .ci/setup
// installs it), where it fails it.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not found on PATH (required when CI=true; .ci/setup installs it): %v", name, err)
		}
		t.Skipf("%s not found on PATH: %v", name, err)
	}
	return p
}

// DeadAddr returns a loopback host:port nothing listens on (listen, then
// close), for tests of refused connections.
func DeadAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// CleanEnv is the environment for child processes: the test's own
// environment minus every variable that could add trust anchors, point at a
// proxy or load a client configuration (the machine exports SSL_CERT_FILE,
// CURL_CA_BUNDLE and proxies globally), plus extra. Each client is then
// given the trust it is meant to use explicitly. Kept despite their names:
// DOCKER_CERT_PATH (how a child reaches the container engine, not trust for
// the traffic under test) and GOPROXY, GONOPROXY (Go's module source).
func CleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		u := strings.ToUpper(k)
		switch {
		case k == "DOCKER_CERT_PATH", k == "GOPROXY", k == "GONOPROXY":
		case strings.Contains(u, "SSL"), strings.Contains(u, "CERT"),
			strings.Contains(u, "CA_BUNDLE"), strings.Contains(u, "CAINFO"),
			strings.Contains(u, "PROXY"), u == "CURL_HOME", u == "OPENSSL_CONF",
			u == "AILERON_HOME", strings.HasPrefix(u, "PYTHON"):
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}
