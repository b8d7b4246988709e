package main

import (
	"context"
	"io"
	"os/signal"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/aileron-dev/aileron-proxy/mcpserver"
)

// newMCPCmd is `aileron-proxy mcp`: the session's MCP server over stdio.
func newMCPCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "mcp (with AILERON_API_URL, AILERON_TOKEN, AILERON_SESSION_ID set)",
		Short: "Serve the session's connector operations and actions as MCP tools over stdio",
		Long: `Serve the Model Context Protocol over stdin and stdout (one JSON-RPC message
per line) for an agent in a sandbox: one tool per operation of the session's
connectors and one per action it may use. Every call goes through the control
API's MCP endpoint (/v1/mcp), so it gets the policy, credentials, approvals and
audit of the shims.

It is configured like the shims: AILERON_API_URL (the control API's URL ending
in /v1), AILERON_TOKEN (the session's API token) and AILERON_SESSION_ID. Agents
start it from their MCP configuration ("aileron-proxy sandbox init --agent");
see docs/mcp.md.`,
		Example: `  aileron-proxy mcp`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			parent := cmd.Context()
			if parent == nil {
				parent = context.Background()
			}
			ctx, stop := signal.NotifyContext(parent, syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return mcpserver.RunBridge(ctx, mcpserver.BridgeOptions{
				APIURL:    a.getenv("AILERON_API_URL"),
				Token:     a.getenv("AILERON_TOKEN"),
				SessionID: a.getenv("AILERON_SESSION_ID"),
			}, &mcp.IOTransport{Reader: io.NopCloser(a.stdin), Writer: nopWriteCloser{a.stdout}})
		},
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
