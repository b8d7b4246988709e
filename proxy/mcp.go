package proxy

import (
	"net/http"

	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// mcpExchange is what an allowed MCP request needs to filter its answer.
type mcpExchange struct{}

func (s *Server) inspectMCP(x *exchange, in *policy.Inspection, data []byte) (*policy.Match, inspected, *decision) {
	return nil, inspected{}, inspectRefusal(in, http.StatusForbidden, contract.CodeMCPNotAllowed, "MCP inspection is not built yet")
}
