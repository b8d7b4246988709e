package actions

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/aileron-dev/aileron-proxy/policy"
)

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
