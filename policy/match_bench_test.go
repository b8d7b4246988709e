package policy

import (
	"fmt"
	"testing"
)

// benchSnapshot compiles 100 operations across 20 hosts in 4 connectors:
// per host, three exact paths and two templates.
func benchSnapshot(b *testing.B) (*Snapshot, Scope) {
	b.Helper()
	var conns []Connector
	var fqns []string
	for c := range 4 {
		fqn := fmt.Sprintf("github://bench/conn-%d", c)
		var ops []Operation
		for h := c * 5; h < c*5+5; h++ {
			host := fmt.Sprintf("api%d.example.com", h)
			ops = append(ops,
				testOp(fmt.Sprintf("h%d.user", h), "GET", "/v1/user", host),
				testOp(fmt.Sprintf("h%d.list", h), "GET", "/v1/projects/list", host),
				testOp(fmt.Sprintf("h%d.create", h), "POST", "/v1/projects", host),
				testOp(fmt.Sprintf("h%d.issues", h), "GET", "/v1/repos/{owner}/{repo}/issues", host),
				testOp(fmt.Sprintf("h%d.issue", h), "PATCH", "/v1/repos/{owner}/{repo}/issues/{number}", host),
			)
		}
		conns = append(conns, Connector{Spec: &Spec{Connector: ConnectorMeta{FQN: fqn}, Tools: []Tool{{Name: fmt.Sprintf("t%d", c), Operations: ops}}}})
		fqns = append(fqns, fqn)
	}
	s, err := Compile(conns)
	if err != nil {
		b.Fatal(err)
	}
	if got := len(s.Hosts(NewScope(fqns))); got != 20 {
		b.Fatalf("bench snapshot has %d hosts, want 20", got)
	}
	return s, NewScope(fqns)
}

func BenchmarkDecide(b *testing.B) {
	s, sc := benchSnapshot(b)
	cases := []struct {
		name  string
		req   Request
		allow bool
	}{
		{"exact", Request{"GET", "api17.example.com:443", "/v1/projects/list"}, true},
		{"exact_escaped", Request{"GET", "api17.example.com:443", "/v1/projects/l%69st"}, true},
		{"template", Request{"GET", "api17.example.com:443", "/v1/repos/acme/widgets/issues"}, true},
		{"template_3_params", Request{"PATCH", "api17.example.com:443", "/v1/repos/acme/widgets/issues/42"}, true},
		{"host_not_canonical", Request{"GET", "API17.example.com", "/v1/projects/list"}, true},
		{"deny_operation", Request{"GET", "api17.example.com:443", "/v1/repos/acme/widgets/pulls"}, false},
		{"deny_traversal", Request{"GET", "api17.example.com:443", "/v1/repos/acme/../../admin"}, false},
		{"deny_host", Request{"GET", "evil.example.com:443", "/v1/user"}, false},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
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
