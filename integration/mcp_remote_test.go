package integration

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// mcpEverythingSpec lets three tools of the reference MCP server through:
// echo and get-sum freely, get-tiny-image after a person's approval. Its
// get-env tool (which prints the server's environment) is not one of them.
const mcpEverythingSpec = `{
  "schema_version": "aileron.connector.v1",
  "connector": {"fqn": "local://test/mcp", "version": "1.0.0"},
  "tools": [{"name": "mcp", "operations": [
    {"name": "rpc", "method": "POST", "path": "/mcp", "hosts": ["mcp.example.test"], "credential": "bearer",
     "mcp": {"tools": ["echo", "get-sum"], "approval_tools": ["get-tiny-image"]}},
    {"name": "stream", "method": "GET", "path": "/mcp", "hosts": ["mcp.example.test"], "credential": "bearer"},
    {"name": "end", "method": "DELETE", "path": "/mcp", "hosts": ["mcp.example.test"], "credential": "bearer"}
  ]}]
}`

// startMCPEverything runs @modelcontextprotocol/server-everything (npm,
// pinned in testdata/mcp-everything, installed by .ci/setup) over
// Streamable HTTP on loopback and returns its base URL.
func startMCPEverything(t *testing.T) string {
	t.Helper()
	node := testkit.RequireTool(t, "node")
	dir, err := filepath.Abs(filepath.Join("testdata", "mcp-everything"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the MCP server is not installed (CI=true: .ci/setup runs npm ci --prefix integration/testdata/mcp-everything): %v", err)
		}
		t.Skipf("the MCP server is not installed; run npm ci --prefix integration/testdata/mcp-everything: %v", err)
	}
	port := testkit.DeadAddr(t) // a free port, closed again
	_, p, _ := net.SplitHostPort(port)
	cmd := exec.Command(node, "serve.mjs")
	cmd.Dir = dir
	cmd.Env = testkit.CleanEnv("PORT=" + p)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	out := &lockedBuffer{}
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		_ = cmd.Wait()
	})
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			out.Write([]byte(sc.Text() + "\n"))
			if strings.Contains(sc.Text(), "listening on port") {
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatalf("the MCP server did not start within 30s:\n%s", out.String())
	}
	return "http://127.0.0.1:" + p
}

// mcpFront is the TLS front of the MCP server: a reverse proxy that
// streams (SSE) and records what reaches the server.
func mcpFront(t *testing.T, backend string) *upstream {
	t.Helper()
	u, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	return newUpstream(t, []string{"mcp.example.test"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rp.ServeHTTP(headerFlusher{w}, r)
	}))
}

// TestMCPServerEverythingThroughServe drives the reference MCP server from
// npm, behind a TLS front, with the official Go SDK's client through serve.
func TestMCPServerEverythingThroughServe(t *testing.T) {
	backend := startMCPEverything(t)
	home := t.TempDir()
	up := mcpFront(t, backend)
	spec := filepath.Join(t.TempDir(), "mcp.aileron.connector.v1.json")
	if err := os.WriteFile(spec, []byte(mcpEverythingSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, home, "", "connector", "install", spec)
	mustCLI(t, home, canary+"\n", "credential", "set", "local://test/mcp", "--kind", "bearer", "--stdin")
	d := startServe(t, home, nil, "--resolve", "mcp.example.test:443="+up.addr, "--upstream-ca", up.certFile)
	s := createSession(t, home)
	e := &env{home: home, up: up, d: d, s: s}
	t.Cleanup(func() { e.assertNoCanary(t) })

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(s.CAPEM))
	pu, err := url.Parse(s.ProxyURL)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}

	// 2025-11-25 asked for directly; 2026-07-28 (the SDK's default) is
	// tried first with server/discover and its Mcp-Method header, which
	// this server refuses, so the client falls back to 2025-11-25.
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			seenBefore := len(up.requests())
			c := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1.0.0"}, nil)
			cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "https://mcp.example.test/mcp", HTTPClient: client, MaxRetries: -1},
				&mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatalf("Connect through the proxy: %v\n%s", err, d.stderr.String())
			}
			defer cs.Close()
			if version == "2026-07-28" && !sawHeader(up, "Mcp-Method", "server/discover") {
				t.Errorf("the server saw no server/discover with its Mcp-Method header")
			}

			lt, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatalf("ListTools: %v", err)
			}
			var names []string
			for _, tl := range lt.Tools {
				names = append(names, tl.Name)
			}
			slices.Sort(names)
			if got := strings.Join(names, ","); got != "echo,get-sum,get-tiny-image" {
				t.Errorf("tools/list (SSE) shows %s, want echo,get-sum,get-tiny-image", got)
			}

			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hi there"}})
			if err != nil || res.IsError || len(res.Content) == 0 || res.Content[0].(*mcp.TextContent).Text != "Echo: hi there" {
				t.Fatalf("CallTool(echo) = %+v, %v", res, err)
			}
			if got := up.last(t).Header.Get("Authorization"); got != "Bearer "+canary {
				t.Errorf("the server received Authorization %q, want the injected credential", redactCanary(got))
			}

			_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "get-env", Arguments: map[string]any{}})
			if err == nil || !strings.Contains(err.Error(), `"get-env"`) {
				t.Fatalf("CallTool(get-env) error = %v, want the proxy's JSON-RPC error naming the tool", err)
			}
			for _, r := range up.requests()[seenBefore:] {
				if strings.Contains(string(r.Body), "get-env") {
					t.Fatalf("the server received %s", r.Body)
				}
			}
			waitAudit(t, home, map[string]any{"event": "connector.proxy.denied", "reason": "mcp_not_allowed"})

			done := make(chan error, 1)
			go func() {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "get-tiny-image", Arguments: map[string]any{}})
				if err == nil && (res.IsError || len(res.Content) == 0) {
					err = fmt.Errorf("unexpected result %+v", res)
				}
				done <- err
			}()
			id := pendingApproval(t, home)
			for _, r := range up.requests()[seenBefore:] {
				if strings.Contains(string(r.Body), "get-tiny-image") {
					t.Fatalf("the held call reached the server before approval")
				}
			}
			mustCLI(t, home, "", "approvals", "approve", id)
			if err := <-done; err != nil {
				t.Fatalf("approved get-tiny-image: %v", err)
			}
		})
	}
	// The audit records methods and tools, never arguments.
	for _, ev := range auditEvents(t, home) {
		if b, _ := json.Marshal(ev); strings.Contains(string(b), "hi there") {
			t.Errorf("audit event %s records a tool argument", b)
		}
	}
}

func sawHeader(up *upstream, name, value string) bool {
	for _, r := range up.requests() {
		if r.Header.Get(name) == value {
			return true
		}
	}
	return false
}

// headerFlusher sends response headers at once, as the server does: a
// reverse proxy otherwise holds them until the first body byte, which an
// idle SSE stream may not send for a while.
type headerFlusher struct{ http.ResponseWriter }

func (h headerFlusher) WriteHeader(code int) {
	h.ResponseWriter.WriteHeader(code)
	if f, ok := h.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (h headerFlusher) Flush() {
	if f, ok := h.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
