package actions

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/aileron-dev/aileron-proxy/policy"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// testConnectors returns the connector of testdata/connector.json.
func testConnectors(t testing.TB) []policy.Connector {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "connector.json"))
	if err != nil {
		t.Fatal(err)
	}
	spec, _, err := policy.ParseSpec(data)
	if err != nil {
		t.Fatalf("ParseSpec(testdata/connector.json): %v", err)
	}
	return []policy.Connector{{Spec: spec, Hash: "sha256:test"}}
}

// golden compares got with testdata/name, rewriting it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s (run with -update to create it): %v", path, err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs (run with -update and review the diff):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
