package learn

import (
	"slices"
	"strconv"
	"strings"
)

// Template inference. The paths seen on one host form a trie of escaped
// segments. At every node the children are split into identifier-looking
// values (Classify) and words. Identifier values, two or more distinct,
// merge into one template child; words merge too when there are at least
// minWordValues distinct ones below a literal parent and their subtrees have
// the same shape (as user names under /users do). Siblings merge only when
// no method and remaining path gets different response media types or
// status classes from them: such shapes stay apart. The template is named
// from the literal segment before it (items → item), unique in the path.

// minWordValues is how many distinct word values under one literal parent
// make that position a template.
const minWordValues = 3

// node is one path position of the trie.
type node struct {
	children map[string]*node // keyed by escaped segment, or "{name}" once merged
	reqs     []int            // indices of requests whose path ends here
}

func newNode() *node { return &node{children: map[string]*node{}} }

func (n *node) insert(segs []string, i int) {
	if len(segs) == 0 {
		n.reqs = append(n.reqs, i)
		return
	}
	c := n.children[segs[0]]
	if c == nil {
		c = newNode()
		n.children[segs[0]] = c
	}
	c.insert(segs[1:], i)
}

// merge adds o's subtree into n.
func (n *node) merge(o *node) {
	n.reqs = append(n.reqs, o.reqs...)
	for k, oc := range o.children {
		if c := n.children[k]; c != nil {
			c.merge(oc)
		} else {
			n.children[k] = oc
		}
	}
}

// sigKey is a method and the rest of a path below a node; sigVal the
// responses seen there.
type signature map[string]map[string]bool

// signature collects, for every request in n's subtree, "METHOD rest" →
// {"media type|status class"}; shape is the set of keys, used for words.
func (n *node) signature(reqs []Request, prefix string, sig signature) {
	for _, i := range n.reqs {
		r := reqs[i]
		k := r.Method + " " + prefix
		if sig[k] == nil {
			sig[k] = map[string]bool{}
		}
		sig[k][r.ResponseContentType+"|"+strconv.Itoa(r.Status/100)] = true
	}
	for seg, c := range n.children {
		c.signature(reqs, prefix+"/"+seg, sig)
	}
}

// compatible reports whether no key of a and b has different responses.
func compatible(a, b signature) bool {
	for k, va := range a {
		vb, ok := b[k]
		if !ok {
			continue
		}
		if len(va) != len(vb) {
			return false
		}
		for v := range va {
			if !vb[v] {
				return false
			}
		}
	}
	return true
}

func sameShape(a, b signature) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}

func union(dst, src signature) {
	for k, v := range src {
		if dst[k] == nil {
			dst[k] = map[string]bool{}
		}
		for x := range v {
			dst[k][x] = true
		}
	}
}

// generalize merges template positions in n's subtree. parent is the
// literal segment before n ("" at the root or after a template); used are
// the template names already in the path.
func (n *node) generalize(reqs []Request, parent string, used []string) {
	var ids, words []string
	for seg := range n.children {
		if seg == "" || strings.HasPrefix(seg, "{") {
			continue // an empty segment stays literal: a template needs a value
		}
		if Classify(seg).IsIdentifier() {
			ids = append(ids, seg)
		} else {
			words = append(words, seg)
		}
	}
	slices.Sort(ids)
	slices.Sort(words)
	var group []string
	if len(ids) >= 2 {
		group = n.largestCompatible(reqs, ids, false)
		if len(group) < 2 {
			group = nil
		}
	}
	if parent != "" && len(words) >= minWordValues {
		if w := n.largestCompatible(reqs, words, true); len(w) >= minWordValues && len(w) > len(group) {
			group = w
			if len(ids) >= 2 {
				// Identifiers of the same position join the words' template
				// when they fit it.
				group = n.largestCompatible(reqs, append(slices.Clone(w), ids...), false)
			}
		}
	}
	if len(group) > 0 {
		name := templateName(parent, used)
		key := "{" + name + "}"
		merged := newNode()
		for _, seg := range group {
			merged.merge(n.children[seg])
			delete(n.children, seg)
		}
		n.children[key] = merged
	}
	keys := make([]string, 0, len(n.children))
	for k := range n.children {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		c := n.children[k]
		if name, ok := strings.CutPrefix(k, "{"); ok {
			c.generalize(reqs, "", append(slices.Clone(used), strings.TrimSuffix(name, "}")))
			continue
		}
		c.generalize(reqs, k, used)
	}
}

// largestCompatible groups the children segs greedily (in order) into sets
// whose signatures are compatible; with sameShapeOnly each set also needs
// one subtree shape. It returns the largest set, the first on a tie.
func (n *node) largestCompatible(reqs []Request, segs []string, sameShapeOnly bool) []string {
	type set struct {
		segs  []string
		sig   signature
		shape signature
	}
	var sets []*set
	for _, seg := range segs {
		sig := signature{}
		n.children[seg].signature(reqs, "", sig)
		placed := false
		for _, s := range sets {
			if compatible(s.sig, sig) && (!sameShapeOnly || sameShape(s.shape, sig)) {
				s.segs = append(s.segs, seg)
				union(s.sig, sig)
				placed = true
				break
			}
		}
		if !placed {
			s := &set{segs: []string{seg}, sig: signature{}, shape: sig}
			union(s.sig, sig)
			sets = append(sets, s)
		}
	}
	var best []string
	for _, s := range sets {
		if len(s.segs) > len(best) {
			best = s.segs
		}
	}
	return best
}

// templateName names a template from the literal segment before it:
// "items" → "item", "categories" → "category", "users" → "user"; "id" when
// there is none or it makes no name. A name already used in the path gets
// a number.
func templateName(parent string, used []string) string {
	base := singular(sanitizeName(parent))
	if base == "" {
		base = "id"
	}
	name := base
	for i := 2; slices.Contains(used, name); i++ {
		name = base + strconv.Itoa(i)
	}
	return name
}

// sanitizeName keeps letters, digits and '_' of s (other runs become '_'),
// lower case, trimmed of '_', at most 40 bytes.
func sanitizeName(s string) string {
	var b strings.Builder
	under := false
	for i := 0; i < len(s) && b.Len() < 40; i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z' || c >= '0' && c <= '9':
			b.WriteByte(c)
			under = false
		case c >= 'A' && c <= 'Z':
			b.WriteByte(c + 'a' - 'A')
			under = false
		default:
			if !under && b.Len() > 0 {
				b.WriteByte('_')
				under = true
			}
		}
	}
	out := strings.Trim(b.String(), "_")
	if out != "" && out[0] >= '0' && out[0] <= '9' {
		return ""
	}
	return out
}

func singular(s string) string {
	switch {
	case len(s) > 4 && strings.HasSuffix(s, "ies"):
		return s[:len(s)-3] + "y"
	case len(s) > 4 && (strings.HasSuffix(s, "sses") || strings.HasSuffix(s, "uses") || strings.HasSuffix(s, "xes")):
		return s[:len(s)-2]
	case len(s) > 2 && strings.HasSuffix(s, "s") && !strings.HasSuffix(s, "ss"):
		return s[:len(s)-1]
	}
	return s
}

// templatePaths returns, for each request, its path with merged positions
// as "{name}" segments, and for each template name the escaped values seen.
func (n *node) templatePaths(prefix []string, out []string) {
	for _, i := range n.reqs {
		out[i] = "/" + strings.Join(prefix, "/")
	}
	for seg, c := range n.children {
		c.templatePaths(append(slices.Clone(prefix), seg), out)
	}
}

// splitPath returns the escaped segments of p ("/" gives one empty segment).
func splitPath(p string) []string {
	return strings.Split(strings.TrimPrefix(p, "/"), "/")
}

// inferTemplates returns the template path of every request in idx (all of
// one host), indexed like reqs.
func inferTemplates(reqs []Request, idx []int, out []string) {
	root := newNode()
	for _, i := range idx {
		root.insert(splitPath(reqs[i].Path), i)
	}
	root.generalize(reqs, "", nil)
	root.templatePaths(nil, out)
}
