package policy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// linearDecide is the matcher Decide replaced, kept as the reference: scan
// every in-scope operation of the host and method; exact (all-literal)
// matches beat templates, a template whose first differing segment is more
// specific beats the others, and more than one left means ambiguous. It
// returns the names ("fqn tool operation") of the winning operations.
func linearDecide(conns []Connector, sc Scope, r Request) []string {
	var exact, tmpl []string
	var shapes [][]int
	for _, c := range conns {
		if !sc.has(c.Spec.Connector.FQN) {
			continue
		}
		for _, t := range c.Spec.Tools {
			for _, op := range t.Operations {
				if op.Method != r.Method || !slices.Contains(op.Hosts, r.Host) {
					continue
				}
				if _, ok := referenceMatch(op.Path, r.Path); !ok {
					continue
				}
				name := c.Spec.Connector.FQN + " " + t.Name + " " + op.Name
				if !strings.Contains(op.Path, "{") {
					exact = append(exact, name)
					continue
				}
				tmpl = append(tmpl, name)
				var shape []int
				for _, seg := range strings.Split(op.Path[1:], "/") {
					switch {
					case !strings.HasPrefix(seg, "{"):
						shape = append(shape, 0)
					case strings.Contains(seg, "}:"):
						shape = append(shape, 1)
					default:
						shape = append(shape, 2)
					}
				}
				shapes = append(shapes, shape)
			}
		}
	}
	if len(exact) > 0 {
		slices.Sort(exact)
		return exact
	}
	var best []string
	var bestShape []int
	for i, name := range tmpl {
		switch c := slices.Compare(shapes[i], bestShape); {
		case best == nil || c < 0:
			best, bestShape = []string{name}, shapes[i]
		case c == 0:
			best = append(best, name)
		}
	}
	slices.Sort(best)
	return best
}

// TestDecideMatchesLinearScan compares Decide, over random overlapping
// templates in two connectors, with linearDecide: the trie must pick the
// same operation, and refuse as ambiguous exactly when the scan finds more
// than one.
func TestDecideMatchesLinearScan(t *testing.T) {
	const host = "api.example.com:443"
	tmplSegs := []string{"a", "b", "a%20b", "{p}", "{q}", "{m}:run", "{n}:stop"}
	reqSegs := []string{"a", "b", "a%20b", "a b", "x", "x:run", "x%3Arun", "y:stop", ":run"}
	methods := []string{"GET", "POST"}
	rng := rand.New(rand.NewPCG(1, 2))
	fqns := []string{"local://t/one", "local://t/two"}
	randPath := func(segs []string) string {
		var b strings.Builder
		for range 1 + rng.IntN(3) {
			b.WriteString("/" + segs[rng.IntN(len(segs))])
		}
		if rng.IntN(8) == 0 {
			b.WriteString("/")
		}
		return b.String()
	}
	allowed, ambiguous := 0, 0
	for round := range 300 {
		var conns []Connector
		for ci, fqn := range fqns {
			var ops []Operation
			for oi := range 1 + rng.IntN(12) {
				ops = append(ops, testOp(fmt.Sprintf("op%d", oi), methods[rng.IntN(2)], randPath(tmplSegs), host))
			}
			conns = append(conns, Connector{Spec: &Spec{Connector: ConnectorMeta{FQN: fqn}, Tools: []Tool{{Name: fmt.Sprintf("t%d", ci), Operations: ops}}}})
		}
		s, err := Compile(conns)
		if err != nil {
			t.Fatalf("round %d: Compile: %v", round, err)
		}
		for _, sc := range []Scope{NewScope(fqns), NewScope(fqns[:1])} {
			for range 40 {
				r := Request{Method: methods[rng.IntN(2)], Host: host, Path: randPath(reqSegs)}
				if strings.Contains(r.Path, " ") {
					continue // not canonical: refused before matching
				}
				want := linearDecide(conns, sc, r)
				d := s.Decide(sc, r)
				switch {
				case len(want) == 1:
					m := d.Match
					if !d.Allow || m.ConnectorFQN+" "+m.Tool+" "+m.Compiled.Operation().Name != want[0] {
						t.Fatalf("round %d: Decide(%q) = %v %v, linear scan allows %s", round, r, d.Reason, d.Message, want[0])
					}
					checkAllowed(t, sc, r, d)
					allowed++
				case len(want) > 1:
					if d.Allow || d.Reason != ReasonAmbiguous {
						t.Fatalf("round %d: Decide(%q) = %v, linear scan finds it ambiguous: %q", round, r, d.Reason, want)
					}
					ambiguous++
				default:
					if d.Allow || d.Reason != ReasonOperationNotAllowed && d.Reason != ReasonHostNotAllowed {
						t.Fatalf("round %d: Decide(%q) = %v, linear scan finds no operation", round, r, d.Reason)
					}
				}
			}
		}
	}
	if allowed < 100 || ambiguous < 20 {
		t.Fatalf("the random cases allowed %d and found %d ambiguous; widen them so both paths are exercised", allowed, ambiguous)
	}
	t.Logf("%d allowed, %d ambiguous", allowed, ambiguous)
}
