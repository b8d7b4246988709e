package credentials

import (
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/importcheck"
)

// TestImports enforces the package boundary: credentials depends on no other
// package of this module, and on no server or logging framework beyond the
// zapcore marshaler interface.
func TestImports(t *testing.T) {
	importcheck.Forbid(t, ".", map[string]string{
		"github.com/aileron-dev/aileron-proxy/": "credentials depends on no other package of this module (ARCHITECTURE.md)",
		"go.uber.org/zap":                       "no zap logger or globals; only zapcore.ObjectMarshaler is implemented",
		"github.com/labstack/echo/":             "no servers",
		"log":                                   "no package-level logging",
	})
}
