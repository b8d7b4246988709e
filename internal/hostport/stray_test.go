package hostport

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// strayAllowed lists the directories (relative to the module root) whose
// production code may still split host:port with package net, each with
// the reason. Everything else parses hosts with this package.
var strayAllowed = map[string]string{
	"launcher": "socket addresses for listeners and relays (port 0 allowed); host grammar moves here with issue 13's launcher part",
	"bench":    "the benchmark harness builds loopback socket addresses",
}

// TestNoStrayHostSplitting keeps this package the one host grammar: it
// fails when a non-test file outside strayAllowed calls net.SplitHostPort
// or net.JoinHostPort. netip.ParseAddrPort stays allowed: it parses an
// IP:PORT socket address (a resolve target, a guard endpoint), never a
// host name.
func TestNoStrayHostSplitting(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	banned := map[string]bool{"net.SplitHostPort": true, "net.JoinHostPort": true}
	fset := token.NewFileSet()
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			top, _, _ := strings.Cut(rel, "/")
			if strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata" || strayAllowed[top] != "" || rel == "internal/hostport" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && banned[id.Name+"."+sel.Sel.Name] {
				t.Errorf("%s: %s.%s outside internal/hostport; parse hosts with hostport.New and format them with hostport.Join", fset.Position(sel.Pos()), id.Name, sel.Sel.Name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d files under %s; the walk is broken", checked, root)
	}
}
