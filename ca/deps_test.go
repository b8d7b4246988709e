package ca

import (
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestForbiddenImports keeps the package pure: it issues certificates and
// nothing else.
func TestForbiddenImports(t *testing.T) {
	forbidden := map[string]string{
		"net/http":                              "the CA knows nothing about HTTP; the proxy serves its leaves",
		"net/http/httptest":                     "the CA knows nothing about HTTP",
		"os/exec":                               "the CA runs no programs",
		"log":                                   "libraries do not log through globals",
		"go.uber.org/zap":                       "the CA has nothing to log; callers log its errors",
		"github.com/labstack/echo/v4":           "the control API is the api package's job",
		"github.com/elazarl/goproxy":            "goproxy's CA is not used; leaves come from go.step.sm/crypto",
		"github.com/aileron-dev/aileron-proxy/": "ca depends on no other package of ours",
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			if path == "github.com/aileron-dev/aileron-proxy/internal/hostport" {
				continue // the one host grammar, a leaf shared by policy, ca and proxy
			}
			for bad, why := range forbidden {
				if path == bad || strings.HasSuffix(bad, "/") && strings.HasPrefix(path, bad) {
					t.Errorf("%s imports %q: %s", name, path, why)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no package files checked")
	}
}
