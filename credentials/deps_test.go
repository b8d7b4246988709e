package credentials

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports enforces the package boundary: credentials depends on no other
// package of this module, and on no server or logging framework beyond the
// zapcore marshaler interface.
func TestImports(t *testing.T) {
	forbidden := map[string]string{
		"github.com/aileron-dev/aileron-proxy/": "credentials depends on no other package of this module (ARCHITECTURE.md)",
		"go.uber.org/zap\x00":                   "no zap logger or globals; only zapcore.ObjectMarshaler is implemented",
		"github.com/labstack/echo":              "no servers",
		"log\x00":                               "no package-level logging",
	}
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for prefix, why := range forbidden {
				exact := strings.HasSuffix(prefix, "\x00")
				p := strings.TrimSuffix(prefix, "\x00")
				if (exact && path == p) || (!exact && strings.HasPrefix(path, p)) {
					t.Errorf("%s imports %s: %s", f, path, why)
				}
			}
		}
	}
}
