package contract

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"
)

// TestCodesUniqueAndListed fails when two codes share a value (one code,
// two meanings: the bug that split host_not_allowed) or when a proxy code
// is missing from ProxyCodes (its metric would be counted as "other").
func TestCodesUniqueAndListed(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "contract.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	byValue := map[string]string{}
	listed := map[Code]bool{}
	for _, c := range ProxyCodes {
		if listed[c] {
			t.Errorf("ProxyCodes lists %q twice", c)
		}
		listed[c] = true
	}
	n := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		proxyBlock := g.Doc != nil && (g.Doc.Text() == "Codes of responses the proxy originates.\n" || g.Doc.Text() == "Codes shared by the proxy and the API.\n")
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
				continue
			}
			v, _ := strconv.Unquote(vs.Values[0].(*ast.BasicLit).Value)
			name := vs.Names[0].Name
			n++
			if other, dup := byValue[v]; dup {
				t.Errorf("%s and %s are both %q; give each meaning its own code", other, name, v)
			}
			byValue[v] = name
			if proxyBlock && !listed[Code(v)] {
				t.Errorf("%s (%q) is a proxy code missing from ProxyCodes", name, v)
			}
		}
	}
	if n < 40 {
		t.Fatalf("found only %d codes; the parse is broken", n)
	}
}
