package policy

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// This file holds the compiled matcher: Compile indexes the active connectors
// once (host:port → method → exact path or path template → operation), and
// Decide answers, without side effects, whether a request is one of a
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
)

// Reasons returns every Reason a Decision may carry, the one list that
// metrics label sets and documentation are built from. TestReasonsListed
// fails when a Reason constant is missing here.
func Reasons() []Reason {
	return []Reason{ReasonAllowed, ReasonHostNotAllowed, ReasonOperationNotAllowed, ReasonPathNotCanonical, ReasonAmbiguous}
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
	conns     []Connector             // sorted by FQN; specs are private copies
	ops       [][][]CompiledOperation // [connector][tool][operation], as in conns' specs
	byFQN     map[string]int          // FQN → index in conns
	hosts     map[string]*hostIndex
	hostNames []string // keys of hosts, sorted
}

// hostIndex holds the proxyable operations that list one host:port.
type hostIndex struct {
	name    string
	fqns    []string      // connectors with an operation here, sorted
	methods []methodIndex // a handful at most: searched linearly
	listing []listedOp    // sorted by text
}

type methodIndex struct {
	method string
	exact  map[string][]*opEntry // decoded all-literal path → operations
	bySegs [][]*opEntry          // templates by segment count, most specific first
}

type listedOp struct{ fqn, text string }

// opEntry is one proxyable operation, shared by all its hosts: where it
// belongs and its compiled form, whose template is never nil.
type opEntry struct {
	fqn, hash, tool string
	c               *CompiledOperation
	order           int // compile order, the final tie-break
}

// Compile indexes the connectors into a Snapshot. The specs are expected to
// be valid (see ParseSpec); Compile still fails, naming the connector and the
// JSON location, on what would make matching unsound: a nil spec, an empty or
// repeated FQN, a host that is not host[:port], or a path that is not
// canonical. Operations without method, path or hosts are kept for Lookup but
// never match a request. Overlapping operations are not an error here: Decide
// refuses the requests they both match.
func Compile(conns []Connector) (*Snapshot, error) {
	s := &Snapshot{byFQN: make(map[string]int, len(conns)), hosts: make(map[string]*hostIndex)}
	for i, c := range conns {
		if c.Spec == nil {
			return nil, fmt.Errorf("compiling connectors[%d]: spec is nil; pass only parsed, valid specs", i)
		}
		fqn := c.Spec.Connector.FQN
		if fqn == "" {
			return nil, fmt.Errorf("compiling connectors[%d]: connector.fqn is empty; validate the spec with ParseSpec first", i)
		}
		if j, dup := s.byFQN[fqn]; dup {
			return nil, fmt.Errorf("compiling connector %q: it is listed twice (hashes %q and %q); pass only the active version of each connector", fqn, s.conns[j].Hash, c.Hash)
		}
		s.byFQN[fqn] = len(s.conns)
		s.conns = append(s.conns, Connector{Spec: cloneSpec(c.Spec), Hash: c.Hash})
	}
	sort.Slice(s.conns, func(i, j int) bool { return s.conns[i].Spec.Connector.FQN < s.conns[j].Spec.Connector.FQN })
	order := 0
	for i, c := range s.conns {
		s.byFQN[c.Spec.Connector.FQN] = i
		if err := s.index(c, &order); err != nil {
			return nil, err
		}
	}
	for name, hi := range s.hosts {
		s.hostNames = append(s.hostNames, name)
		hi.finish()
	}
	sort.Strings(s.hostNames)
	return s, nil
}

// index compiles every operation of c and adds the proxyable ones to the
// host indexes.
func (s *Snapshot) index(c Connector, order *int) error {
	fqn := c.Spec.Connector.FQN
	tools := make([][]CompiledOperation, len(c.Spec.Tools))
	s.ops = append(s.ops, tools)
	for ti := range c.Spec.Tools {
		t := &c.Spec.Tools[ti]
		tools[ti] = make([]CompiledOperation, len(t.Operations))
		for oi := range t.Operations {
			op := &t.Operations[oi]
			co, err := compileOperation(op, fmt.Sprintf("tools[%d].operations[%d]", ti, oi))
			if err != nil {
				return fmt.Errorf("compiling connector %q: %w", fqn, err)
			}
			if co.preview, err = compilePreview(op, c.Spec, t.Name, fmt.Sprintf("tools[%d].operations[%d]", ti, oi)); err != nil {
				return fmt.Errorf("compiling connector %q: %w", fqn, err)
			}
			tools[ti][oi] = co
			if co.tmpl == nil {
				continue
			}
			*order++
			e := &opEntry{fqn: fqn, hash: c.Hash, tool: t.Name, c: &tools[ti][oi], order: *order}
			text := op.Method + " " + op.Path + " (" + t.Name + " " + op.Name + ")"
			for _, name := range co.hosts {
				s.host(name).add(e, text)
			}
		}
	}
	return nil
}

func (s *Snapshot) host(name string) *hostIndex {
	hi := s.hosts[name]
	if hi == nil {
		hi = &hostIndex{name: name}
		s.hosts[name] = hi
	}
	return hi
}

// add indexes e under this host; text is its listing line, "METHOD /path
// (tool operation)".
func (hi *hostIndex) add(e *opEntry, text string) {
	method := e.c.op.Method
	mi := hi.method(method)
	if mi == nil {
		hi.methods = append(hi.methods, methodIndex{method: method, exact: make(map[string][]*opEntry)})
		mi = &hi.methods[len(hi.methods)-1]
	}
	if t := e.c.tmpl; len(t.params) == 0 {
		key := exactKey(t.segs)
		mi.exact[key] = append(mi.exact[key], e)
	} else {
		n := len(t.segs)
		for len(mi.bySegs) <= n {
			mi.bySegs = append(mi.bySegs, nil)
		}
		mi.bySegs[n] = append(mi.bySegs[n], e)
	}
	hi.listing = append(hi.listing, listedOp{fqn: e.fqn, text: text})
	if i, found := slices.BinarySearch(hi.fqns, e.fqn); !found {
		hi.fqns = slices.Insert(hi.fqns, i, e.fqn)
	}
}

// finish orders the templates by specificity and the listing by text.
func (hi *hostIndex) finish() {
	for i := range hi.methods {
		for _, b := range hi.methods[i].bySegs {
			sort.SliceStable(b, func(x, y int) bool {
				if c := compareShape(b[x], b[y]); c != 0 {
					return c < 0
				}
				return b[x].order < b[y].order
			})
		}
	}
	sort.Slice(hi.listing, func(i, j int) bool {
		if hi.listing[i].text != hi.listing[j].text {
			return hi.listing[i].text < hi.listing[j].text
		}
		return hi.listing[i].fqn < hi.listing[j].fqn
	})
}

// compareShape orders two templates with the same number of segments: the
// one whose first differing segment is more specific (a literal, then a
// template with a custom method) comes first. Zero means the same shape.
func compareShape(a, b *opEntry) int {
	as, bs := a.c.tmpl.segs, b.c.tmpl.segs
	for i := range as {
		if ra, rb := as[i].rank(), bs[i].rank(); ra != rb {
			return ra - rb
		}
	}
	return 0
}

func (hi *hostIndex) inScope(sc Scope) bool {
	for _, f := range hi.fqns {
		if sc.has(f) {
			return true
		}
	}
	return false
}

func (hi *hostIndex) method(m string) *methodIndex {
	for i := range hi.methods {
		if hi.methods[i].method == m {
			return &hi.methods[i]
		}
	}
	return nil
}

// allowed returns the listing of the host within sc, sorted and distinct.
func (hi *hostIndex) allowed(sc Scope) []string {
	var out []string
	for _, l := range hi.listing {
		if sc.has(l.fqn) && (len(out) == 0 || out[len(out)-1] != l.text) {
			out = append(out, l.text)
		}
	}
	return out
}

// find returns the in-scope operation that a canonical path matches under
// this method, or every equally specific candidate when there is more than
// one. An exact path beats any template.
func (mi *methodIndex) find(sc Scope, p string, nseg int, escaped bool) (*opEntry, []*opEntry) {
	var exact []*opEntry
	if escaped {
		var buf [256]byte
		exact = mi.exact[string(decodeAppend(buf[:0], p))]
	} else {
		exact = mi.exact[p]
	}
	var best *opEntry
	var amb []*opEntry
	for _, e := range exact {
		if sc.has(e.fqn) {
			if best == nil {
				best = e
			} else {
				amb = append(amb, e)
			}
		}
	}
	if best == nil && nseg < len(mi.bySegs) {
		for _, e := range mi.bySegs[nseg] {
			if best != nil && compareShape(best, e) != 0 {
				break
			}
			if sc.has(e.fqn) && e.matchPath(p) {
				if best == nil {
					best = e
				} else {
					amb = append(amb, e)
				}
			}
		}
	}
	if amb != nil {
		return nil, append([]*opEntry{best}, amb...)
	}
	return best, nil
}

// matchPath reports whether the canonical path p matches the template.
func (e *opEntry) matchPath(p string) bool {
	segs := e.c.tmpl.segs
	rest := p[1:]
	for i := range segs {
		seg := rest
		if i < len(segs)-1 {
			j := strings.IndexByte(rest, '/')
			if j < 0 {
				return false
			}
			seg, rest = rest[:j], rest[j+1:]
		} else if strings.IndexByte(seg, '/') >= 0 {
			return false
		}
		sg := &segs[i]
		if sg.suffix != "" {
			if _, rest, ok := splitCustomMethod(seg); !ok || !segmentEqual(rest, sg.suffix) {
				return false
			}
		} else if sg.isParam {
			if seg == "" {
				return false
			}
		} else if !segmentEqual(seg, sg.lit) {
			return false
		}
	}
	return true
}

// match builds the Match of a request path that matchPath accepted.
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
	return slices.Clone(s.conns)
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
	return s.conns[i], true
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
	nseg, problem := inspectPath(r.Path)
	if problem == "" {
		if mi := hi.method(r.Method); mi != nil {
			best, amb := mi.find(sc, r.Path, nseg, strings.IndexByte(r.Path, '%') >= 0)
			if best != nil {
				return Decision{Allow: true, Reason: ReasonAllowed, Match: best.match(r.Path)}
			}
			if amb != nil {
				return denyAmbiguous(sc, hi, r, amb)
			}
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
	if others := otherMethods(sc, hi, r, nseg); others != "" {
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
func otherMethods(sc Scope, hi *hostIndex, r Request, nseg int) string {
	var out []string
	escaped := strings.IndexByte(r.Path, '%') >= 0
	for i := range hi.methods {
		mi := &hi.methods[i]
		if mi.method == r.Method {
			continue
		}
		if best, amb := mi.find(sc, r.Path, nseg, escaped); best != nil || amb != nil {
			out = append(out, mi.method)
		}
	}
	sort.Strings(out)
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
