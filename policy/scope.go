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
// in sc. The Match has no PathParams. The error is a *LookupError, which
// wraps ErrUnknownConnector, ErrUnknownTool or ErrUnknownOperation and
// carries what is available instead. The operation may not be proxyable (see
// Operation.IsProxyable).
func (s *Snapshot) Lookup(sc Scope, fqn, tool, op string) (*Match, error) {
	var i int
	ok := false
	if s != nil && sc.has(fqn) {
		i, ok = s.byFQN[fqn]
	}
	if !ok {
		avail := []string{}
		for _, f := range sc.FQNs() {
			if _, installed := s.Connector(f); installed {
				avail = append(avail, f)
			}
		}
		_, installed := s.Connector(fqn)
		return nil, &LookupError{Kind: LookupConnector, FQN: fqn, Tool: tool, Operation: op, Installed: installed, Allowed: avail}
	}
	cc := s.conns[i]
	if co, ok := cc.lookup(tool, op); ok {
		return &Match{ConnectorFQN: fqn, ConnectorHash: cc.conn.Hash, Tool: tool, Compiled: co}, nil
	}
	names := []string{}
	for ti := range cc.conn.Spec.Tools {
		t := &cc.conn.Spec.Tools[ti]
		if t.Name != tool {
			names = append(names, t.Name)
			continue
		}
		ops := []string{}
		for oi := range t.Operations {
			ops = append(ops, t.Operations[oi].Name)
		}
		sort.Strings(ops)
		return nil, &LookupError{Kind: LookupOperation, FQN: fqn, Tool: tool, Operation: op, Installed: true, Allowed: ops}
	}
	sort.Strings(names)
	return nil, &LookupError{Kind: LookupTool, FQN: fqn, Tool: tool, Operation: op, Installed: true, Allowed: names}
}

// LookupKind is the level at which Lookup found nothing. The zero value is
// unspecified and never comes from Lookup.
type LookupKind uint8

// Lookup kinds.
const (
	LookupUnspecified LookupKind = iota
	// LookupConnector: the connector is not installed or not in the scope.
	LookupConnector
	// LookupTool: the connector has no such tool.
	LookupTool
	// LookupOperation: the tool has no such operation.
	LookupOperation
)

// String returns "connector", "tool" or "operation"; "unspecified" for the
// zero value.
func (k LookupKind) String() string {
	switch k {
	case LookupConnector:
		return "connector"
	case LookupTool:
		return "tool"
	case LookupOperation:
		return "operation"
	}
	return "unspecified"
}

// LookupError is why Lookup found no operation, as data: callers phrase
// their own message from it instead of walking the spec again. Test for it
// with errors.As, or for its kind with errors.Is and ErrUnknownConnector,
// ErrUnknownTool or ErrUnknownOperation.
type LookupError struct {
	// Kind is the level that has no match.
	Kind LookupKind
	// FQN, Tool and Operation are what was looked up, as given.
	FQN, Tool, Operation string
	// Installed reports, for LookupConnector, whether the connector is
	// installed (so it is only outside the scope); true for the other kinds.
	Installed bool
	// Allowed lists what the scope offers instead at the level of Kind,
	// sorted and never nil: the scope's installed connectors, the
	// connector's other tools, or the tool's operations.
	Allowed []string
}

// Name returns the name that was not found: the FQN, the tool or the
// operation, after Kind.
func (e *LookupError) Name() string {
	switch e.Kind {
	case LookupConnector:
		return e.FQN
	case LookupTool:
		return e.Tool
	}
	return e.Operation
}

// Error says what was not found and lists what is available instead.
func (e *LookupError) Error() string {
	prefix := fmt.Sprintf("looking up operation %q of tool %q in connector %q: ", e.Operation, e.Tool, e.FQN)
	switch e.Kind {
	case LookupConnector:
		why := "it is not in this session"
		if !e.Installed {
			why = "it is not installed"
		}
		list := "this session has no connectors"
		if len(e.Allowed) > 0 {
			list = "this session's connectors are " + strings.Join(e.Allowed, ", ")
		}
		return fmt.Sprintf("%s%s: %s; %s", prefix, ErrUnknownConnector, why, list)
	case LookupTool:
		return fmt.Sprintf("%s%s %q: the connector's tools are %s", prefix, ErrUnknownTool, e.Tool, strings.Join(e.Allowed, ", "))
	}
	return fmt.Sprintf("%s%s %q: tool %s offers %s", prefix, ErrUnknownOperation, e.Operation, e.Tool, strings.Join(e.Allowed, ", "))
}

// Unwrap returns the sentinel of the kind: ErrUnknownConnector,
// ErrUnknownTool or ErrUnknownOperation.
func (e *LookupError) Unwrap() error {
	switch e.Kind {
	case LookupConnector:
		return ErrUnknownConnector
	case LookupTool:
		return ErrUnknownTool
	case LookupOperation:
		return ErrUnknownOperation
	}
	return nil
}
