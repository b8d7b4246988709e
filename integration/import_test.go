package integration

import (
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// TestImportedSpecEnforced imports Kubernetes' own API description (no
// host: --host names the loopback upstream), installs it, sets the
// credential by running the exact command the import printed, and drives
// curl through a session: an imported operation with a path template and a
// query input is allowed with the credential placed as printed; an
// operation the import's --exclude left out and a method the document does
// not declare on a declared path are refused before the upstream.
func TestImportedSpecEnforced(t *testing.T) {
	sh := testkit.RequireTool(t, "sh")
	home := t.TempDir()
	doc := filepath.Join(t.TempDir(), "kubernetes.json")
	gunzipTo(t, "../openapiimport/testdata/openapi/kubernetes.json.gz", doc)

	const host = "k8s.example.test"
	up := newUpstream(t, []string{host}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Like an API server: only the bearer token opens the API.
		if r.Header.Get("Authorization") != "Bearer "+canary {
			http.Error(w, `{"kind":"Status","code":401}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"kind":"PodList","items":[]}`)
	}))

	out, errOut, code := cli(t, home, "", "connector", "import", "--openapi", doc,
		"--fqn", "local://test/kubernetes", "--version", "1.29.0", "--tool", "k8s", "--host", host,
		"--include", "* /api/v1/namespaces/*/pods", "--include", "* /api/v1/namespaces/*/pods/*",
		"--include", "* /api/v1/namespaces/*/pods/*/log", "--exclude", "GET /api/v1/namespaces/*/pods/*/log",
		"--install")
	if code != 0 {
		t.Fatalf("connector import: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "installed local://test/kubernetes 1.29.0") || !strings.Contains(errOut, "imported 7 operations of ") {
		t.Fatalf("connector import printed:\n%s%s", out, errOut)
	}
	var setCmd string
	for _, line := range strings.Split(errOut, "\n") {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, "aileron-proxy credential set ") {
			setCmd = l
		}
	}
	const wantSet = "aileron-proxy credential set local://test/kubernetes --kind api_key --format 'Bearer {secret}' --from-env K8S_API_KEY"
	if setCmd != wantSet {
		t.Fatalf("printed credential command = %q, want %q\n%s", setCmd, wantSet, errOut)
	}
	// Run it as a user would paste it: through a shell, with the binary on
	// PATH and the secret in the variable it names.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	set := exec.CommandContext(ctx, sh, "-c", setCmd)
	set.Env = testkit.CleanEnv("PATH="+filepath.Dir(binPath)+":"+os.Getenv("PATH"), "AILERON_HOME="+home, "K8S_API_KEY="+canary)
	if b, err := set.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", setCmd, err, b)
	}

	// --from-env binds the variable: serve reads it when a request needs it.
	d := startServe(t, home, []string{"K8S_API_KEY=" + canary}, "--resolve", host+":443="+up.addr, "--upstream-ca", up.certFile)
	e := &env{home: home, up: up, d: d, s: createSession(t, home)}
	t.Cleanup(func() { e.assertNoCanary(t) })

	body, code := e.curl(t, "https://"+host+"/api/v1/namespaces/default/pods?limit=5&labelSelector=app%3Dweb")
	if code != 200 || !strings.Contains(body, "PodList") {
		t.Fatalf("GET pods (imported, template and query) = %d %s", code, body)
	}
	got := e.up.last(t)
	if got.Path != "/api/v1/namespaces/default/pods" || got.RawQuery != "limit=5&labelSelector=app%3Dweb" {
		t.Errorf("upstream got %s ?%s", got.Path, got.RawQuery)
	}
	ev := waitAudit(t, home, map[string]any{"event": "connector.proxy.proxied", "operation": "listCoreV1NamespacedPod"})
	if ev["credential_kind"] != "api_key" {
		t.Errorf("proxied audit event = %v", ev)
	}

	for _, c := range []struct{ name, method, path string }{
		{"filtered out by --exclude", "GET", "/api/v1/namespaces/default/pods/web/log"},
		{"method the document does not declare", "PUT", "/api/v1/namespaces/default/pods"},
	} {
		before := len(up.requests())
		body, code := e.curl(t, "-X", c.method, "https://"+host+c.path)
		if code != http.StatusForbidden {
			t.Errorf("%s: %s %s = %d %s, want 403", c.name, c.method, c.path, code, body)
			continue
		}
		if e := decodeError(t, body); e["code"] != "operation_not_allowed" {
			t.Errorf("%s: refusal %v, want code operation_not_allowed", c.name, e)
		}
		if n := len(up.requests()); n != before {
			t.Errorf("%s: the upstream received the refused request", c.name)
		}
	}
}

// gunzipTo decompresses the gzip file src into dst.
func gunzipTo(t *testing.T, src, dst string) {
	t.Helper()
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
