package testkit

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const modulePath = "github.com/aileron-dev/aileron-proxy"

// archRow is one row of the package map in docs/architecture.md.
type archRow struct {
	pkg        string
	mayImport  []string // ours, relative; "*" allows any
	never      []string // direct imports
	neverDeps  []string // transitive dependencies
	lineNumber int
}

// TestArchitecture enforces docs/architecture.md on the whole module: every
// package has a row and every row a package; each package imports only the
// packages of ours its row allows, none its row forbids, and depends
// (transitively) on none its row rules out.
func TestArchitecture(t *testing.T) {
	root := filepath.Join("..", "..")
	rows := readArchTable(t, filepath.Join(root, "docs", "architecture.md"))
	pkgs := goList(t, root)
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, modulePath), "/")
		row, ok := rows[rel]
		if !ok {
			t.Errorf("package %s has no row in docs/architecture.md; add one saying what it owns and what it may import", rel)
			continue
		}
		for _, imp := range p.Imports {
			ours, isOurs := strings.CutPrefix(imp, modulePath+"/")
			if isOurs && !slices.Contains(row.mayImport, "*") && !slices.Contains(row.mayImport, ours) {
				t.Errorf("%s imports %s, which docs/architecture.md (line %d) does not allow (it may import %s); move the code, or change the map and say why", rel, ours, row.lineNumber, strings.Join(row.mayImport, ", "))
			}
			if slices.Contains(row.never, rel2(imp)) {
				t.Errorf("%s imports %s, which docs/architecture.md (line %d) forbids", rel, imp, row.lineNumber)
			}
		}
		for _, dep := range p.Deps {
			if slices.Contains(row.neverDeps, rel2(dep)) {
				t.Errorf("%s depends (transitively) on %s, which docs/architecture.md (line %d) forbids; `go list -deps` shows the path", rel, dep, row.lineNumber)
			}
		}
	}
	for rel, row := range rows {
		if !slices.ContainsFunc(pkgs, func(p listedPackage) bool { return p.ImportPath == joinModule(rel) }) {
			t.Errorf("docs/architecture.md line %d has a row for %s, which is not a package of the module; remove or rename it", row.lineNumber, rel)
		}
	}
	if len(pkgs) < 15 {
		t.Fatalf("go list found only %d packages; the check would pass vacuously", len(pkgs))
	}
}

// rel2 turns one of our import paths into the table's relative form and
// leaves others alone.
func rel2(imp string) string {
	if r, ok := strings.CutPrefix(imp, modulePath+"/"); ok {
		return r
	}
	return imp
}

func joinModule(rel string) string { return modulePath + "/" + rel }

// readArchTable parses the package map: the markdown table whose header
// starts with "| Package |".
func readArchTable(t *testing.T, path string) map[string]archRow {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the package map: %v", err)
	}
	rows := map[string]archRow{}
	inTable := false
	for i, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "| Package |") {
			inTable = true
			continue
		}
		if !inTable || strings.HasPrefix(line, "| ---") {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 5 {
			t.Fatalf("%s:%d: want 5 cells (package, owns, may import, never imports, never depends on), got %d", path, i+1, len(cells))
		}
		pkg := strings.Trim(cells[0], "`")
		if _, dup := rows[pkg]; dup {
			t.Fatalf("%s:%d: %s has two rows", path, i+1, pkg)
		}
		rows[pkg] = archRow{pkg: pkg, mayImport: archList(cells[2]), never: archList(cells[3]), neverDeps: archList(cells[4]), lineNumber: i + 1}
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no package table found", path)
	}
	return rows
}

// archList parses "`a`, `b`" (or "—") into its entries.
func archList(cell string) []string {
	var out []string
	for _, f := range strings.Split(cell, ",") {
		if f = strings.Trim(strings.TrimSpace(f), "`"); f != "" && f != "—" {
			out = append(out, f)
		}
	}
	return out
}

type listedPackage struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// goList lists the module's packages with their direct imports (non-test
// files) and transitive dependencies.
func goList(t *testing.T, root string) []listedPackage {
	t.Helper()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(goTool, "list", "-json=ImportPath,Imports,Deps", "./...")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}
