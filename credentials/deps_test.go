package credentials

import (
	"go/build"
	"strings"
	"testing"
)

// TestImports enforces the package boundary: credentials depends on no other
// package of this module, and on no server or logging framework beyond the
// zapcore marshaler interface. A key ending in "/" forbids a subtree; any
// other key forbids that exact package.
func TestImports(t *testing.T) {
	forbidden := map[string]string{
		"github.com/aileron-dev/aileron-proxy/": "credentials depends on no other package of this module (ARCHITECTURE.md)",
		"go.uber.org/zap":                       "no zap logger or globals; only zapcore.ObjectMarshaler is implemented",
		"github.com/labstack/echo/":             "no servers",
		"log":                                   "no package-level logging",
	}
	pkg, err := build.ImportDir(".", 0) // non-test files only
	if err != nil {
		t.Fatal(err)
	}
	if len(pkg.Imports) == 0 {
		t.Fatal("no imports found; the check would pass vacuously")
	}
	for _, path := range pkg.Imports {
		for key, why := range forbidden {
			if path == key || strings.HasSuffix(key, "/") && strings.HasPrefix(path, key) {
				t.Errorf("credentials imports %s: %s", path, why)
			}
		}
	}
}
