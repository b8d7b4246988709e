package policy

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// This file holds the compiled matcher: Compile joins the index of each
// active connector (host:port → method → exact path or template trie →
// operation, built in index.go), and Decide answers, without side effects, whether a request is one of a
// session's operations. Scope, Lookup by name and request canonicalization
// (host:port and path) are in scope.go.

// Connector is an active, valid installed spec: the unit a Snapshot compiles.
type Connector struct {
	// Spec is the parsed, valid spec. Compile keeps its own deep copy, so
	// changing Spec afterwards does not change a snapshot.
	Spec *Spec
	// Hash is the package hash, "sha256:<hex>"; empty when the spec did not
	// come from the store.
	Hash string
}

// Reason is the stable, machine-readable cause of a Decision. The zero value
// is "unspecified" and never accompanies an allow.
type Reason string

// Reasons a Decision carries.
const (
	ReasonAllowed             Reason = "allowed"
	ReasonHostNotAllowed      Reason = "host_not_allowed"
	ReasonOperationNotAllowed Reason = "operation_not_allowed"
	ReasonPathNotCanonical    Reason = "path_not_canonical"
	ReasonAmbiguous           Reason = "ambiguous_operation"
	// ReasonInspectBody is not a final answer: the request's path holds
	// GraphQL or MCP operations, and only its body says which one it is
	// (Decision.Inspect). A caller that does not read bodies refuses it.
	ReasonInspectBody Reason = "inspect_body"
)

// Reasons returns every Reason a Decision may carry, the one list that
// metrics label sets and documentation are built from. TestReasonsListed
// fails when a Reason constant is missing here.
func Reasons() []Reason {
	return []Reason{ReasonAllowed, ReasonHostNotAllowed, ReasonOperationNotAllowed, ReasonPathNotCanonical, ReasonAmbiguous, ReasonInspectBody}
}

// String returns the reason code, "unspecified" for the zero value.
func (r Reason) String() string {
	if r == "" {
		return "unspecified"
	}
	return string(r)
}

// Request is what Decide looks at: nothing else of an HTTP request matters
// to policy.
type Request struct {
	// Method is the HTTP method as received; compared exactly, so "get" is
	// not "GET".
	Method string
	// Host is the destination, host:port; a missing port means 443. Decide
	// lower-cases it, drops a trailing dot and canonicalizes IPv6 literals.
	Host string
	// Path is URL.EscapedPath() as received: raw, percent-encoded, without
	// the query string.
	Path string
}

// Decision is the outcome of Decide. Its zero value denies.
type Decision struct {
	// Allow reports whether the request is one of the session's operations.
	Allow bool
	// Reason is ReasonAllowed when Allow is set, otherwise why not.
	Reason Reason
	// Message is empty on allow. On deny it is written for an agent to read
	// and act on: what was refused and what is allowed instead.
	Message string
	// Match is the matched operation; non-nil if and only if Allow.
	Match *Match
	// AllowedOperations lists, on deny, the operations of the session on the
	// request's host as "METHOD /path (tool operation)", sorted; nil when the
	// host is not one of the session's.
	AllowedOperations []string
	// Inspect is set, with ReasonInspectBody, when the request's path holds
	// operations with a graphql or mcp rule: the body decides among them
	// (see Inspection). Allow is then false.
	Inspect *Inspection
}

// Match identifies one operation of one connector.
type Match struct {
	ConnectorFQN  string
	ConnectorHash string
	Tool          string
	// Compiled is the operation as Compile prepared it; its Operation method
	// returns the spec operation. Never nil in a Match a Snapshot returns.
	Compiled *CompiledOperation
	// PathParams holds the percent-decoded value of every {name} segment of
	// the operation's path; nil when the path has none or for Lookup.
	PathParams map[string]string
}

// Errors Lookup wraps; test for them with errors.Is.
var (
	ErrUnknownConnector = errors.New("unknown connector")
	ErrUnknownTool      = errors.New("unknown tool")
	ErrUnknownOperation = errors.New("unknown operation")
)

// Snapshot is the compiled, immutable policy of a set of connectors. It has no
// mutators: a reload compiles a new Snapshot and swaps it in. All methods are
// safe for concurrent use, and a nil *Snapshot allows nothing.
type Snapshot struct {
	conns     []*compiledConnector // sorted by FQN; shared with other snapshots (see Compiler)
	byFQN     map[string]int       // FQN → index in conns
	hosts     map[string]*hostIndex
	hostNames []string // keys of hosts, sorted
}

// Compile indexes the connectors into a Snapshot. The specs are expected to
// be valid (see ParseSpec); Compile still fails, naming the connector and the
// JSON location, on what would make matching unsound: a nil spec, an empty or
// repeated FQN, a host that is not host[:port], or a path that is not
// canonical. Operations without method, path or hosts are kept for Lookup but
// never match a request. Overlapping operations are not an error here: Decide
// refuses the requests they both match. Compile builds every connector
// afresh; a Compiler reuses the connectors it built before.
func Compile(conns []Connector) (*Snapshot, error) {
	return compile(conns, compileConnector)
}

// compile checks conns, builds each with build, in FQN order, and joins
// their host indexes.
func compile(conns []Connector, build func(Connector) (*compiledConnector, error)) (*Snapshot, error) {
	byFQN := make(map[string]int, len(conns))
	for i, c := range conns {
		if c.Spec == nil {
			return nil, fmt.Errorf("compiling connectors[%d]: spec is nil; pass only parsed, valid specs", i)
		}
		fqn := c.Spec.Connector.FQN
		if fqn == "" {
			return nil, fmt.Errorf("compiling connectors[%d]: connector.fqn is empty; validate the spec with ParseSpec first", i)
		}
		if j, dup := byFQN[fqn]; dup {
			return nil, fmt.Errorf("compiling connector %q: it is listed twice (hashes %q and %q); pass only the active version of each connector", fqn, conns[j].Hash, c.Hash)
		}
		byFQN[fqn] = i
	}
	sorted := slices.Clone(conns)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Spec.Connector.FQN < sorted[j].Spec.Connector.FQN })
	s := &Snapshot{conns: make([]*compiledConnector, len(sorted)), byFQN: byFQN, hosts: make(map[string]*hostIndex)}
	for i, c := range sorted {
		cc, err := build(c)
		if err != nil {
			return nil, err
		}
		fqn := c.Spec.Connector.FQN
		s.conns[i], s.byFQN[fqn] = cc, i
		for name, h := range cc.hosts {
			hi := s.hosts[name]
			if hi == nil {
				hi = &hostIndex{name: name}
				s.hosts[name] = hi
			}
			// FQN order, as the connectors are visited.
			hi.parts = append(hi.parts, hostPart{fqn: fqn, h: h})
		}
	}
	for name := range s.hosts {
		s.hostNames = append(s.hostNames, name)
	}
	sort.Strings(s.hostNames)
	return s, nil
}

// match builds the Match of a canonical request path that the operation's
// template matches.
func (e *opEntry) match(p string) *Match {
	m := &Match{ConnectorFQN: e.fqn, ConnectorHash: e.hash, Tool: e.tool, Compiled: e.c}
	t := e.c.tmpl
	if len(t.params) == 0 {
		return m
	}
	m.PathParams = make(map[string]string, len(t.params))
	rest := p[1:]
	for i := range t.segs {
		sg := &t.segs[i]
		seg := rest
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			seg, rest = rest[:j], rest[j+1:]
		}
		if sg.suffix != "" {
			seg, _, _ = splitCustomMethod(seg)
		}
		if sg.isParam {
			m.PathParams[sg.param] = decodeSegment(seg)
		}
	}
	return m
}

// Connectors returns the compiled connectors sorted by FQN. The specs are the
// snapshot's own: read them, never modify them.
func (s *Snapshot) Connectors() []Connector {
	if s == nil {
		return nil
	}
	out := make([]Connector, len(s.conns))
	for i, cc := range s.conns {
		out[i] = cc.conn
	}
	return out
}

// Connector returns the compiled connector with this FQN.
func (s *Snapshot) Connector(fqn string) (Connector, bool) {
	if s == nil {
		return Connector{}, false
	}
	i, ok := s.byFQN[fqn]
	if !ok {
		return Connector{}, false
	}
	return s.conns[i].conn, true
}

// Hosts returns the normalized host:port of every host an operation in the
// scope lists, sorted: the hosts a session intercepts.
func (s *Snapshot) Hosts(sc Scope) []string {
	if s == nil {
		return nil
	}
	var out []string
	for _, name := range s.hostNames {
		if s.hosts[name].inScope(sc) {
			out = append(out, name)
		}
	}
	return out
}

// Intercepts reports whether a CONNECT to hostport is intercepted for the
// scope: whether some operation in the scope lists it. hostport is
// normalized first; an invalid one is never intercepted.
func (s *Snapshot) Intercepts(sc Scope, hostport string) bool {
	if s == nil {
		return false
	}
	name := normalizeHost(hostport)
	if name == "" {
		return false
	}
	hi := s.hosts[name]
	return hi != nil && hi.inScope(sc)
}

// Decide reports whether r is an operation of a connector in sc. It is pure
// and safe for concurrent use. The path is refused before matching when it is
// not canonical (dot segments, encoded slashes or backslashes, empty
// segments, control bytes, invalid or double percent-encoding); then each
// segment is percent-decoded and compared. An exact path beats a template,
// templates with literal segments earlier beat the others, and two different
// operations left equally specific make the request ambiguous: refused.
func (s *Snapshot) Decide(sc Scope, r Request) Decision {
	if s == nil || sc.isEmpty() {
		why := "this session has no connectors, so it allows no requests; start a session with the connectors it needs"
		if s == nil {
			why = "no connectors are loaded; install one with `aileron-proxy connector install PATH`"
		}
		return Decision{Reason: ReasonHostNotAllowed, Message: fmt.Sprintf("%s %s on %s is refused: %s",
			printable(r.Method), printable(r.Path), printable(r.Host), why)}
	}
	name := normalizeHost(r.Host)
	if name == "" {
		return s.denyHost(sc, r, fmt.Sprintf("%q is not a valid host:port", r.Host))
	}
	hi := s.hosts[name]
	if hi == nil {
		return s.denyHost(sc, r, displayHost(name)+" is not a host this session can reach")
	}
	_, problem := inspectPath(r.Path)
	if problem == "" {
		switch cands := hi.find(sc, r.Method, r.Path, strings.IndexByte(r.Path, '%') >= 0); {
		case len(cands) == 1 && cands[0].c.body == BodyNone:
			return Decision{Allow: true, Reason: ReasonAllowed, Match: cands[0].match(r.Path)}
		case len(cands) > 0:
			if in := newInspection(cands, r.Path); in != nil {
				return Decision{Reason: ReasonInspectBody, Inspect: in, AllowedOperations: in.allowed, Message: fmt.Sprintf(
					"%s %s on %s is a %s endpoint: only the request body says which operation it is, and this caller does not read it",
					printable(r.Method), r.Path, displayHost(hi.name), in.kind)}
			}
			return denyAmbiguous(sc, hi, r, cands)
		}
	}
	if !hi.inScope(sc) {
		return s.denyHost(sc, r, displayHost(name)+" is not a host this session can reach")
	}
	allowed := hi.allowed(sc)
	if problem != "" {
		return Decision{Reason: ReasonPathNotCanonical, AllowedOperations: allowed, Message: fmt.Sprintf(
			"%s %q on %s was refused before matching: %s; send the canonical path (no \".\" or \"..\" segments, no %%2F, %%5C, backslash or \"//\", valid single percent-encoding); allowed on this host: %s",
			printable(r.Method), r.Path, displayHost(name), problem, capList(allowed))}
	}
	msg := fmt.Sprintf("%s %s on %s is not an operation this session allows", printable(r.Method), r.Path, displayHost(name))
	if others := otherMethods(sc, hi, r); others != "" {
		msg += " (this path is allowed with " + others + ")"
	}
	return Decision{Reason: ReasonOperationNotAllowed, AllowedOperations: allowed,
		Message: msg + "; allowed on this host: " + capList(allowed)}
}

func (s *Snapshot) denyHost(sc Scope, r Request, why string) Decision {
	hosts := s.Hosts(sc)
	for i, h := range hosts {
		hosts[i] = displayHost(h)
	}
	msg := fmt.Sprintf("%s %s is refused: %s", printable(r.Method), printable(r.Path), why)
	if len(hosts) == 0 {
		msg += "; this session's connectors list no hosts"
	} else {
		msg += "; hosts this session can reach: " + capList(hosts)
	}
	return Decision{Reason: ReasonHostNotAllowed, Message: msg}
}

func denyAmbiguous(sc Scope, hi *hostIndex, r Request, amb []*opEntry) Decision {
	names := make([]string, len(amb))
	for i, e := range amb {
		names[i] = e.tool + " " + e.c.op.Name + " of " + e.fqn
	}
	sort.Strings(names)
	return Decision{Reason: ReasonAmbiguous, AllowedOperations: hi.allowed(sc), Message: fmt.Sprintf(
		"%s %s on %s matches more than one operation (%s), so it is refused; the session's connectors overlap: use a session with only one of them, or remove one with `aileron-proxy connector remove FQN`",
		printable(r.Method), r.Path, displayHost(hi.name), strings.Join(names, "; "))}
}

// otherMethods lists the methods under which the canonical path would be
// allowed, for the deny message.
func otherMethods(sc Scope, hi *hostIndex, r Request) string {
	var out []string
	escaped := strings.IndexByte(r.Path, '%') >= 0
	for _, m := range hi.methods(sc) {
		if m != r.Method && len(hi.find(sc, m, r.Path, escaped)) > 0 {
			out = append(out, m)
		}
	}
	return strings.Join(out, ", ")
}

// cloneSpec deep-copies the slices of a spec so the snapshot owns its data.
func cloneSpec(in *Spec) *Spec {
	out := *in
	out.Tools = slices.Clone(in.Tools)
	for ti := range out.Tools {
		t := &out.Tools[ti]
		t.Operations = slices.Clone(t.Operations)
		for oi := range t.Operations {
			o := &t.Operations[oi]
			o.Hosts = slices.Clone(o.Hosts)
			o.Inputs = slices.Clone(o.Inputs)
			o.Audit = slices.Clone(o.Audit)
			if ap := o.ApprovalPreview; ap != nil {
				cp := &ApprovalPreview{Fields: slices.Clone(ap.Fields)}
				if ap.Fetch != nil {
					cp.Fetch = &PreviewFetch{Operation: ap.Fetch.Operation, Args: maps.Clone(ap.Fetch.Args), Render: maps.Clone(ap.Fetch.Render)}
				}
				o.ApprovalPreview = cp
			}
			if g := o.GraphQL; g != nil {
				o.GraphQL = &GraphQLRule{Type: g.Type, Fields: slices.Clone(g.Fields), PersistedHashes: slices.Clone(g.PersistedHashes)}
			}
			if m := o.MCP; m != nil {
				o.MCP = &MCPRule{Tools: slices.Clone(m.Tools), ApprovalTools: slices.Clone(m.ApprovalTools), Resources: m.Resources, Prompts: m.Prompts}
			}
		}
	}
	return &out
}

// displayHost drops the default ":443" for messages.
func displayHost(hostport string) string {
	return strings.TrimSuffix(hostport, ":443")
}

// capList joins a list for a message, keeping it readable when long.
func capList(items []string) string {
	const max = 20
	if len(items) == 0 {
		return "none"
	}
	if len(items) <= max {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s, and %d more (see allowed_operations)", strings.Join(items[:max], ", "), len(items)-max)
}

// printable returns s unchanged when it is plain visible ASCII, else quoted.
func printable(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f || s[i] == '"' {
			return fmt.Sprintf("%q", s)
		}
	}
	if s == "" {
		return `""`
	}
	return s
}
