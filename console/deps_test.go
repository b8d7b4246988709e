package console

import (
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/importcheck"
)

// TestImports enforces the console's boundary: it reads sessions (digests
// only), approvals, the policy snapshot and the audit log, and never
// reaches a package that holds secrets or talks upstream. The daemon wires
// it; the API mounts it through an interface.
func TestImports(t *testing.T) {
	importcheck.Forbid(t, ".", map[string]string{
		"github.com/aileron-dev/aileron-proxy/credentials": "secret bytes never reach the console (ARCHITECTURE.md invariant 4)",
		"github.com/aileron-dev/aileron-proxy/proxy":       "the console sends nothing upstream",
		"github.com/aileron-dev/aileron-proxy/api":         "api mounts the console, not the other way round",
		"github.com/aileron-dev/aileron-proxy/daemon":      "daemon wires the console",
		"github.com/aileron-dev/aileron-proxy/launcher":    "no container lifecycles in the console",
		"github.com/labstack/echo/":                        "plain net/http; the API's echo only mounts it",
	})
}
