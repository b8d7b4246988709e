// Package specs compiles connector spec documents into policy snapshots
// for tests, failing the test on the first error, and generates large
// synthetic spec documents for scale tests and benchmarks.
package specs

import (
	"testing"

	"github.com/aileron-dev/aileron-proxy/policy"
)

// Compile parses each spec document and compiles them into one snapshot.
func Compile(t testing.TB, docs ...string) *policy.Snapshot {
	t.Helper()
	conns := make([]policy.Connector, 0, len(docs))
	for i, d := range docs {
		spec, _, err := policy.ParseSpec([]byte(d))
		if err != nil {
			t.Fatalf("parsing spec %d: %v", i, err)
		}
		conns = append(conns, policy.Connector{Spec: spec})
	}
	snap, err := policy.Compile(conns)
	if err != nil {
		t.Fatalf("compiling specs: %v", err)
	}
	return snap
}
