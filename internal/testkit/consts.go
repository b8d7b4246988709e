package testkit

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"
)

// Const is one constant of a Go file: its name, its string value and the
// doc comment of the const block that declares it.
type Const struct {
	Name, Value, BlockDoc string
}

// StringConsts returns the constants of the Go file at path whose declared
// type is typeName and whose value is a string literal, in file order. It
// fails t when there are none, so a check built on it cannot pass
// vacuously. Tests use it to prove a list (metric labels, documented codes)
// names every constant of a kind.
func StringConsts(t testing.TB, path, typeName string) []Const {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var out []Const
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != typeName || len(vs.Values) != 1 {
				continue
			}
			lit, ok := vs.Values[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				continue
			}
			v, _ := strconv.Unquote(lit.Value)
			out = append(out, Const{Name: vs.Names[0].Name, Value: v, BlockDoc: g.Doc.Text()})
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s declares no string constants of type %s", path, typeName)
	}
	return out
}
