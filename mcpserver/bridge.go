package mcpserver

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MCPPath is the control API's MCP endpoint, relative to AILERON_API_URL.
const MCPPath = "/mcp"

// bridgePoll is how often the bridge lists the remote tools again, besides
// listing them when the remote says they changed.
const bridgePoll = 5 * time.Second

// BridgeOptions configure RunBridge.
type BridgeOptions struct {
	// APIURL is AILERON_API_URL: the control API's base URL including /v1.
	APIURL string
	// Token is the session's API token (AILERON_TOKEN).
	Token string
	// SessionID is AILERON_SESSION_ID, sent with every request when set.
	SessionID string
	// Version is the server's version in the initialize answer.
	Version string
	// HTTP carries the requests; nil means a client without a timeout.
	HTTP *http.Client
}

// bearer adds the session token to every request of the bridge.
type bearer struct {
	token, sessionID string
	next             http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	if b.sessionID != "" {
		r.Header.Set(headerSessionID, b.sessionID)
	}
	return b.next.RoundTrip(r)
}

// bridge is a local MCP server mirroring the tools of the remote one.
type bridge struct {
	local  *mcp.Server
	remote *mcp.ClientSession

	mu       sync.Mutex
	tools    map[string]string // name -> fingerprint
	progress map[string]*mcp.ServerSession
}

// RunBridge serves, over t (stdio in a sandbox), the tools of the
// session's MCP endpoint on the control API: tools/list mirrors the remote
// list, tools/call is relayed with its progress token, and cancelling a
// call cancels the remote call, which withdraws a held request. It returns
// when t closes or ctx ends.
func RunBridge(ctx context.Context, opts BridgeOptions, t mcp.Transport) error {
	if opts.APIURL == "" {
		return fmt.Errorf("AILERON_API_URL is not set; run this inside an Aileron sandbox or set it to the control API's URL ending in /v1")
	}
	if opts.Token == "" {
		return fmt.Errorf("AILERON_TOKEN is not set; set it to the session's API token")
	}
	hc := opts.HTTP
	if hc == nil {
		hc = &http.Client{}
	}
	next := hc.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	authed := *hc
	authed.Transport = bearer{token: opts.Token, sessionID: opts.SessionID, next: next}

	b := &bridge{tools: map[string]string{}, progress: map[string]*mcp.ServerSession{}}
	b.local = mcp.NewServer(&mcp.Implementation{Name: "aileron-proxy", Title: "Aileron connector operations", Version: opts.Version}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
		SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) {
			c.TTLMs = int(ListTTL / time.Millisecond)
		},
	})
	changed := make(chan struct{}, 1)
	client := mcp.NewClient(&mcp.Implementation{Name: "aileron-proxy-mcp", Version: opts.Version}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
		ProgressNotificationHandler: b.relayProgress,
	})
	endpoint := strings.TrimSuffix(opts.APIURL, "/") + MCPPath
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	remote, err := client.Connect(cctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &authed}, nil)
	cancel()
	if err != nil {
		return fmt.Errorf("connecting to the Aileron MCP endpoint %s: %w", endpoint, err)
	}
	defer remote.Close()
	b.remote = remote
	if err := b.sync(ctx); err != nil {
		return err
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		tick := time.NewTicker(bridgePoll)
		defer tick.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-tick.C:
			case <-changed:
			}
			_ = b.sync(rctx)
		}
	}()
	return b.local.Run(rctx, t)
}

// sync lists the remote tools and publishes them locally.
func (b *bridge) sync(ctx context.Context) error {
	var tools []*mcp.Tool
	for tl, err := range b.remote.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("listing the tools of the Aileron MCP endpoint: %w", err)
		}
		tools = append(tools, tl)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	next := map[string]string{}
	for _, tl := range tools {
		fp := mustJSON(tl)
		next[tl.Name] = fp
		if b.tools[tl.Name] != fp {
			b.local.AddTool(tl, b.relay(tl.Name))
		}
	}
	var gone []string
	for n := range b.tools {
		if _, ok := next[n]; !ok {
			gone = append(gone, n)
		}
	}
	if len(gone) > 0 {
		b.local.RemoveTools(gone...)
	}
	b.tools = next
	return nil
}

// relay returns the handler that relays a call of tool name.
func (b *bridge) relay(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		p := &mcp.CallToolParams{Name: name}
		if len(req.Params.Arguments) > 0 {
			p.Arguments = req.Params.Arguments
		}
		if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
			key := fmt.Sprint(tok)
			b.mu.Lock()
			b.progress[key] = req.Session
			b.mu.Unlock()
			defer func() {
				b.mu.Lock()
				delete(b.progress, key)
				b.mu.Unlock()
			}()
			if tok, ok := progressToken(tok); ok {
				p.SetProgressToken(tok)
			}
		}
		return b.remote.CallTool(ctx, p)
	}
}

// relayProgress passes a remote progress notification to the local client
// that asked for it.
func (b *bridge) relayProgress(ctx context.Context, r *mcp.ProgressNotificationClientRequest) {
	b.mu.Lock()
	ss := b.progress[fmt.Sprint(r.Params.ProgressToken)]
	b.mu.Unlock()
	if ss != nil {
		_ = ss.NotifyProgress(ctx, r.Params)
	}
}

// progressToken returns a client's progress token (decoded from JSON: a
// string or a float64) as the SDK takes it: a string or an int64. Another
// value is not passed on; the SDK panics on any other type.
func progressToken(tok any) (any, bool) {
	switch v := tok.(type) {
	case string, int, int32, int64:
		return v, true
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
			return int64(v), true
		}
	}
	return nil, false
}
