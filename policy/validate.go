package policy

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/aileron-dev/aileron-proxy/internal/hostport"
)

// The validation rules of aileron.connector.v1. Each check reports every
// problem it finds with its JSON path, in document order, and says how to fix
// it; docs/connector-spec.md lists the same rules.

func (c *checker) spec(root *jnode) *Spec {
	o, ok := c.object("", root, "schema_version", "connector", "tools")
	if !ok {
		return nil
	}
	s := &Spec{}
	if v, ok := c.str(o, "schema_version"); ok {
		switch {
		case v == "":
			c.fail("schema_version", "required; set it to %q", SchemaVersion)
		case v != SchemaVersion:
			c.fail("schema_version", "%q is not supported; set it to %q", v, SchemaVersion)
		}
		s.SchemaVersion = v
	}
	s.Connector = c.connector(o)
	tools, ok := c.list(o, "tools")
	if ok && len(tools) == 0 {
		c.fail("tools", `at least one tool is required; add one like {"name": "example", "operations": [...]}`)
	}
	names := map[string]string{} // tool name → path of its first use
	cmds := map[string]string{}  // command → path of the tool that has it
	for i, tn := range tools {
		s.Tools = append(s.Tools, c.tool(index("tools", i), tn, names, cmds))
	}
	c.previewRefs(s)
	return s
}

func (c *checker) connector(parent obj) ConnectorMeta {
	var m ConnectorMeta
	o, ok := c.object("connector", parent.get("connector"), "fqn", "version", "description")
	if !ok {
		return m
	}
	if v, ok := c.str(o, "fqn"); ok {
		if v == "" {
			c.fail("connector.fqn", `required; set it to the connector's name, e.g. "github://acme/aileron-connector-google"`)
		} else if f, problems := parseFQN(v); len(problems) > 0 {
			for _, p := range problems {
				c.fail("connector.fqn", "%s", p)
			}
		} else {
			v = f.String()
		}
		m.FQN = v
	}
	if v, ok := c.str(o, "version"); ok {
		if v != "" && !IsValidVersion(v) {
			if IsValidVersion(strings.TrimPrefix(v, "v")) {
				c.fail("connector.version", "%q must be a semantic version without a leading \"v\"; use %q", v, strings.TrimPrefix(v, "v"))
			} else {
				c.fail("connector.version", "%q must be a semantic version MAJOR.MINOR.PATCH[-prerelease][+build], e.g. \"1.2.3\", or be left out", v)
			}
		}
		m.Version = v
	}
	m.Description, _ = c.str(o, "description")
	return m
}

// name checks a tool, operation, input or audit field name and reports
// whether it is valid.
func (c *checker) name(path, what, v, example string) bool {
	if msg := NameProblem(what, v, example); msg != "" {
		c.fail(path, "%s", msg)
		return false
	}
	return true
}

// NameProblem checks v as a tool, operation, input or audit field name (or
// any name with the same rules, e.g. an action's): it returns "" when v is
// valid, else a message that says how to fix it. what names the kind of
// name and example is a valid one, for the message of an empty v.
func NameProblem(what, v, example string) string {
	switch {
	case v == "":
		return fmt.Sprintf("required; name the %s, e.g. %q", what, example)
	case len(v) > maxNameLen:
		return fmt.Sprintf("%q is longer than %d characters; use a shorter name", v, maxNameLen)
	case !IsValidName(v):
		return fmt.Sprintf("%q may only contain letters, digits, '.', '_', ':' and '-'", v)
	}
	return ""
}

// uniqueName checks the name v of the object at path with c.name and refuses
// a repeat: seen maps the names already used within the enclosing object
// (described by within, e.g. "a tool") to the path of their first use.
func (c *checker) uniqueName(path, what, v, example, within string, seen map[string]string) {
	np := field(path, "name")
	if !c.name(np, what, v, example) {
		return
	}
	if first, dup := seen[v]; dup {
		c.fail(np, "duplicate %s name %q (%s has it too); %s names must be unique within %s", what, v, first, what, within)
		return
	}
	seen[v] = path
}

func (c *checker) tool(path string, n *jnode, names, cmds map[string]string) Tool {
	var t Tool
	o, ok := c.object(path, n, "name", "description", "operations")
	if !ok {
		return t
	}
	np := field(path, "name")
	if v, ok := c.str(o, "name"); ok {
		t.Name = v
		if c.name(np, "tool", v, "github") {
			cmd := ToolCommand(v)
			if first, dup := names[v]; dup {
				c.fail(np, "duplicate tool name %q (%s has it too); tool names must be unique", v, first)
			} else if first, dup := cmds[cmd]; dup {
				c.fail(np, "%q gives the command %q, like the tool at %s; tool names must differ after lower-casing", v, cmd, first)
			} else if !IsSafeCommandName(cmd) {
				c.fail(np, "%q cannot be a command name: the tool's command %q must start with a letter or digit and contain only letters, digits, '.', '_' and '-' (no ':')%s",
					v, cmd, suggestCommand(cmd))
			}
			if _, dup := names[v]; !dup {
				names[v] = path
			}
			if _, dup := cmds[cmd]; !dup {
				cmds[cmd] = path
			}
		}
	}
	t.Description, _ = c.str(o, "description")
	ops, ok := c.list(o, "operations")
	if ok && len(ops) == 0 {
		c.fail(field(path, "operations"), `at least one operation is required; add one like {"name": "items.list", "method": "GET", "path": "/items", "hosts": ["api.example.com"]}`)
	}
	opNames := map[string]string{}
	for i, on := range ops {
		t.Operations = append(t.Operations, c.operation(index(field(path, "operations"), i), on, opNames))
	}
	return t
}

// suggestCommand proposes a safe spelling of cmd, as "; use %q", or "".
func suggestCommand(cmd string) string {
	s := strings.TrimLeft(strings.ReplaceAll(cmd, ":", "-"), "._-")
	if !IsSafeCommandName(s) {
		return ""
	}
	return fmt.Sprintf("; use e.g. %q", s)
}

// isMethod reports whether m is one of the HTTP methods a spec may use.
func isMethod(m string) bool {
	switch m {
	case "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE":
		return true
	}
	return false
}

func (c *checker) operation(path string, n *jnode, names map[string]string) Operation {
	var op Operation
	o, ok := c.object(path, n, "name", "summary", "description", "method", "path", "hosts",
		"idempotency", "approval", "credential", "websocket", "inputs", "audit", "approval_preview", "graphql", "mcp")
	if !ok {
		return op
	}
	if v, ok := c.str(o, "name"); ok {
		op.Name = v
		c.uniqueName(path, "operation", v, "items.list", "a tool", names)
	}
	op.Summary, _ = c.str(o, "summary")
	op.Description, _ = c.str(o, "description")

	inputs := peekNames(o.get("inputs"))
	var missing []string
	if v, ok := c.str(o, "method"); ok {
		op.Method = strings.ToUpper(v)
		if v == "" {
			missing = append(missing, "method")
		} else if !isMethod(op.Method) {
			c.fail(field(path, "method"), "%q is not supported; use GET, HEAD, POST, PUT, PATCH or DELETE", v)
		}
	}
	pathOK := false
	var templates []string
	if v, ok := c.str(o, "path"); ok {
		op.Path = v
		if v == "" {
			missing = append(missing, "path")
		} else {
			before := len(c.problems)
			templates = c.checkPath(field(path, "path"), v, inputs)
			pathOK = len(c.problems) == before
		}
	}
	hosts, ok := c.list(o, "hosts")
	if ok && len(hosts) == 0 {
		missing = append(missing, "hosts")
	}
	op.Hosts = c.hosts(field(path, "hosts"), hosts)
	if len(missing) > 0 {
		c.warn(path, "not proxyable: it declares no %s; the proxy refuses its calls until it declares method, path and hosts",
			joinOr(missing))
	}

	op.Idempotency = Idempotency(c.enum(o, "idempotency", `"idempotent" or "not_idempotent"`,
		string(Idempotent), string(NotIdempotent)))
	op.Approval = Approval(c.enum(o, "approval", `"none" or "required"`,
		string(ApprovalNone), string(ApprovalRequired)))
	op.Credential = CredentialKind(c.enum(o, "credential", `"none", "oauth2", "api_key", "bearer", "basic" or "aws_sigv4"`,
		string(CredentialNone), string(CredentialOAuth2), string(CredentialAPIKey), string(CredentialBearer), string(CredentialBasic), string(CredentialAWSSigV4)))

	if op.WebSocket = c.boolean(o, "websocket"); op.WebSocket && op.Method != "" && op.Method != "GET" {
		c.fail(field(path, "websocket"), "a WebSocket handshake is a GET, but the method is %q; use \"method\": \"GET\" or drop \"websocket\"", op.Method)
	}

	op.Inputs = c.inputs(field(path, "inputs"), o)
	op.Audit = c.audit(field(path, "audit"), o, op.Path, pathOK, templates, inputs)
	op.ApprovalPreview = c.approvalPreview(field(path, "approval_preview"), o, pathOK, templates)
	op.GraphQL = c.graphQLRule(field(path, "graphql"), o, &op)
	op.MCP = c.mcpRule(field(path, "mcp"), o, &op)
	return op
}

// peekNames returns the string names of the objects in an inputs array,
// without reporting anything (inputs reports their problems in order).
func peekNames(n *jnode) map[string]bool {
	set := map[string]bool{}
	if n == nil || n.kind != jArray {
		return set
	}
	for _, in := range n.arr {
		if in.kind == jObject {
			if v := in.vals["name"]; v != nil && v.kind == jString && IsValidName(v.str) {
				set[v.str] = true
			}
		}
	}
	return set
}

// enum reads an optional string field that must be one of allowed.
func (c *checker) enum(o obj, key, hint string, allowed ...string) string {
	v, ok := c.str(o, key)
	if !ok || v == "" {
		return ""
	}
	if !slices.Contains(allowed, v) {
		c.fail(field(o.path, key), "%q is not valid; use %s, or leave it out", v, hint)
	}
	return v
}

func (c *checker) hosts(path string, nodes []*jnode) []string {
	var out []string
	seen := map[string]int{}
	for i, hn := range nodes {
		hp := index(path, i)
		if hn.kind != jString {
			c.fail(hp, "must be a string like \"api.example.com\", got %s", hn.kind)
			continue
		}
		parsed, err := hostport.New(hn.str)
		if err != nil {
			if strings.Contains(hn.str, "@") {
				err = fmt.Errorf("%w, and declare credentials with the operation's credential field", err)
			}
			c.fail(hp, "%s", err.Error())
			continue
		}
		norm := parsed.String()
		key := parsed.WithDefaultPort(443).String() // NormalizeHost(norm), without parsing it again
		if first, dup := seen[key]; dup {
			c.warn(hp, "duplicate host %q (same as %s); it is ignored", hn.str, index(path, first))
			continue
		}
		seen[key] = i
		out = append(out, norm)
	}
	return out
}

// checkPath validates an operation path and returns its template names.
func (c *checker) checkPath(at, p string, inputs map[string]bool) []string {
	if p[0] != '/' {
		c.fail(at, "%q must start with \"/\"", p)
		return nil
	}
	if i := strings.IndexByte(p, '?'); i >= 0 {
		c.fail(at, "%q must not contain a query (%q); declare query parameters as inputs instead", p, p[i:])
		return nil
	}
	if i := strings.IndexByte(p, '#'); i >= 0 {
		c.fail(at, "%q must not contain a fragment (%q); remove it", p, p[i:])
		return nil
	}
	var templates []string
	segs := strings.Split(p[1:], "/")
	for i, seg := range segs {
		switch {
		case seg == "":
			if i < len(segs)-1 {
				c.fail(at, "%q has an empty segment (\"//\"); remove the extra \"/\"", p)
			}
		case strings.ContainsAny(seg, "{}"):
			name, _, ok := ParseTemplateSegment(seg)
			_, after, closed := strings.Cut(seg, "}")
			switch {
			case !ok && strings.HasPrefix(seg, "{") && closed && strings.HasPrefix(after, ":") && !strings.ContainsAny(after, "{}"):
				c.fail(at, "custom method %q of segment %q of %q must start with a letter and use only letters, digits, '.', '_' and '-'", after, seg, p)
			case !ok:
				c.fail(at, "segment %q of %q mixes a template with other text; a template must be a whole segment like \"/{id}\", or be followed by a custom method like \"/{model}:generateContent\"", seg, p)
			case !IsValidName(name):
				c.fail(at, "template %q of %q must be {name} where name uses letters, digits, '.', '_', ':' and '-'", seg, p)
			case slices.Contains(templates, name):
				c.fail(at, "template {%s} appears more than once in %q; use distinct names", name, p)
			case !inputs[name]:
				templates = append(templates, name)
				c.fail(at, "template {%s} is not a declared input; add {\"name\": %q, \"required\": true} to inputs", name, name)
			default:
				templates = append(templates, name)
			}
		default:
			if problem := checkSegment(seg); problem != "" {
				c.fail(at, "%s", segmentProblem(p, seg, problem))
			}
		}
	}
	return templates
}

// segmentProblem phrases a checkSegment problem with literal segment seg
// of spec path p, and says how to fix it.
func segmentProblem(p, seg, problem string) string {
	switch problem {
	case pathUnencoded:
		for _, r := range seg {
			if r >= 0x80 || !isPathByte(byte(r)) {
				return fmt.Sprintf("%q contains %q, which must be percent-encoded (e.g. %q)", p, string(r), pctEncode(string(r)))
			}
		}
	case pathBadEscape:
		return fmt.Sprintf("segment %q of %q has an invalid percent-encoding; '%%' must be followed by two hex digits", seg, p)
	case pathDotSegment:
		return fmt.Sprintf("%q must not contain dot segments (\".\", \"..\", also percent-encoded or followed by \";...\"); write the path without them", p)
	case pathEncodedSlash, pathEncodedBSlash, pathBackslash:
		return fmt.Sprintf("segment %q of %q holds a '/' or '\\' (raw or percent-encoded); use separate segments or a {template}", seg, p)
	case pathControl:
		return fmt.Sprintf("segment %q of %q holds a control character (raw or percent-encoded); remove it", seg, p)
	case pathDoubleEscape:
		return fmt.Sprintf("segment %q of %q is percent-encoded twice (%%25 followed by two hex digits); encode it once", seg, p)
	}
	return fmt.Sprintf("segment %q of %q is refused: %s", seg, p, problem)
}

func pctEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "%%%02X", s[i])
	}
	return b.String()
}

func (c *checker) inputs(path string, o obj) []Input {
	nodes, _ := c.list(o, "inputs")
	var out []Input
	seen := map[string]string{}
	for i, n := range nodes {
		ip := index(path, i)
		inObj, ok := c.object(ip, n, "name", "type", "required", "description")
		if !ok {
			continue
		}
		var in Input
		if v, ok := c.str(inObj, "name"); ok {
			in.Name = v
			c.uniqueName(ip, "input", v, "id", "an operation", seen)
		}
		if v, ok := c.str(inObj, "type"); ok {
			in.Type = InputType(v)
			if v == "" {
				in.Type = InputString
			} else if !isInputType(InputType(v)) {
				c.fail(field(ip, "type"), "%q is not a valid input type; use string, integer, number, boolean, array or object (default string)", v)
			}
		}
		in.Required = c.boolean(inObj, "required")
		in.Description, _ = c.str(inObj, "description")
		out = append(out, in)
	}
	return out
}

// isInputType reports whether t is one of the input types.
func isInputType(t InputType) bool {
	switch t {
	case InputString, InputInteger, InputNumber, InputBoolean, InputArray, InputObject:
		return true
	}
	return false
}

func (c *checker) audit(path string, o obj, opPath string, pathOK bool, templates []string, inputs map[string]bool) []AuditField {
	nodes, _ := c.list(o, "audit")
	var out []AuditField
	seen := map[string]string{}
	for i, n := range nodes {
		ap := index(path, i)
		ao, ok := c.object(ap, n, "name", "source", "redact", "description")
		if !ok {
			continue
		}
		var f AuditField
		if v, ok := c.str(ao, "name"); ok {
			f.Name = v
			c.uniqueName(ap, "audit field", v, "repository", "an operation", seen)
		}
		if v, ok := c.str(ao, "source"); ok {
			f.Source = v
			c.auditSource(field(ap, "source"), v, opPath, pathOK, templates, inputs)
		}
		f.Redact = c.boolean(ao, "redact")
		f.Description, _ = c.str(ao, "description")
		out = append(out, f)
	}
	return out
}

func (c *checker) auditSource(at, v, opPath string, pathOK bool, templates []string, inputs map[string]bool) {
	const forms = "args.<input>, path.<template name> or query.<name>"
	kind, name := ParseAuditSource(v)
	switch {
	case v == "":
		c.fail(at, "required; use %s", forms)
	case kind == AuditSourceUnknown:
		c.fail(at, "%q must be %s", v, forms)
	case kind == AuditFromQuery && name != "" && isQueryName(name):
		// any query parameter name; the operation need not declare it
	case kind == AuditFromQuery && name != "":
		c.fail(at, "%q needs a query parameter name after \"query.\" using letters, digits, '.', '_', ':', '-', '[' and ']', e.g. \"query.page\"", v)
	case !IsValidName(name):
		c.fail(at, "%q needs a name after %q using letters, digits, '.', '_', ':' and '-', e.g. %q", v, kind.String()+".", kind.String()+".id")
	case kind == AuditFromArgs && !inputs[name]:
		c.fail(at, "%q refers to input %q, which the operation does not declare; add it to inputs or use one of: %s", v, name, listOrNone(inputs))
	case kind == AuditFromPath && opPath == "":
		c.fail(at, "%q refers to a path template, but the operation has no path", v)
	case kind == AuditFromPath && pathOK && !slices.Contains(templates, name):
		c.fail(at, "%q refers to template {%s}, which path %q does not have", v, name, opPath)
	}
}

// isQueryName reports whether s is a name or a name with brackets, like
// "page[size]".
func isQueryName(s string) bool {
	bare := strings.NewReplacer("[", "", "]", "").Replace(s)
	return len(s) <= maxNameLen && IsValidName(bare)
}

func listOrNone(set map[string]bool) string {
	if len(set) == 0 {
		return "(the operation declares no inputs)"
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// joinOr joins words as "a", "a or b", "a, b or c".
func joinOr(words []string) string {
	if len(words) <= 1 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}
