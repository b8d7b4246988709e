package policy

import (
	"fmt"
	"slices"
	"strings"
)

// This file holds the match index of one connector package: what Compile
// builds once per package and every Snapshot holding that package shares
// (see Compiler). Per host:port and method it keeps a map of the all-literal
// paths and a trie of the templates, one level per path segment, so the
// cost of matching a request follows the length of its path, not the number
// of operations.

// compiledConnector is one connector compiled on its own: a private copy of
// its spec, its compiled operations and its match index per host. It is
// immutable once built.
type compiledConnector struct {
	conn  Connector
	ops   [][]CompiledOperation // [tool][operation], as in conn.Spec
	tools map[string]int        // tool name → index; the first of a repeated name
	opIdx []map[string]int      // per tool: operation name → index, likewise
	hosts map[string]*connHost  // normalized host:port → index
}

// connHost is the index of the proxyable operations of one connector that
// list one host:port.
type connHost struct {
	methods []methodIndex // a handful at most: searched linearly
	listing []string      // "METHOD /path (tool operation)", sorted, distinct
}

type methodIndex struct {
	method string
	exact  map[string][]*opEntry // decoded all-literal path → operations
	tree   segNode               // templates with at least one {name}
}

// segNode is one level of the template trie. A template's node is reached
// from the root by its segments: a literal by its decoded text, a
// "{name}:method" segment by its method, a whole "{name}" segment through
// param. Templates that differ only in their names share a node.
type segNode struct {
	lits   map[string]*segNode
	custom []customChild // a handful at most: searched linearly
	param  *segNode
	ops    []*opEntry // templates that end here, in compile order
}

type customChild struct {
	suffix string // ":method"
	node   *segNode
}

// opEntry is one proxyable operation, shared by all its hosts: where it
// belongs and its compiled form, whose template is never nil.
type opEntry struct {
	fqn, hash, tool string
	c               *CompiledOperation
}

// compileConnector compiles every operation of c and indexes the proxyable
// ones by host, method and path.
func compileConnector(c Connector) (*compiledConnector, error) {
	spec := cloneSpec(c.Spec)
	fqn := spec.Connector.FQN
	cc := &compiledConnector{
		conn:  Connector{Spec: spec, Hash: c.Hash},
		ops:   make([][]CompiledOperation, len(spec.Tools)),
		tools: make(map[string]int, len(spec.Tools)),
		opIdx: make([]map[string]int, len(spec.Tools)),
		hosts: make(map[string]*connHost),
	}
	for ti := range spec.Tools {
		t := &spec.Tools[ti]
		if _, dup := cc.tools[t.Name]; !dup {
			cc.tools[t.Name] = ti
		}
		ops := make([]CompiledOperation, len(t.Operations))
		names := make(map[string]int, len(t.Operations))
		cc.ops[ti], cc.opIdx[ti] = ops, names
		for oi := range t.Operations {
			op := &t.Operations[oi]
			co, err := compileOperation(op, fmt.Sprintf("tools[%d].operations[%d]", ti, oi))
			if err != nil {
				return nil, fmt.Errorf("compiling connector %q: %w", fqn, err)
			}
			if co.preview, err = compilePreview(op, spec, t.Name, fmt.Sprintf("tools[%d].operations[%d]", ti, oi)); err != nil {
				return nil, fmt.Errorf("compiling connector %q: %w", fqn, err)
			}
			ops[oi] = co
			if _, dup := names[op.Name]; !dup {
				names[op.Name] = oi
			}
			if co.tmpl == nil {
				continue
			}
			e := &opEntry{fqn: fqn, hash: c.Hash, tool: t.Name, c: &ops[oi]}
			text := op.Method + " " + op.Path + " (" + t.Name + " " + op.Name + ")"
			for _, name := range co.hosts {
				h := cc.hosts[name]
				if h == nil {
					h = &connHost{}
					cc.hosts[name] = h
				}
				h.add(e, text)
			}
		}
	}
	for _, h := range cc.hosts {
		slices.Sort(h.listing)
		h.listing = slices.Clip(slices.Compact(h.listing))
	}
	return cc, nil
}

// lookup returns the compiled operation op of tool.
func (cc *compiledConnector) lookup(tool, op string) (*CompiledOperation, bool) {
	ti, ok := cc.tools[tool]
	if !ok {
		return nil, false
	}
	oi, ok := cc.opIdx[ti][op]
	if !ok {
		return nil, false
	}
	return &cc.ops[ti][oi], true
}

// add indexes e under this host; text is its listing line.
func (h *connHost) add(e *opEntry, text string) {
	mi := h.method(e.c.op.Method)
	if mi == nil {
		h.methods = append(h.methods, methodIndex{method: e.c.op.Method, exact: make(map[string][]*opEntry)})
		mi = &h.methods[len(h.methods)-1]
	}
	if t := e.c.tmpl; len(t.params) == 0 {
		key := exactKey(t.segs)
		mi.exact[key] = append(mi.exact[key], e)
	} else {
		n := &mi.tree
		for i := range t.segs {
			n = n.child(&t.segs[i])
		}
		n.ops = append(n.ops, e)
	}
	h.listing = append(h.listing, text)
}

func (h *connHost) method(m string) *methodIndex {
	for i := range h.methods {
		if h.methods[i].method == m {
			return &h.methods[i]
		}
	}
	return nil
}

// child returns the node below n for the segment sg, adding it if needed.
func (n *segNode) child(sg *TemplateSegment) *segNode {
	switch {
	case !sg.isParam:
		if n.lits == nil {
			n.lits = make(map[string]*segNode)
		}
		c := n.lits[sg.lit]
		if c == nil {
			c = &segNode{}
			n.lits[sg.lit] = c
		}
		return c
	case sg.suffix != "":
		for _, cc := range n.custom {
			if cc.suffix == sg.suffix {
				return cc.node
			}
		}
		c := &segNode{}
		n.custom = append(n.custom, customChild{suffix: sg.suffix, node: c})
		return c
	}
	if n.param == nil {
		n.param = &segNode{}
	}
	return n.param
}

// find returns the operations the canonical path p matches under this
// method and whether they are exact (all-literal) ones: the exact ones when
// there are any, else those of the most specific template that matches.
// More than one operation means the path is ambiguous.
func (mi *methodIndex) find(p string, escaped bool) (ops []*opEntry, exact bool) {
	if escaped {
		var buf [256]byte
		ops = mi.exact[string(decodeAppend(buf[:0], p))]
	} else {
		ops = mi.exact[p]
	}
	if len(ops) > 0 {
		return ops, true
	}
	return mi.tree.match(p[1:], escaped), false
}

// match walks the trie along rest, a canonical path without its leading
// "/", and returns the operations of the first node that ends at rest's last
// segment and holds any. Each level tries the literal child, then the
// custom-method child, then the template child: the order in which
// compareShape ranks segments, so the first such node is the most specific
// template shape that matches. Every node is visited at most once.
func (n *segNode) match(rest string, escaped bool) []*opEntry {
	seg, next, last := rest, "", true
	if j := strings.IndexByte(rest, '/'); j >= 0 {
		seg, next, last = rest[:j], rest[j+1:], false
	}
	if n.lits != nil {
		var c *segNode
		if escaped && strings.IndexByte(seg, '%') >= 0 {
			var buf [128]byte
			c = n.lits[string(decodeAppend(buf[:0], seg))]
		} else {
			c = n.lits[seg]
		}
		if ops := c.descend(next, last, escaped); ops != nil {
			return ops
		}
	}
	if len(n.custom) > 0 {
		if _, sfx, ok := splitCustomMethod(seg); ok {
			for _, cc := range n.custom {
				if segmentEqual(sfx, cc.suffix) {
					if ops := cc.node.descend(next, last, escaped); ops != nil {
						return ops
					}
					break
				}
			}
		}
	}
	if n.param != nil && seg != "" {
		return n.param.descend(next, last, escaped)
	}
	return nil
}

// descend continues match below n: n's own operations at the last segment,
// else the rest of the path; nil for a nil n.
func (n *segNode) descend(next string, last, escaped bool) []*opEntry {
	switch {
	case n == nil:
		return nil
	case last:
		return n.ops
	}
	return n.match(next, escaped)
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

// hostIndex is one host:port of a Snapshot: the index of every connector
// that lists it.
type hostIndex struct {
	name  string
	parts []hostPart // sorted by FQN
}

type hostPart struct {
	fqn string
	h   *connHost
}

// find returns the in-scope operations that the canonical path p matches
// under method, combining the connectors' answers: an exact path beats any
// template, a more specific template shape beats a less specific one, and
// every operation left at the top is a candidate. More than one candidate
// means the request is ambiguous. The result may be a connector's own slice:
// read it, never modify it.
func (hi *hostIndex) find(sc Scope, method, p string, escaped bool) []*opEntry {
	var best []*opEntry
	bestExact := false
	for _, part := range hi.parts {
		if !sc.has(part.fqn) {
			continue
		}
		mi := part.h.method(method)
		if mi == nil {
			continue
		}
		ops, exact := mi.find(p, escaped)
		switch {
		case len(ops) == 0:
		case best == nil || exact && !bestExact:
			best, bestExact = ops, exact
		case exact != bestExact:
			// A template never beats an exact path.
		default:
			c := 0
			if !exact {
				c = compareShape(ops[0], best[0])
			}
			if c < 0 {
				best = ops
			} else if c == 0 {
				best = append(slices.Clip(best), ops...)
			}
		}
	}
	return best
}

func (hi *hostIndex) inScope(sc Scope) bool {
	for _, p := range hi.parts {
		if sc.has(p.fqn) {
			return true
		}
	}
	return false
}

// allowed returns the listing of the host within sc, sorted and distinct;
// nil when no connector of sc lists the host.
func (hi *hostIndex) allowed(sc Scope) []string {
	var out []string
	n := 0
	for _, p := range hi.parts {
		if sc.has(p.fqn) {
			out = append(out, p.h.listing...)
			n++
		}
	}
	if n > 1 {
		slices.Sort(out)
		out = slices.Compact(out)
	}
	return out
}

// methods returns the distinct methods the in-scope connectors index on
// this host, sorted.
func (hi *hostIndex) methods(sc Scope) []string {
	var out []string
	for _, p := range hi.parts {
		if !sc.has(p.fqn) {
			continue
		}
		for i := range p.h.methods {
			if m := p.h.methods[i].method; !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	slices.Sort(out)
	return out
}
