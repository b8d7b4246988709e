package policy

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// This file holds an operation's approval_preview: which fields of a held
// request a person sees first, and which read-only operation of the same
// connector the proxy calls before asking, to show the state the request
// would change from the source rather than from the agent.

// ApprovalPreview is an operation's "approval_preview" object.
type ApprovalPreview struct {
	// Fields are body, query or path field names shown first, in this
	// order; the rest of the request's fields are folded below them.
	Fields []string `json:"fields,omitempty"`
	// Fetch, when set, names the read-only operation called before the
	// person is asked.
	Fetch *PreviewFetch `json:"fetch,omitempty"`
}

// PreviewFetch is approval_preview.fetch.
type PreviewFetch struct {
	// Operation is the name of a GET or HEAD operation of the same
	// connector (its own tool first, then any other tool).
	Operation string `json:"operation"`
	// Args maps the fetched operation's inputs to a value: a literal, or a
	// whole "{path.<template>}", "{query.<name>}" or "{body.<field>}" taken
	// from the held request ("{body.a.b}" reads a nested JSON field).
	Args map[string]string `json:"args,omitempty"`
	// Render maps a label shown to the person to a field of the fetched
	// JSON answer ("name", "owner.login"); empty shows the answer's
	// top-level scalar fields.
	Render map[string]string `json:"render,omitempty"`
}

// PreviewSourceKind says where a fetch argument's value comes from.
type PreviewSourceKind uint8

// Preview argument sources.
const (
	PreviewLiteral PreviewSourceKind = iota
	PreviewFromPath
	PreviewFromQuery
	PreviewFromBody
)

// String returns "literal", "path", "query" or "body".
func (k PreviewSourceKind) String() string {
	switch k {
	case PreviewFromPath:
		return "path"
	case PreviewFromQuery:
		return "query"
	case PreviewFromBody:
		return "body"
	}
	return "literal"
}

// ParsePreviewArg parses a fetch argument value: "{path.x}", "{query.x}" and
// "{body.x}" name a source; anything else is a literal. ok is false for a
// value that looks like a reference but is not a valid one.
func ParsePreviewArg(v string) (kind PreviewSourceKind, name string, ok bool) {
	inner, braced := strings.CutPrefix(v, "{")
	if !braced {
		return PreviewLiteral, v, !strings.Contains(v, "{")
	}
	inner, closed := strings.CutSuffix(inner, "}")
	if !closed || strings.ContainsAny(inner, "{}") {
		return PreviewLiteral, "", false
	}
	src, name, _ := strings.Cut(inner, ".")
	switch src {
	case "path":
		kind = PreviewFromPath
	case "query":
		kind = PreviewFromQuery
	case "body":
		kind = PreviewFromBody
	default:
		return PreviewLiteral, "", false
	}
	if name == "" || len(name) > maxNameLen {
		return kind, "", false
	}
	for _, part := range strings.Split(name, ".") {
		if part == "" || (kind != PreviewFromQuery && !IsValidName(part)) || (kind == PreviewFromQuery && !isQueryName(part)) {
			return kind, "", false
		}
	}
	return kind, name, true
}

// PreviewArg is one compiled fetch argument.
type PreviewArg struct {
	// Input is the fetched operation's input the value fills.
	Input string
	// Kind is where the value comes from; Name is the template, query
	// parameter or dotted body field, or the literal value itself.
	Kind PreviewSourceKind
	Name string
}

// RenderField is one compiled render entry: Label is shown, Field is the
// dotted path into the fetched JSON answer.
type RenderField struct{ Label, Field string }

// PreviewPlan is an operation's compiled approval_preview. Read it, never
// modify it.
type PreviewPlan struct {
	// Fields are the fields shown first, in spec order.
	Fields []string
	// FetchTool and FetchOperation name the operation to fetch; empty when
	// there is no fetch.
	FetchTool, FetchOperation string
	// Args are sorted by input name.
	Args []PreviewArg
	// Render is sorted by label; empty shows the answer's top-level scalars.
	Render []RenderField
}

// HasFetch reports whether the plan fetches an operation.
func (p *PreviewPlan) HasFetch() bool { return p != nil && p.FetchOperation != "" }

// NewPreviewFetchPlan compiles a fetch of operation op of tool with args
// (values as in PreviewFetch.Args) and render; actions use it to map their
// [approval.preview] onto the same mechanism. It does not check that the
// operation exists; the proxy refuses an unknown one when it fetches.
func NewPreviewFetchPlan(tool, op string, args, render map[string]string) (*PreviewPlan, error) {
	p := &PreviewPlan{FetchTool: tool, FetchOperation: op}
	for _, k := range slices.Sorted(maps.Keys(args)) {
		kind, name, ok := ParsePreviewArg(args[k])
		if !ok {
			return nil, fmt.Errorf("preview argument %q: %q is neither a literal nor {path.<name>}, {query.<name>} or {body.<field>}", k, args[k])
		}
		p.Args = append(p.Args, PreviewArg{Input: k, Kind: kind, Name: name})
	}
	for _, l := range slices.Sorted(maps.Keys(render)) {
		p.Render = append(p.Render, RenderField{Label: l, Field: render[l]})
	}
	return p, nil
}

// compilePreview compiles op's approval_preview within spec (tool is op's
// tool); nil when it has none.
func compilePreview(op *Operation, spec *Spec, tool, at string) (*PreviewPlan, error) {
	ap := op.ApprovalPreview
	if ap == nil {
		return nil, nil
	}
	p := &PreviewPlan{Fields: slices.Clone(ap.Fields)}
	if ap.Fetch == nil {
		return p, nil
	}
	ft, fop, err := resolveFetch(spec, tool, ap.Fetch.Operation)
	if err != nil {
		return nil, fmt.Errorf("%s.approval_preview.fetch.operation: %w", at, err)
	}
	if fop.Method != "GET" && fop.Method != "HEAD" {
		return nil, fmt.Errorf("%s.approval_preview.fetch.operation: %q is %s; only a GET or HEAD operation may be fetched for a preview", at, fop.Name, orNone(fop.Method))
	}
	fp, err := NewPreviewFetchPlan(ft, fop.Name, ap.Fetch.Args, ap.Fetch.Render)
	if err != nil {
		return nil, fmt.Errorf("%s.approval_preview.fetch.args: %w", at, err)
	}
	fp.Fields = p.Fields
	return fp, nil
}

func orNone(m string) string {
	if m == "" {
		return "not proxyable"
	}
	return m
}

// resolveFetch finds operation name in spec: in tool first, then in the one
// other tool that has it.
func resolveFetch(spec *Spec, tool, name string) (string, *Operation, error) {
	var found []string
	var op *Operation
	for ti := range spec.Tools {
		t := &spec.Tools[ti]
		for oi := range t.Operations {
			if t.Operations[oi].Name != name {
				continue
			}
			if t.Name == tool {
				return t.Name, &t.Operations[oi], nil
			}
			found = append(found, t.Name)
			op = &t.Operations[oi]
		}
	}
	switch len(found) {
	case 0:
		return "", nil, fmt.Errorf("connector %q declares no operation %q; name a GET operation of the same connector", spec.Connector.FQN, name)
	case 1:
		return found[0], op, nil
	}
	return "", nil, fmt.Errorf("operation %q is declared by tools %s; move the fetched operation into tool %q", name, strings.Join(found, ", "), tool)
}

// approvalPreview checks an operation's approval_preview object (templates
// are the operation's path templates, pathOK whether its path checked).
func (c *checker) approvalPreview(path string, parent obj, pathOK bool, templates []string) *ApprovalPreview {
	n := parent.get("approval_preview")
	if n == nil {
		return nil
	}
	o, ok := c.object(path, n, "fields", "fetch")
	if !ok {
		return nil
	}
	ap := &ApprovalPreview{}
	fields, _ := c.list(o, "fields")
	seen := map[string]bool{}
	for i, fn := range fields {
		fp := index(field(path, "fields"), i)
		switch {
		case fn.kind != jString:
			c.fail(fp, "must be a field name string like \"subject\", got %s", fn.kind)
		case fn.str == "" || len(fn.str) > maxNameLen || strings.ContainsAny(fn.str, "\x00\r\n"):
			c.fail(fp, "%q is not a field name; use the name of a body, query or path field, e.g. \"subject\"", fn.str)
		case seen[fn.str]:
			c.fail(fp, "duplicate field %q; list each field once", fn.str)
		default:
			seen[fn.str] = true
			ap.Fields = append(ap.Fields, fn.str)
		}
	}
	if fn := o.get("fetch"); fn != nil {
		ap.Fetch = c.previewFetch(field(path, "fetch"), fn, pathOK, templates)
	}
	return ap
}

func (c *checker) previewFetch(path string, n *jnode, pathOK bool, templates []string) *PreviewFetch {
	o, ok := c.object(path, n, "operation", "args", "render")
	if !ok {
		return nil
	}
	f := &PreviewFetch{}
	if v, ok := c.str(o, "operation"); ok {
		if v == "" {
			c.fail(field(path, "operation"), `required; name a GET operation of the same connector, e.g. "files.get"`)
		}
		f.Operation = v
	}
	f.Args = c.stringMap(field(path, "args"), o.get("args"), func(at, k, v string) {
		kind, name, ok := ParsePreviewArg(v)
		switch {
		case !ok:
			c.fail(at, "%q must be a literal without braces, or a whole {path.<template>}, {query.<name>} or {body.<field>}", v)
		case kind == PreviewFromPath && pathOK && !slices.Contains(templates, name):
			c.fail(at, "%q refers to template {%s}, which the operation's path does not have; use one of: %s", v, name, listOrNone(setOf(templates)))
		}
	})
	f.Render = c.stringMap(field(path, "render"), o.get("render"), func(at, k, v string) {
		if v == "" || strings.ContainsAny(v, " \x00\r\n") {
			c.fail(at, "%q must name a field of the fetched JSON answer, e.g. \"name\" or \"owner.login\"", v)
		}
	})
	return f
}

// stringMap reads an object of strings at path, checking each entry.
func (c *checker) stringMap(path string, n *jnode, check func(at, k, v string)) map[string]string {
	if n == nil {
		return nil
	}
	o, ok := c.object(path, n, n.keys...)
	if !ok {
		return nil
	}
	out := map[string]string{}
	for _, k := range o.n.keys {
		at := field(path, k)
		v := o.n.vals[k]
		if v.kind != jString {
			c.fail(at, "must be a string, got %s", v.kind)
			continue
		}
		check(at, k, v.str)
		out[k] = v.str
	}
	return out
}

func setOf(l []string) map[string]bool {
	m := map[string]bool{}
	for _, s := range l {
		m[s] = true
	}
	return m
}

// previewRefs checks, once every tool is read, that each approval_preview
// fetch names a GET or HEAD operation of the same connector and fills its
// inputs: every argument is an input, and every path template is given.
func (c *checker) previewRefs(s *Spec) {
	for ti := range s.Tools {
		t := &s.Tools[ti]
		for oi := range t.Operations {
			op := &t.Operations[oi]
			if op.ApprovalPreview == nil || op.ApprovalPreview.Fetch == nil || op.ApprovalPreview.Fetch.Operation == "" {
				continue
			}
			f := op.ApprovalPreview.Fetch
			at := fmt.Sprintf("tools[%d].operations[%d].approval_preview.fetch", ti, oi)
			_, fop, err := resolveFetch(s, t.Name, f.Operation)
			if err != nil {
				c.fail(field(at, "operation"), "%s", err.Error())
				continue
			}
			if fop.Method != "GET" && fop.Method != "HEAD" {
				c.fail(field(at, "operation"), "%q is %s; only a GET or HEAD operation may be fetched for a preview, since fetching must change nothing", f.Operation, orNone(fop.Method))
				continue
			}
			inputs := map[string]bool{}
			for _, in := range fop.Inputs {
				inputs[in.Name] = true
			}
			for _, k := range slices.Sorted(maps.Keys(f.Args)) {
				if !inputs[k] {
					c.fail(field(field(at, "args"), k), "%q is not an input of operation %q; use one of: %s", k, f.Operation, listOrNone(inputs))
				}
			}
			var missing []string
			if t, err := compilePath(fop.Path); err == nil {
				for _, p := range t.params {
					if _, ok := f.Args[p]; !ok {
						missing = append(missing, p)
					}
				}
			}
			sort.Strings(missing)
			if len(missing) > 0 {
				c.fail(field(at, "args"), "operation %q needs its path template(s) %s; add e.g. %q: \"{path.id}\"", f.Operation, strings.Join(missing, ", "), missing[0])
			}
		}
	}
}
