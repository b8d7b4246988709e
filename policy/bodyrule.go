package policy

import (
	"fmt"
	"slices"
	"strings"
)

// This file holds the operation rules that look past method and path into
// the request body: "graphql" (one GraphQL operation shape on a GraphQL
// endpoint) and "mcp" (the tools of a Streamable HTTP MCP endpoint). It
// declares their spec types, validates them with their JSON locations and
// compiles them into the plans the proxy checks a parsed body against
// (graphql.go and mcp.go read bodies; the proxy only reads them when a
// request's path holds such operations).

// GraphQLOperationType is the type of a GraphQL operation. The zero value
// is not a type and allows nothing.
type GraphQLOperationType string

// GraphQL operation types.
const (
	GraphQLQuery        GraphQLOperationType = "query"
	GraphQLMutation     GraphQLOperationType = "mutation"
	GraphQLSubscription GraphQLOperationType = "subscription"
)

// String returns the GraphQL keyword, "unspecified" for the zero value.
func (t GraphQLOperationType) String() string {
	if t == "" {
		return "unspecified"
	}
	return string(t)
}

// GraphQLRule is an operation's "graphql" object.
type GraphQLRule struct {
	// Type is the operation type the request must execute.
	Type GraphQLOperationType `json:"type"`
	// Fields are the top-level fields of Type the request may select;
	// "__typename" is always allowed, "__schema" and "__type"
	// (introspection) only when listed.
	Fields []string `json:"fields"`
	// PersistedHashes are the lower-case hex SHA-256 hashes of persisted
	// queries the request may name without sending the query; empty
	// refuses a request that carries only a hash.
	PersistedHashes []string `json:"persisted_hashes,omitempty"`
}

// MCPRule is an operation's "mcp" object.
type MCPRule struct {
	// Tools are the tool names tools/call may name: exact names, or a
	// prefix followed by one "*" ("search_*").
	Tools []string `json:"tools,omitempty"`
	// ApprovalTools are tools a person must approve per call, in the same
	// form; they need not be repeated in Tools.
	ApprovalTools []string `json:"approval_tools,omitempty"`
	// Resources allows the resources/* methods; nil means true.
	Resources *bool `json:"resources,omitempty"`
	// Prompts allows the prompts/* methods; nil means true.
	Prompts *bool `json:"prompts,omitempty"`
}

// BodyKind says which rule of an operation inspects request bodies. The
// zero value inspects nothing.
type BodyKind uint8

// Body kinds.
const (
	BodyNone BodyKind = iota
	BodyGraphQL
	BodyMCP
)

// String returns "none", "graphql" or "mcp".
func (k BodyKind) String() string {
	switch k {
	case BodyGraphQL:
		return "graphql"
	case BodyMCP:
		return "mcp"
	}
	return "none"
}

// maxGraphQLName bounds a declared GraphQL field name.
const maxGraphQLName = 128

// IsGraphQLName reports whether s is a GraphQL Name: /[_A-Za-z][_0-9A-Za-z]*/.
func IsGraphQLName(s string) bool {
	if s == "" || len(s) > maxGraphQLName {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case b == '_', b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z':
		case b >= '0' && b <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// graphQLRule checks an operation's "graphql" object.
func (c *checker) graphQLRule(path string, parent obj, op *Operation) *GraphQLRule {
	n := parent.get("graphql")
	if n == nil {
		return nil
	}
	o, ok := c.object(path, n, "type", "fields", "persisted_hashes")
	if !ok {
		return nil
	}
	g := &GraphQLRule{}
	if op.Method != "" && op.Method != "POST" && op.Method != "GET" {
		c.fail(path, "a GraphQL request is a POST (or a GET with ?query=), but the method is %q; use \"method\": \"POST\" or drop \"graphql\"", op.Method)
	}
	if op.WebSocket {
		c.fail(path, "GraphQL over WebSocket is not inspected; drop \"websocket\" or \"graphql\"")
	}
	if v, ok := c.str(o, "type"); ok {
		g.Type = GraphQLOperationType(v)
		switch g.Type {
		case GraphQLQuery, GraphQLMutation, GraphQLSubscription:
		case "":
			c.fail(field(path, "type"), `required; use "query", "mutation" or "subscription"`)
		default:
			c.fail(field(path, "type"), `%q is not a GraphQL operation type; use "query", "mutation" or "subscription"`, v)
		}
	}
	fields, ok := c.list(o, "fields")
	if ok && len(fields) == 0 {
		c.fail(field(path, "fields"), `at least one top-level field is required, e.g. ["viewer"]; an operation that allows every field would allow deleting things too`)
	}
	seen := map[string]bool{}
	for i, fn := range fields {
		fp := index(field(path, "fields"), i)
		switch {
		case fn.kind != jString:
			c.fail(fp, "must be a field name string like \"viewer\", got %s", fn.kind)
		case fn.str == "*":
			c.fail(fp, `"*" would allow every field; list the fields, e.g. ["viewer", "repository"]`)
		case !IsGraphQLName(fn.str):
			c.fail(fp, "%q is not a GraphQL field name; use letters, digits and '_', not starting with a digit (at most %d characters), e.g. \"viewer\"", fn.str, maxGraphQLName)
		case seen[fn.str]:
			c.fail(fp, "duplicate field %q; list each field once", fn.str)
		case fn.str == "__typename":
			c.warn(fp, "\"__typename\" is always allowed; it need not be listed")
		default:
			seen[fn.str] = true
			g.Fields = append(g.Fields, fn.str)
		}
	}
	hashes, _ := c.list(o, "persisted_hashes")
	for i, hn := range hashes {
		hp := index(field(path, "persisted_hashes"), i)
		if hn.kind != jString || !isSHA256Hex(hn.str) {
			c.fail(hp, "must be a SHA-256 hash as 64 lower-case hex digits (the persisted query's sha256Hash)")
			continue
		}
		if !slices.Contains(g.PersistedHashes, hn.str) {
			g.PersistedHashes = append(g.PersistedHashes, hn.str)
		}
	}
	return g
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}

// mcpRule checks an operation's "mcp" object.
func (c *checker) mcpRule(path string, parent obj, op *Operation) *MCPRule {
	n := parent.get("mcp")
	if n == nil {
		return nil
	}
	o, ok := c.object(path, n, "tools", "approval_tools", "resources", "prompts")
	if !ok {
		return nil
	}
	m := &MCPRule{}
	if parent.get("graphql") != nil {
		c.fail(path, "an operation is either a GraphQL or an MCP endpoint; drop \"graphql\" or \"mcp\"")
	}
	if op.Method != "" && op.Method != "POST" {
		c.fail(path, "MCP JSON-RPC requests are POSTs, but the method is %q; use \"method\": \"POST\" (declare the GET stream and DELETE as plain operations)", op.Method)
	}
	seen := map[string]string{}
	m.Tools = c.toolPatterns(field(path, "tools"), o, "tools", seen)
	m.ApprovalTools = c.toolPatterns(field(path, "approval_tools"), o, "approval_tools", seen)
	if len(m.Tools) == 0 && len(m.ApprovalTools) == 0 {
		c.warn(path, "no tools or approval_tools: every tools/call is refused; list the tools the agent may call, e.g. \"tools\": [\"get_issue\"]")
	}
	for _, key := range []string{"resources", "prompts"} {
		if v := o.get(key); v != nil {
			b := c.boolean(o, key)
			if v.kind == jBool {
				if key == "resources" {
					m.Resources = &b
				} else {
					m.Prompts = &b
				}
			}
		}
	}
	return m
}

// toolPatterns reads a list of MCP tool names or "prefix*" patterns.
func (c *checker) toolPatterns(path string, o obj, key string, seen map[string]string) []string {
	nodes, _ := c.list(o, key)
	var out []string
	for i, tn := range nodes {
		tp := index(path, i)
		if tn.kind != jString {
			c.fail(tp, "must be a tool name string like \"get_issue\", got %s", tn.kind)
			continue
		}
		if problem := MCPToolPatternProblem(tn.str); problem != "" {
			c.fail(tp, "%s", problem)
			continue
		}
		if first, dup := seen[tn.str]; dup {
			c.fail(tp, "tool %q is listed twice (%s has it too); list it once, in approval_tools when a person must approve it", tn.str, first)
			continue
		}
		seen[tn.str] = tp
		out = append(out, tn.str)
	}
	return out
}

// maxMCPToolName bounds an MCP tool name, as the MCP specification does.
const maxMCPToolName = 128

// MCPToolPatternProblem checks an MCP tool name or "prefix*" pattern: it
// returns "" when p is valid, else what is wrong and how to fix it.
func MCPToolPatternProblem(p string) string {
	name, glob := strings.CutSuffix(p, "*")
	switch {
	case p == "" || p == "*":
		return fmt.Sprintf("%q would not name a tool; use a tool name like \"get_issue\" or a prefix like \"search_*\"", p)
	case len(name) > maxMCPToolName:
		return fmt.Sprintf("%q is longer than %d characters; MCP tool names are at most %d", p, maxMCPToolName, maxMCPToolName)
	case strings.Contains(name, "*"):
		return fmt.Sprintf("%q may hold one \"*\", at its end only (\"search_*\")", p)
	case !isMCPToolName(name):
		return fmt.Sprintf("%q may only contain letters, digits, '_', '-', '.' and '/' (and a trailing \"*\")", p)
	}
	_ = glob
	return ""
}

// isMCPToolName reports whether s uses only the characters MCP tool
// names use.
func isMCPToolName(s string) bool {
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9', b == '_', b == '-', b == '.', b == '/':
		default:
			return false
		}
	}
	return true
}

// GraphQLPlan is an operation's compiled "graphql" rule. Read it, never
// modify it.
type GraphQLPlan struct {
	typ    GraphQLOperationType
	fields map[string]bool
	list   []string
	hashes []string
}

// Type returns the operation type the rule allows.
func (p *GraphQLPlan) Type() GraphQLOperationType { return p.typ }

// Fields returns the declared top-level fields in spec order.
func (p *GraphQLPlan) Fields() []string { return p.list }

// AllowsField reports whether the top-level field name may be selected:
// "__typename" always, anything else only when declared.
func (p *GraphQLPlan) AllowsField(name string) bool {
	return name == "__typename" || p.fields[name]
}

// AllowsHash reports whether the persisted query hash is declared.
func (p *GraphQLPlan) AllowsHash(h string) bool { return slices.Contains(p.hashes, h) }

// MCPPlan is an operation's compiled "mcp" rule. Read it, never modify it.
type MCPPlan struct {
	tools, approval    []string
	resources, prompts bool
}

// Tools returns the tool names and patterns tools/call may name without
// approval, in spec order.
func (p *MCPPlan) Tools() []string { return p.tools }

// ApprovalTools returns those a person must approve, in spec order.
func (p *MCPPlan) ApprovalTools() []string { return p.approval }

// AllowsResources reports whether resources/* methods pass.
func (p *MCPPlan) AllowsResources() bool { return p.resources }

// AllowsPrompts reports whether prompts/* methods pass.
func (p *MCPPlan) AllowsPrompts() bool { return p.prompts }

// Tool reports whether tools/call may name the tool, and whether a person
// must approve the call. An approval pattern wins over a plain one.
func (p *MCPPlan) Tool(name string) (allowed, approval bool) {
	if matchToolPatterns(p.approval, name) {
		return true, true
	}
	return matchToolPatterns(p.tools, name), false
}

func matchToolPatterns(patterns []string, name string) bool {
	for _, pat := range patterns {
		if prefix, glob := strings.CutSuffix(pat, "*"); glob {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		} else if pat == name {
			return true
		}
	}
	return false
}

// compileBodyRules compiles op's graphql and mcp rules into c.
func compileBodyRules(c *CompiledOperation, op *Operation) {
	if g := op.GraphQL; g != nil {
		p := &GraphQLPlan{typ: g.Type, fields: make(map[string]bool, len(g.Fields)), list: g.Fields, hashes: g.PersistedHashes}
		for _, f := range g.Fields {
			p.fields[f] = true
		}
		c.graphql, c.body = p, BodyGraphQL
	}
	if m := op.MCP; m != nil {
		c.mcp = &MCPPlan{tools: m.Tools, approval: m.ApprovalTools,
			resources: m.Resources == nil || *m.Resources, prompts: m.Prompts == nil || *m.Prompts}
		if c.body == BodyNone {
			c.body = BodyMCP
		}
	}
}

// GraphQL returns the compiled graphql rule; nil when the operation has
// none.
func (c *CompiledOperation) GraphQL() *GraphQLPlan { return c.graphql }

// MCP returns the compiled mcp rule; nil when the operation has none.
func (c *CompiledOperation) MCP() *MCPPlan { return c.mcp }

// Body returns which rule inspects the operation's request bodies.
func (c *CompiledOperation) Body() BodyKind { return c.body }

// Inspection is the set of operations a request's path matched when they
// carry a graphql or an mcp rule: the proxy reads the body and asks the
// Inspection which one (if any) the request is. Read it, never modify it.
type Inspection struct {
	kind  BodyKind
	cands []*Match
	// allowed lists the candidates for refusals, sorted.
	allowed []string
}

// newInspection returns the inspection of cands, or nil when they cannot
// be told apart by their bodies: some carry no rule, or rules of both
// kinds.
func newInspection(cands []*opEntry, path string) *Inspection {
	kind := cands[0].c.body
	if kind == BodyNone {
		return nil
	}
	in := &Inspection{kind: kind, cands: make([]*Match, len(cands)), allowed: make([]string, len(cands))}
	for i, e := range cands {
		if e.c.body != kind {
			return nil
		}
		in.cands[i] = e.match(path)
		in.allowed[i] = describeBodyOp(e)
	}
	slices.Sort(in.allowed)
	return in
}

// describeBodyOp renders a candidate for a refusal's list of what is
// allowed: "query viewer, repository (tool operation)".
func describeBodyOp(e *opEntry) string {
	who := " (" + e.tool + " " + e.c.op.Name + ")"
	if g := e.c.graphql; g != nil {
		s := string(g.typ) + " " + strings.Join(g.list, ", ")
		if len(g.hashes) > 0 {
			s += fmt.Sprintf(" or %d persisted quer%s", len(g.hashes), map[bool]string{true: "y", false: "ies"}[len(g.hashes) == 1])
		}
		return s + who
	}
	m := e.c.mcp
	s := "MCP tools " + strings.Join(m.tools, ", ")
	if len(m.tools) == 0 {
		s = "MCP tools (none)"
	}
	if len(m.approval) > 0 {
		s += "; with approval " + strings.Join(m.approval, ", ")
	}
	return s + who
}

// Kind returns which rule the candidates carry.
func (in *Inspection) Kind() BodyKind { return in.kind }

// Candidates returns the matched operations, in the order Decide found
// them. Read it, never modify it.
func (in *Inspection) Candidates() []*Match { return in.cands }

// Allowed returns the candidates as a refusal lists them, sorted. Read
// it, never modify it.
func (in *Inspection) Allowed() []string { return in.allowed }
