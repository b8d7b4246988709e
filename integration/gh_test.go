package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// githubGraphQLSpec allows the GraphQL operations gh needs for `gh api
// graphql -f query='{viewer{login}}'`, `gh issue list` and (with a
// person's approval) `gh issue create`, and nothing else.
const githubGraphQLSpec = `{
  "schema_version": "aileron.connector.v1",
  "connector": {"fqn": "local://test/github", "version": "1.0.0"},
  "tools": [{"name": "github-graphql", "operations": [
    {"name": "viewer", "method": "POST", "path": "/graphql", "hosts": ["api.github.com"], "credential": "bearer",
     "graphql": {"type": "query", "fields": ["viewer"]}},
    {"name": "repository", "method": "POST", "path": "/graphql", "hosts": ["api.github.com"], "credential": "bearer",
     "graphql": {"type": "query", "fields": ["repository"]}},
    {"name": "issue.create", "method": "POST", "path": "/graphql", "hosts": ["api.github.com"], "credential": "bearer",
     "approval": "required", "graphql": {"type": "mutation", "fields": ["createIssue"]}}
  ]}]
}`

// githubStandIn answers GraphQL as api.github.com would, for the fields
// gh asks about: it parses each query and answers by its top-level fields.
func githubStandIn(t *testing.T) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path != "/graphql" {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"message":"Not Found"}`)
			return
		}
		var req struct {
			Query string `json:"query"`
		}
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &req); err != nil {
			t.Errorf("the stand-in got a body that is not a GraphQL request: %q", body)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		doc, err := parser.ParseQuery(&ast.Source{Input: req.Query})
		if err != nil || len(doc.Operations) == 0 {
			t.Errorf("the stand-in got a query that does not parse: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		data := map[string]any{}
		for _, sel := range doc.Operations[0].SelectionSet {
			f, ok := sel.(*ast.Field)
			if !ok {
				continue
			}
			switch f.Name {
			case "viewer":
				data[f.Alias] = map[string]any{"login": "octocat", "id": "U_1"}
			case "repository":
				data[f.Alias] = map[string]any{
					"id": "R_1", "name": "hello", "owner": map[string]any{"login": "octo"}, "hasIssuesEnabled": true,
					"viewerPermission": "ADMIN", "defaultBranchRef": map[string]any{"name": "main"},
					"issues": map[string]any{"totalCount": 1, "nodes": []any{map[string]any{
						"number": 1, "title": "First issue", "state": "OPEN", "url": "https://github.com/octo/hello/issues/1",
						"labels": map[string]any{"nodes": []any{}, "totalCount": 0}, "updatedAt": "2026-01-01T00:00:00Z", "createdAt": "2026-01-01T00:00:00Z",
					}}, "pageInfo": map[string]any{"hasNextPage": false, "endCursor": ""}},
				}
			case "createIssue":
				data[f.Alias] = map[string]any{"issue": map[string]any{"id": "I_2", "number": 2, "url": "https://github.com/octo/hello/issues/2"}}
			default:
				data[f.Alias] = nil
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
	})
}

// TestGHThroughServe runs Debian's gh on the host with HTTPS_PROXY and the
// session CA against a stand-in for api.github.com: the operations above
// let its GraphQL calls through with the real token injected, hold the
// mutation of `gh issue create`, and refuse a deleteRepository mutation.
func TestGHThroughServe(t *testing.T) {
	gh := testkit.RequireTool(t, "gh")
	home := t.TempDir()
	up := newUpstream(t, []string{"api.github.com"}, githubStandIn(t))
	spec := filepath.Join(t.TempDir(), "github.aileron.connector.v1.json")
	if err := os.WriteFile(spec, []byte(githubGraphQLSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, home, "", "connector", "install", spec)
	mustCLI(t, home, canary+"\n", "credential", "set", "local://test/github", "--kind", "bearer", "--stdin")
	d := startServe(t, home, nil, "--resolve", "api.github.com:443="+up.addr, "--upstream-ca", up.certFile)
	s := createSession(t, home)
	e := &env{home: home, up: up, d: d, s: s}
	t.Cleanup(func() { e.assertNoCanary(t) })

	const placeholder = "gho_placeholder0000000000000000000000000"
	run := func(args ...string) (string, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, gh, args...)
		cmd.Env = testkit.CleanEnv("HTTPS_PROXY="+s.ProxyURL, "SSL_CERT_FILE="+s.CAFile, "GH_TOKEN="+placeholder,
			"GH_CONFIG_DIR="+t.TempDir(), "GH_NO_UPDATE_NOTIFIER=1", "GH_PROMPT_DISABLED=1", "NO_COLOR=1", "GH_PAGER=cat")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	allowedCalls := func(from int) {
		t.Helper()
		for _, r := range up.requests()[from:] {
			if got := r.Header.Get("Authorization"); got != "Bearer "+canary {
				t.Errorf("the stand-in got Authorization %q on %s %s, want the injected token", redactCanary(got), r.Method, r.Path)
			}
			if strings.Contains(string(r.Body), "deleteRepository") {
				t.Errorf("the stand-in received the refused mutation")
			}
		}
	}

	out, errOut, err := run("api", "graphql", "-f", "query={viewer{login}}")
	if err != nil || !strings.Contains(out, `"octocat"`) {
		t.Fatalf("gh api graphql {viewer{login}}: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}
	allowedCalls(0)
	waitAudit(t, home, map[string]any{"event": "connector.proxy.proxied", "operation": "viewer"})

	n := len(up.requests())
	out, errOut, err = run("issue", "list", "-R", "octo/hello")
	if err != nil || !strings.Contains(out, "First issue") {
		t.Fatalf("gh issue list: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}
	allowedCalls(n)

	n = len(up.requests())
	out, errOut, err = run("api", "graphql", "-f", `query=mutation{deleteRepository(input:{repositoryId:"R_1"}){clientMutationId}}`)
	if err == nil || !strings.Contains(out+errOut, "deleteRepository") {
		t.Fatalf("gh api graphql deleteRepository succeeded or said nothing of the field: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}
	if len(up.requests()) != n {
		t.Fatalf("the refused mutation reached the stand-in")
	}
	waitAudit(t, home, map[string]any{"event": "connector.proxy.denied", "reason": "graphql_not_allowed"})

	type result struct {
		out, errOut string
		err         error
	}
	done := make(chan result, 1)
	go func() {
		o, eo, err := run("issue", "create", "-R", "octo/hello", "--title", "Held title", "--body", "Held body")
		done <- result{o, eo, err}
	}()
	id := pendingApproval(t, home)
	for _, r := range up.requests() {
		if strings.Contains(string(r.Body), "createIssue") {
			t.Fatalf("the held mutation reached the stand-in before approval")
		}
	}
	mustCLI(t, home, "", "approvals", "approve", id)
	res := <-done
	if res.err != nil || !strings.Contains(res.out, "issues/2") {
		t.Fatalf("gh issue create after approval: %v\nstdout: %s\nstderr: %s", res.err, res.out, res.errOut)
	}
	allowedCalls(0)
	for _, r := range up.requests() {
		if strings.Contains(r.Header.Get("Authorization"), placeholder) {
			t.Errorf("the stand-in saw gh's placeholder token")
		}
	}
}

// ghSandboxScript runs Debian's gh (copied into the workspace) inside the
// sandbox with a placeholder token: HTTPS_PROXY and the session CA in the
// system store come from launch.
const ghSandboxScript = `check() { if [ "$2" = 0 ]; then echo "ok $1"; else echo "FAIL $1: $3"; fi; }
export GH_TOKEN=gho_placeholder0000000000000000000000000 GH_CONFIG_DIR=/tmp/ghcfg GH_NO_UPDATE_NOTIFIER=1 GH_PROMPT_DISABLED=1 NO_COLOR=1 GH_PAGER=cat
gh=/home/agent/workspace/gh
out=$($gh api graphql -f query='{viewer{login}}' 2>&1)
case $out in *octocat*) r=0 ;; *) r=1 ;; esac; check viewer $r "$out"
out=$($gh issue list -R octo/hello 2>&1)
case $out in *"First issue"*) r=0 ;; *) r=1 ;; esac; check list $r "$out"
if out=$($gh api graphql -f query='mutation{deleteRepository(input:{repositoryId:"R_1"}){clientMutationId}}' 2>&1); then r=1; else
  case $out in *graphql_not_allowed*deleteRepository*) r=0 ;; *) r=1 ;; esac; fi; check delete-refused $r "$out"
out=$($gh issue create -R octo/hello --title "Held title" --body "Held body" 2>&1)
case $out in *issues/2*) r=0 ;; *) r=1 ;; esac; check create $r "$out"
echo done
`

// TestGHInSandbox runs the same gh commands inside a real sandbox
// (launch --sandbox=docker): the agent's gh reaches the stand-in for
// api.github.com only through the proxy.
func TestGHInSandbox(t *testing.T) {
	ghPath := testkit.RequireTool(t, "gh")
	requireRuntime(t, "docker")
	home := t.TempDir()
	up := newUpstream(t, []string{"api.github.com"}, githubStandIn(t))
	spec := filepath.Join(t.TempDir(), "github.aileron.connector.v1.json")
	if err := os.WriteFile(spec, []byte(githubGraphQLSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, home, "", "connector", "install", spec)
	mustCLI(t, home, canary+"\n", "credential", "set", "local://test/github", "--kind", "bearer", "--stdin")
	d := startServe(t, home, nil, "--resolve", "api.github.com:443="+up.addr, "--upstream-ca", up.certFile)
	e := &env{home: home, up: up, d: d}
	t.Cleanup(func() { e.assertNoCanary(t) })
	t.Cleanup(func() { removeSandboxes(t, "docker", home) })
	project := agentWorkspace(t)
	bin, err := os.ReadFile(ghPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(project, "gh"), bin, 0o755); err != nil {
		t.Fatal(err)
	}

	type result struct {
		out, errOut string
		code        int
	}
	done := make(chan result, 1)
	go func() {
		o, eo, c := launchCLI(t, home, nil, 8*time.Minute, "launch", "--sandbox=docker", "--project", project, "--", "sh", "-c", ghSandboxScript)
		done <- result{o, eo, c}
	}()
	var res result
	select {
	case id := <-pendingApprovalAsync(t, home, 8*time.Minute):
		for _, r := range up.requests() {
			if strings.Contains(string(r.Body), "createIssue") {
				t.Fatalf("the held mutation reached the stand-in before approval")
			}
		}
		mustCLI(t, home, "", "approvals", "approve", id)
		res = <-done
	case res = <-done:
	}
	for _, want := range []string{"viewer", "list", "delete-refused", "create"} {
		if !strings.Contains(res.out, "ok "+want+"\n") {
			t.Errorf("check %s did not pass", want)
		}
	}
	if strings.Contains(res.out, "FAIL") || !strings.Contains(res.out, "done\n") || t.Failed() {
		t.Fatalf("launch exit %d; sandbox output:\n%s\nlaunch stderr:\n%s", res.code, redactCanary(res.out), redactCanary(res.errOut))
	}
	for _, r := range up.requests() {
		if got := r.Header.Get("Authorization"); got != "Bearer "+canary {
			t.Errorf("the stand-in got Authorization %q, want the injected token", redactCanary(got))
		}
		if strings.Contains(string(r.Body), "deleteRepository") {
			t.Errorf("the stand-in received the refused mutation")
		}
	}
	waitAudit(t, home, map[string]any{"event": "connector.proxy.denied", "reason": "graphql_not_allowed"})
}

// pendingApprovalAsync polls for a pending approval in the background; the
// channel gets its id, or nothing before limit.
func pendingApprovalAsync(t *testing.T, home string, limit time.Duration) <-chan string {
	ch := make(chan string, 1)
	go func() {
		deadline := time.Now().Add(limit)
		for time.Now().Before(deadline) {
			out, _, code := cli(t, home, "", "approvals", "list", "--json")
			var list []map[string]any
			if code == 0 && json.Unmarshal([]byte(out), &list) == nil {
				for _, p := range list {
					if p["state"] == "pending" {
						ch <- fmt.Sprint(p["id"])
						return
					}
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	return ch
}
