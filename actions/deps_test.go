package actions

import (
	"go/build"
	"strings"
	"testing"
)

// TestPureImports keeps the package pure, like policy: manifests are parsed
// and checked, never fetched, served or logged from here.
func TestPureImports(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil || len(pkg.Imports) == 0 {
		t.Fatalf("reading the imports of package actions: %v (%d imports)", err, len(pkg.Imports))
	}
	for _, imp := range pkg.Imports {
		switch {
		case imp == "net/http", imp == "os/exec", imp == "log", strings.HasPrefix(imp, "go.uber.org/zap"), strings.HasPrefix(imp, "github.com/labstack/"):
			t.Errorf("actions imports %q: the package has no network, programs or logging", imp)
		case strings.HasPrefix(imp, "github.com/aileron-dev/aileron-proxy/") && imp != "github.com/aileron-dev/aileron-proxy/policy":
			t.Errorf("actions imports %q: of our packages it uses only policy", imp)
		}
	}
}
