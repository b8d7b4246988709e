package policy_test

import (
	"fmt"
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/testkit/specs"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// scaleSnapshot compiles one synthetic GitHub-like connector with ops
// operations on api.github.example.
func scaleSnapshot(tb testing.TB, ops int) (*policy.Snapshot, policy.Scope) {
	tb.Helper()
	const fqn = "github://bench/synthetic"
	spec, _, err := policy.ParseSpec(specs.Synthetic(fqn, "gh", "api.github.example", ops))
	if err != nil {
		tb.Fatalf("parsing the %d-operation synthetic spec: %v", ops, err)
	}
	s, err := policy.Compile([]policy.Connector{{Spec: spec, Hash: "sha256:synthetic"}})
	if err != nil {
		tb.Fatalf("compiling the %d-operation synthetic spec: %v", ops, err)
	}
	return s, policy.NewScope([]string{fqn})
}

// BenchmarkDecideScale measures Decide against one connector of 5, 1,000 and
// 5,000 operations with requests every size has (the first five synthetic
// operations), so the per-request cost can be compared across sizes: it must
// not grow with the number of operations.
func BenchmarkDecideScale(b *testing.B) {
	const host = "api.github.example:443"
	cases := []struct {
		name  string
		req   policy.Request
		allow bool
	}{
		{"list", policy.Request{Method: "GET", Host: host, Path: "/repos/octo/hello/issues"}, true},
		{"get", policy.Request{Method: "GET", Host: host, Path: "/repos/octo/hello/issues/42"}, true},
		{"delete_escaped", policy.Request{Method: "DELETE", Host: host, Path: "/repos/oct%6F/hello/issues/42"}, true},
		{"deny_method", policy.Request{Method: "PUT", Host: host, Path: "/repos/octo/hello/issues/42"}, false},
	}
	for _, n := range []int{5, 1000, 5000} {
		s, sc := scaleSnapshot(b, n)
		for _, tc := range cases {
			b.Run(fmt.Sprintf("ops=%d/%s", n, tc.name), func(b *testing.B) {
				if d := s.Decide(sc, tc.req); d.Allow != tc.allow {
					b.Fatalf("Decide(%q) = %v %s, want allow %v", tc.req, d.Reason, d.Message, tc.allow)
				}
				b.ReportAllocs()
				for b.Loop() {
					s.Decide(sc, tc.req)
				}
			})
		}
	}
}

// BenchmarkCompileScale measures building a snapshot of one 1,000-operation
// connector: afresh (Compile, what a new package version costs) and through
// a Compiler that built it before (what a reload for another connector
// costs).
func BenchmarkCompileScale(b *testing.B) {
	const fqn = "github://bench/synthetic"
	spec, _, err := policy.ParseSpec(specs.Synthetic(fqn, "gh", "api.github.example", 1000))
	if err != nil {
		b.Fatal(err)
	}
	conns := []policy.Connector{{Spec: spec, Hash: "sha256:synthetic"}}
	b.Run("fresh", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := policy.Compile(conns); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reused", func(b *testing.B) {
		var c policy.Compiler
		if _, err := c.Compile(conns); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Compile(conns); err != nil {
				b.Fatal(err)
			}
		}
		if n := c.Builds(); n != 1 {
			b.Fatalf("the Compiler built the connector %d times, want once", n)
		}
	})
}
