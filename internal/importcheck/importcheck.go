// Package importcheck enforces package boundaries from tests: each package
// lists the imports it must never have, with the reason.
package importcheck

import (
	"go/build"
	"strings"
	"testing"
)

// Forbid fails t when a non-test file of the package in dir imports a key
// of forbidden (the value says why). A key ending in "/" forbids a
// subtree; any other key forbids that exact package. A package with no
// imports fails too, so the check cannot pass vacuously.
func Forbid(t testing.TB, dir string, forbidden map[string]string) {
	t.Helper()
	pkg, err := build.ImportDir(dir, 0) // non-test files only
	if err != nil {
		t.Fatal(err)
	}
	if len(pkg.Imports) == 0 {
		t.Fatal("no imports found; the check would pass vacuously")
	}
	for _, path := range pkg.Imports {
		for key, why := range forbidden {
			if path == key || strings.HasSuffix(key, "/") && strings.HasPrefix(path, key) {
				t.Errorf("%s imports %s: %s", pkg.Name, path, why)
			}
		}
	}
}
