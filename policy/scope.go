package policy

import (
	"fmt"
	"sort"
	"strings"
)

// Scope is the set of connectors a session may use, named by FQN. Only the
// operations of connectors in the scope count for Decide, Hosts, Intercepts
// and Lookup.
//
// The zero Scope allows nothing. A Scope is immutable once built and safe to
// share between goroutines.
type Scope struct {
	// fqns is never mutated after NewScope; nil means the empty scope.
	fqns map[string]struct{}
}

// NewScope returns the scope holding the given connector FQNs. FQNs are
// compared exactly (they are normalized by ParseSpec); empty strings and
// duplicates are ignored. An empty list gives the zero Scope, which allows
// nothing.
func NewScope(fqns []string) Scope {
	set := make(map[string]struct{}, len(fqns))
	for _, f := range fqns {
		if f != "" {
			set[f] = struct{}{}
		}
	}
	if len(set) == 0 {
		return Scope{}
	}
	return Scope{fqns: set}
}

// FQNs returns the connector FQNs in the scope, sorted; nil for the zero Scope.
func (sc Scope) FQNs() []string {
	if len(sc.fqns) == 0 {
		return nil
	}
	out := make([]string, 0, len(sc.fqns))
	for f := range sc.fqns {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// has reports whether the connector fqn is in the scope.
func (sc Scope) has(fqn string) bool {
	_, ok := sc.fqns[fqn]
	return ok
}

// isEmpty reports whether the scope allows nothing.
func (sc Scope) isEmpty() bool { return len(sc.fqns) == 0 }

// Lookup returns the operation op of tool in the connector fqn, which must be
// in sc. The Match has no PathParams. The error wraps ErrUnknownConnector,
// ErrUnknownTool or ErrUnknownOperation and lists what is available instead.
// The operation may not be proxyable (see Operation.IsProxyable).
func (s *Snapshot) Lookup(sc Scope, fqn, tool, op string) (*Match, error) {
	var i int
	ok := false
	if s != nil && sc.has(fqn) {
		i, ok = s.byFQN[fqn]
	}
	if !ok {
		var avail []string
		for _, f := range sc.FQNs() {
			if _, installed := s.Connector(f); installed {
				avail = append(avail, f)
			}
		}
		why := "it is not in this session"
		if _, installed := s.Connector(fqn); !installed {
			why = "it is not installed"
		}
		list := "this session has no connectors"
		if len(avail) > 0 {
			list = "this session's connectors are " + strings.Join(avail, ", ")
		}
		return nil, fmt.Errorf("looking up operation %q of tool %q in connector %q: %w: %s; %s", op, tool, fqn, ErrUnknownConnector, why, list)
	}
	c := s.conns[i]
	var names []string
	for ti := range c.Spec.Tools {
		t := &c.Spec.Tools[ti]
		if t.Name != tool {
			names = append(names, t.Name)
			continue
		}
		var ops []string
		for oi := range t.Operations {
			if t.Operations[oi].Name == op {
				return &Match{ConnectorFQN: fqn, ConnectorHash: c.Hash, Tool: tool, Operation: &t.Operations[oi], Compiled: &s.ops[i][ti][oi]}, nil
			}
			ops = append(ops, t.Operations[oi].Name)
		}
		sort.Strings(ops)
		return nil, fmt.Errorf("looking up operation %q of tool %q in connector %q: %w %q: tool %s offers %s", op, tool, fqn, ErrUnknownOperation, op, tool, strings.Join(ops, ", "))
	}
	sort.Strings(names)
	return nil, fmt.Errorf("looking up operation %q of tool %q in connector %q: %w %q: the connector's tools are %s", op, tool, fqn, ErrUnknownTool, tool, strings.Join(names, ", "))
}
