package api

import (
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aileron-dev/aileron-proxy/actions"
	"github.com/aileron-dev/aileron-proxy/approval"
	"github.com/aileron-dev/aileron-proxy/mcpserver"
	"github.com/aileron-dev/aileron-proxy/policy"
	"github.com/aileron-dev/aileron-proxy/session"
)

// MCPConfig tunes the session MCP servers of /v1/mcp.
type MCPConfig struct {
	// Poll is how often a session's MCP server looks for a changed catalog
	// (installed connectors or actions) to announce; zero means 2 s.
	Poll time.Duration
	// ProgressInterval is how often a waiting call reports progress; zero
	// means mcpserver.DefaultProgressInterval.
	ProgressInterval time.Duration
	// MaxText caps the text of a non-JSON body in a tool result; zero
	// means mcpserver.DefaultMaxText.
	MaxText int
}

func (c MCPConfig) withDefaults() MCPConfig {
	if c.Poll <= 0 {
		c.Poll = 2 * time.Second
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = mcpserver.DefaultProgressInterval
	}
	if c.MaxText <= 0 {
		c.MaxText = mcpserver.DefaultMaxText
	}
	return c
}

// MCPPath is the Streamable HTTP endpoint of the session's MCP server.
const MCPPath = "/v1/mcp"

// mcpRoutes serve the MCP Streamable HTTP transport: POST for messages,
// GET for the server's stream, DELETE to end the MCP session.
func (s *Server) mcpRoutes() []route {
	return []route{
		{http.MethodPost, MCPPath, authSession, s.serveMCP, 0},
		{http.MethodGet, MCPPath, authSession, s.serveMCP, 0},
		{http.MethodDelete, MCPPath, authSession, s.serveMCP, 0},
	}
}

// mcpSession is the MCP server of one Aileron session. Each session has
// its own Streamable HTTP handler, so an MCP session id is only ever
// reachable with the token of the session that opened it.
type mcpSession struct {
	srv     *mcpserver.Server
	handler *mcp.StreamableHTTPHandler
	stop    chan struct{}

	mu       sync.Mutex
	lastSnap *policy.Snapshot
	lastActs string
}

// mcpSessions holds the MCP servers by session id.
type mcpSessions struct {
	mu sync.Mutex
	m  map[string]*mcpSession
}

func (s *Server) serveMCP(c echo.Context) error {
	sess := sessionFrom(c)
	ms := s.mcpFor(sess)
	ms.sync(s, sess)
	ms.handler.ServeHTTP(c.Response(), c.Request())
	return nil
}

// mcpFor returns the MCP server of sess, creating it on first use.
func (s *Server) mcpFor(sess *session.Session) *mcpSession {
	s.mcp.mu.Lock()
	defer s.mcp.mu.Unlock()
	if s.mcp.m == nil {
		s.mcp.m = map[string]*mcpSession{}
	}
	if ms, ok := s.mcp.m[sess.ID]; ok {
		return ms
	}
	srv := mcpserver.New(mcpserver.Options{
		// Calls go to this API's own run endpoint in process, with the
		// token the MCP request carried: the same authentication, policy,
		// approvals and audit as a shim's call.
		APIURL:           "http://127.0.0.1/v1",
		HTTP:             &http.Client{Transport: inProcess{h: s.e}},
		SessionID:        sess.ID,
		ProgressInterval: s.cfg.MCP.ProgressInterval,
		MaxText:          s.cfg.MCP.MaxText,
		Held: func() []string {
			var held []string
			for _, p := range s.cfg.Approvals.List(approval.StatePending) {
				if p.SessionID == sess.ID {
					held = append(held, p.HeldLine())
				}
			}
			return held
		},
		Token: func(req *mcp.CallToolRequest) string {
			if req.Extra == nil {
				return ""
			}
			tok, _ := strings.CutPrefix(req.Extra.Header.Get("Authorization"), "Bearer ")
			return strings.TrimSpace(tok)
		},
	})
	ms := &mcpSession{
		srv: srv,
		// The SDK's DNS-rebinding guard refuses a non-loopback Host on a
		// loopback listener, which is every sandbox's request: the API relay
		// on the network's gateway forwards it. The guard is not needed here:
		// each request was authenticated with the session's bearer token
		// before it reached this handler, which a rebound page never holds.
		handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv.MCP() },
			&mcp.StreamableHTTPOptions{DisableLocalhostProtection: true}),
		stop: make(chan struct{}),
	}
	s.mcp.m[sess.ID] = ms
	go ms.watch(s, sess)
	return ms
}

// watch publishes a changed catalog until the session ends.
func (ms *mcpSession) watch(s *Server, sess *session.Session) {
	t := time.NewTicker(s.cfg.MCP.Poll)
	defer t.Stop()
	for {
		select {
		case <-ms.stop:
			return
		case <-t.C:
			ms.sync(s, sess)
		}
	}
}

// sync rebuilds the catalog when the snapshot or the actions changed.
func (ms *mcpSession) sync(s *Server, sess *session.Session) {
	snap := s.cfg.Policy()
	var acts []actions.Installed
	if s.cfg.Actions != nil {
		for _, a := range s.cfg.Actions() {
			acts = append(acts, a)
		}
	}
	sort.Slice(acts, func(i, j int) bool { return acts[i].Action.Name < acts[j].Action.Name })
	var key strings.Builder
	for _, a := range acts {
		key.WriteString(a.Hash + "\x00")
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if snap == ms.lastSnap && key.String() == ms.lastActs {
		return
	}
	ms.lastSnap, ms.lastActs = snap, key.String()
	ms.srv.Sync(mcpserver.Catalog(snap, sess.Scope, acts))
}

// endMCP drops the MCP server of session id.
func (s *Server) endMCP(id string) {
	s.mcp.mu.Lock()
	ms, ok := s.mcp.m[id]
	delete(s.mcp.m, id)
	s.mcp.mu.Unlock()
	if !ok {
		return
	}
	close(ms.stop)
	for ss := range ms.srv.MCP().Sessions() {
		_ = ss.Close()
	}
}

// inProcess is a RoundTripper that serves a request with the API's own
// handler, so an MCP tool call is exactly a call of the run endpoint.
type inProcess struct{ h http.Handler }

func (t inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	r = r.Clone(r.Context())
	r.RequestURI = r.URL.RequestURI()
	r.RemoteAddr = "127.0.0.1:0"
	t.h.ServeHTTP(rec, r)
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	return rec.Result(), nil
}
