package policy

import (
	"fmt"
	"slices"
	"strings"
)

// This file holds the compiled form of one operation: what Compile derives
// from its spec once (path template, normalized hosts, typed audit sources,
// input schema), so that the API and the proxy read facts instead of parsing
// the spec again per call. The spec types stay the file schema; these are
// the runtime rules (smokescreen's split, Caddy's provision step).

// CompiledOperation is an operation as Compile prepared it. It is immutable
// and shared by every Match of the operation; a snapshot's Lookup and Decide
// hand out pointers to it.
type CompiledOperation struct {
	op     *Operation
	tmpl   *PathTemplate
	hosts  []string
	audit  []AuditSource
	inputs InputSchema
	// preview is the compiled approval_preview; nil when there is none.
	preview *PreviewPlan
	// body is the rule that inspects request bodies, graphql or mcp
	// (bodyrule.go); BodyNone, the zero value, inspects nothing.
	body    BodyKind
	graphql *GraphQLPlan
	mcp     *MCPPlan
}

// Operation returns the snapshot's copy of the spec operation; read it,
// never modify it.
func (c *CompiledOperation) Operation() *Operation { return c.op }

// Template returns the compiled path; nil when the operation is not
// proxyable (see Operation.IsProxyable).
func (c *CompiledOperation) Template() *PathTemplate { return c.tmpl }

// Hosts returns the operation's hosts as Decide compares them, normalized
// host:port (":443" when the spec gives no port), distinct, in spec order;
// nil when the operation is not proxyable. Read it, never modify it.
func (c *CompiledOperation) Hosts() []string { return c.hosts }

// AuditSources returns the operation's audit[] entries with their sources
// parsed, in spec order; nil when it has none. Read it, never modify it.
func (c *CompiledOperation) AuditSources() []AuditSource { return c.audit }

// Preview returns the operation's compiled approval_preview; nil when it
// declares none. Read it, never modify it.
func (c *CompiledOperation) Preview() *PreviewPlan { return c.preview }

// Inputs returns the arguments the operation takes.
func (c *CompiledOperation) Inputs() *InputSchema { return &c.inputs }

// compileOperation prepares op. Its path and hosts are compiled only when
// the operation is proxyable, and a path or host that would make matching
// unsound is an error naming the field under at ("tools[0].operations[1]").
func compileOperation(op *Operation, at string) (CompiledOperation, error) {
	c := CompiledOperation{op: op}
	compileBodyRules(&c, op)
	if len(op.Audit) > 0 {
		c.audit = make([]AuditSource, len(op.Audit))
		for i, f := range op.Audit {
			kind, name := ParseAuditSource(f.Source)
			c.audit[i] = AuditSource{field: f.Name, kind: kind, name: name, redact: f.Redact}
		}
	}
	if op.IsProxyable() {
		t, err := compilePath(op.Path)
		if err != nil {
			return c, fmt.Errorf("%s.path: %w", at, err)
		}
		c.tmpl = t
		for hi, h := range op.Hosts {
			name := normalizeHost(h)
			if name == "" {
				return c, fmt.Errorf("%s.hosts[%d]: %q is not a valid host[:port]; use a DNS name or IP literal (IPv6 in brackets) with an optional port, e.g. \"api.example.com\" or \"api.example.com:8443\"", at, hi, h)
			}
			if !slices.Contains(c.hosts, name) {
				c.hosts = append(c.hosts, name)
			}
		}
	}
	c.inputs = InputSchema{inputs: op.Inputs}
	for _, in := range op.Inputs {
		c.inputs.names = append(c.inputs.names, in.Name)
	}
	if c.tmpl != nil {
		for _, p := range c.tmpl.params {
			if _, declared := c.inputs.Input(p); !declared {
				c.inputs.names = append(c.inputs.names, p)
			}
		}
	}
	return c, nil
}

// PathTemplate is a compiled operation path: its segments, literal or
// {name} templates, under the canonical segment rules requests follow.
type PathTemplate struct {
	path   string
	segs   []TemplateSegment
	params []string
}

// String returns the path as the spec writes it.
func (p *PathTemplate) String() string { return p.path }

// Segments returns the segments after the leading "/", in order; a path
// ending in "/" ends with an empty literal; nil for a nil template. Read
// it, never modify it.
func (p *PathTemplate) Segments() []TemplateSegment {
	if p == nil {
		return nil
	}
	return p.segs
}

// Params returns the template names in path order; nil when the path is
// all literal or the template is nil. Read it, never modify it.
func (p *PathTemplate) Params() []string {
	if p == nil {
		return nil
	}
	return p.params
}

// HasParam reports whether the path has the template {name}; false for a
// nil template.
func (p *PathTemplate) HasParam(name string) bool {
	return p != nil && slices.Contains(p.params, name)
}

// TemplateSegment is one segment of a PathTemplate: a literal, a whole
// "{name}" template, or a template followed by a custom method,
// "{name}:method" (see ParseTemplateSegment).
type TemplateSegment struct {
	raw     string // as the spec writes it, percent-encoded
	lit     string // decoded literal; "" for a trailing slash
	param   string // template name when isParam
	suffix  string // ":method" after the template, or ""
	isParam bool
}

// Raw returns the segment as the spec writes it: a literal still
// percent-encoded, or the template with its braces and custom method.
func (sg TemplateSegment) Raw() string { return sg.raw }

// IsParam reports whether the segment is a template.
func (sg TemplateSegment) IsParam() bool { return sg.isParam }

// Param returns the template name; "" for a literal.
func (sg TemplateSegment) Param() string { return sg.param }

// Suffix returns the custom method after the template, ":method"; "" for a
// whole-segment template or a literal.
func (sg TemplateSegment) Suffix() string { return sg.suffix }

// rank orders segment kinds by specificity: a literal, then a template with
// a custom method, then a whole-segment template.
func (sg *TemplateSegment) rank() int {
	switch {
	case !sg.isParam:
		return 0
	case sg.suffix != "":
		return 1
	}
	return 2
}

// AuditSourceKind is where an audit field takes its value. The zero value
// is a source this package does not know, which yields no value.
type AuditSourceKind uint8

// Audit source kinds, the prefixes of AuditField.Source.
const (
	AuditSourceUnknown AuditSourceKind = iota
	// AuditFromArgs is "args.<input>": a run endpoint argument.
	AuditFromArgs
	// AuditFromPath is "path.<template name>": a value of the matched path.
	AuditFromPath
	// AuditFromQuery is "query.<name>": a query parameter of the request.
	AuditFromQuery
)

// String returns the source prefix ("args", "path", "query"), "unknown"
// for the zero value.
func (k AuditSourceKind) String() string {
	switch k {
	case AuditFromArgs:
		return "args"
	case AuditFromPath:
		return "path"
	case AuditFromQuery:
		return "query"
	}
	return "unknown"
}

// ParseAuditSource splits an AuditField.Source, "<kind>.<name>", into its
// kind and name. The kind is AuditSourceUnknown when the prefix is not
// args, path or query; the name is not checked (ParseSpec does that).
func ParseAuditSource(s string) (AuditSourceKind, string) {
	prefix, name, _ := strings.Cut(s, ".")
	switch prefix {
	case "args":
		return AuditFromArgs, name
	case "path":
		return AuditFromPath, name
	case "query":
		return AuditFromQuery, name
	}
	return AuditSourceUnknown, name
}

// AuditSource is one compiled audit[] entry of an operation: the field it
// records and where its value comes from.
type AuditSource struct {
	field  string
	kind   AuditSourceKind
	name   string
	redact bool
}

// Field returns the audit field's name, the key in the audit event.
func (a AuditSource) Field() string { return a.field }

// Kind returns where the value comes from.
func (a AuditSource) Kind() AuditSourceKind { return a.kind }

// Name returns the input, template or query parameter the value comes from.
func (a AuditSource) Name() string { return a.name }

// IsRedacted reports whether the field records a digest instead of the value.
func (a AuditSource) IsRedacted() bool { return a.redact }

// InputSchema is the arguments an operation takes: its declared inputs and
// any path template the spec did not declare as one (which ParseSpec
// refuses, but Compile accepts).
type InputSchema struct {
	inputs []Input
	names  []string
}

// Inputs returns the declared inputs in spec order, types filled in by
// ParseSpec. Read it, never modify it.
func (s *InputSchema) Inputs() []Input { return s.inputs }

// Input returns the declared input called name.
func (s *InputSchema) Input(name string) (Input, bool) {
	for _, in := range s.inputs {
		if in.Name == name {
			return in, true
		}
	}
	return Input{}, false
}

// Names returns every argument name the operation accepts: the declared
// inputs in spec order, then undeclared path templates in path order; nil
// when it takes none. Read it, never modify it.
func (s *InputSchema) Names() []string { return s.names }
