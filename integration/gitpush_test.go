package integration

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/cookiejar"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// gitPushEnv is serve with the shipped GitHub connector, github.com
// resolved to a loopback git http-backend that requires the injected
// credential, a session, and a clone of acme/tools made through it.
type gitPushEnv struct {
	*env
	git, bare, work string
	gitEnv          []string
}

func newGitPushEnv(t *testing.T) *gitPushEnv {
	t.Helper()
	g := newGitPushServe(t, "60s")
	s := createSession(t, g.home)
	g.s = s
	g.work = filepath.Join(t.TempDir(), "tools")
	g.gitEnv = testkit.CleanEnv("HTTPS_PROXY="+s.ProxyURL, "GIT_SSL_CAINFO="+s.CAFile, "GIT_TERMINAL_PROMPT=0",
		"GIT_CONFIG_NOSYSTEM=1", "HOME="+t.TempDir(), "GIT_AUTHOR_NAME=agent", "GIT_AUTHOR_EMAIL=agent@example.test",
		"GIT_COMMITTER_NAME=agent", "GIT_COMMITTER_EMAIL=agent@example.test")
	if out, err := g.cmd("clone", "-q", "https://github.com/acme/tools.git", g.work).CombinedOutput(); err != nil {
		t.Fatalf("git clone through the proxy: %v\n%s", err, out)
	}
	return g
}

// newGitPushServe starts the git http-backend stand-in for github.com
// (acme/tools.git with one commit on main) and serve with the shipped
// GitHub connector, holding a push for up to approvalTimeout; it creates
// no session.
func newGitPushServe(t *testing.T, approvalTimeout string) *gitPushEnv {
	t.Helper()
	git := testkit.RequireTool(t, "git")
	root := t.TempDir()
	bare := filepath.Join(root, "acme", "tools.git")
	seed := filepath.Join(t.TempDir(), "seed")
	for _, args := range [][]string{
		{"init", "-q", "--bare", bare},
		{"-C", bare, "config", "http.receivepack", "true"},
		{"init", "-q", seed},
		{"-C", seed, "-c", "user.email=t@example.test", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "first"},
		{"-C", seed, "push", "-q", bare, "HEAD:refs/heads/main"},
		{"-C", bare, "symbolic-ref", "HEAD", "refs/heads/main"},
	} {
		if out, err := exec.Command(git, args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	execPath, err := exec.Command(git, "--exec-path").Output()
	if err != nil {
		t.Fatal(err)
	}
	backend := &cgi.Handler{Path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"),
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=x-access-token"}}
	wantAuth := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+canary))
	up := newUpstream(t, []string{"github.com"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != wantAuth {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "the proxy did not inject the credential", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
	}))

	home := t.TempDir()
	mustCLI(t, home, "", "connector", "install", "../configs/connectors/github.aileron.connector.v1.json")
	mustCLI(t, home, canary+"\n", "credential", "set", "github://acme/aileron-connector-github", "--kind", "basic", "--username", "x-access-token", "--stdin")
	d := startServe(t, home, nil, "--resolve", "github.com:443="+up.addr, "--upstream-ca", up.certFile, "--approval-timeout", approvalTimeout)
	e := &env{home: home, up: up, d: d}
	t.Cleanup(func() { e.assertNoCanary(t) })
	return &gitPushEnv{env: e, git: git, bare: bare}
}

func (g *gitPushEnv) cmd(args ...string) *exec.Cmd {
	c := exec.Command(g.git, args...)
	c.Env = g.gitEnv
	if len(args) > 0 && args[0] != "clone" {
		c.Dir = g.work
	}
	return c
}

// commitAndPush commits in the clone and starts `git push` of it to
// branch; the result arrives on the channel once git exits.
func (g *gitPushEnv) commitAndPush(t *testing.T, branch string) (string, <-chan [2]string) {
	t.Helper()
	if out, err := g.cmd("commit", "-q", "--allow-empty", "-m", "work for "+branch).CombinedOutput(); err != nil {
		t.Fatalf("git commit: %v\n%s", err, out)
	}
	id, err := g.cmd("rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan [2]string, 1)
	go func() {
		out, err := g.cmd("push", "origin", "HEAD:refs/heads/"+branch).CombinedOutput()
		ch <- [2]string{string(out), fmt.Sprint(err)}
	}()
	return strings.TrimSpace(string(id)), ch
}

// pendingPush waits for the held push and returns its approval as JSON.
func (g *gitPushEnv) pendingPush(t *testing.T) map[string]any {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var list []map[string]any
		if json.Unmarshal([]byte(mustCLI(t, g.home, "", "approvals", "list", "--json")), &list) != nil {
			continue
		}
		for _, p := range list {
			if p["state"] == "pending" && p["operation"] == "git.receive-pack" {
				return p
			}
		}
	}
	t.Fatalf("no pending git.receive-pack approval appeared\n%s", g.d.stderr.String())
	return nil
}

func (g *gitPushEnv) bareRef(ref string) string {
	out, _ := exec.Command(g.git, "-C", g.bare, "rev-parse", "--verify", "-q", ref).Output()
	return strings.TrimSpace(string(out))
}

func receivePacks(u *upstream) int {
	n := 0
	for _, r := range u.requests() {
		if strings.HasSuffix(r.Path, "/git-receive-pack") {
			n++
		}
	}
	return n
}

// TestGitPushHeldForApproval pushes with real git over smart HTTP through
// the proxy: the push waits, unread, with its ref update shown in
// `approvals list` and the console; it lands once approved, and after a
// denial git prints the refusal and the repository is unchanged.
func TestGitPushHeldForApproval(t *testing.T) {
	g := newGitPushEnv(t)

	id, done := g.commitAndPush(t, "feature")
	p := g.pendingPush(t)
	if n := receivePacks(g.up); n != 0 {
		t.Fatalf("the upstream received %d receive-pack requests before approval", n)
	}
	raw, _ := json.Marshal(p["preview"])
	var pv struct {
		GitPush struct {
			Repository string `json:"repository"`
			Count      int    `json:"count"`
			Updates    []struct{ Ref, Old, New, Action string }
		} `json:"git_push"`
		Body any `json:"body"`
	}
	if err := json.Unmarshal(raw, &pv); err != nil {
		t.Fatal(err)
	}
	gp := pv.GitPush
	if gp.Repository != "github.com/acme/tools.git" || gp.Count != 1 || len(gp.Updates) != 1 ||
		gp.Updates[0].Ref != "refs/heads/feature" || gp.Updates[0].New != id || gp.Updates[0].Action != "create" || pv.Body != nil {
		t.Fatalf("approval preview = %s, want the push of %s to refs/heads/feature of github.com/acme/tools.git", raw, id)
	}
	list := mustCLI(t, g.home, "", "approvals", "list")
	if want := "push refs/heads/feature " + id[:12] + " (create)"; !strings.Contains(list, want) {
		t.Errorf("approvals list does not show %q:\n%s", want, list)
	}
	show := mustCLI(t, g.home, "", "approvals", "show", fmt.Sprint(p["id"]))
	if want := "create refs/heads/feature: 0000000000000000000000000000000000000000 -> " + id; !strings.Contains(show, want) {
		t.Errorf("approvals show does not show %q:\n%s", want, show)
	}
	html := g.consolePage(t, "/ui/approvals")
	for _, want := range []string{`<td class="mono ref">refs/heads/feature</td>`, `<td class="mono new">` + id + `</td>`, "github.com/acme/tools.git"} {
		if !strings.Contains(html, want) {
			t.Errorf("the console's approvals page lacks %q", want)
		}
	}

	mustCLI(t, g.home, "", "approvals", "approve", fmt.Sprint(p["id"]))
	select {
	case r := <-done:
		if r[1] != "<nil>" {
			t.Fatalf("approved git push failed: %s\n%s", r[1], r[0])
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the approved push did not finish")
	}
	if got := g.bareRef("refs/heads/feature"); got != id {
		t.Fatalf("after approval the upstream's refs/heads/feature = %q, want %s", got, id)
	}
	waitAudit(t, g.home, map[string]any{"event": "approval.decided", "decision": "approved"})

	before := receivePacks(g.up)
	id2, done := g.commitAndPush(t, "second")
	mustCLI(t, g.home, "", "approvals", "deny", fmt.Sprint(g.pendingPush(t)["id"]))
	select {
	case r := <-done:
		if r[1] == "<nil>" {
			t.Fatalf("a denied push succeeded:\n%s", r[0])
		}
		for _, want := range []string{"[remote rejected]", "HEAD -> second", "needs a person's approval and it was denied"} {
			if !strings.Contains(r[0], want) {
				t.Errorf("git's output after a denial lacks %q:\n%s", want, r[0])
			}
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the denied push did not finish")
	}
	if got := g.bareRef("refs/heads/second"); got != "" || receivePacks(g.up) != before {
		t.Fatalf("a denied push reached the upstream (refs/heads/second = %q, want none; %s)", got, id2)
	}
	waitAudit(t, g.home, map[string]any{"event": "connector.proxy.denied", "reason": "approval_denied", "operation": "git.receive-pack"})
}

// consolePage signs in with the link serve logged and returns the page at
// path.
func (g *gitPushEnv) consolePage(t *testing.T, path string) string {
	t.Helper()
	var login string
	for deadline := time.Now().Add(5 * time.Second); login == ""; time.Sleep(50 * time.Millisecond) {
		login = signInLine.FindString(g.d.stderr.String())
		if time.Now().After(deadline) {
			t.Fatalf("serve logged no sign-in link")
		}
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := c.Get(login)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = c.Get(strings.TrimSuffix(g.d.APIURL, "/") + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s = %d\n%s", path, resp.StatusCode, b)
	}
	return string(b)
}
