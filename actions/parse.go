package actions

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/pelletier/go-toml/v2"

	"github.com/aileron-dev/aileron-proxy/policy"
)

// MaxFileSize caps an action.md file.
const MaxFileSize = 256 << 10

// fence opens and closes the TOML front matter.
const fence = "+++"

// Severity says whether a Problem refuses the manifest. The zero value is
// an error.
type Severity int

// Severities.
const (
	// SeverityError refuses the manifest.
	SeverityError Severity = iota
	// SeverityWarning is reported but accepted.
	SeverityWarning
)

// String returns "error" or "warning".
func (s Severity) String() string {
	if s == SeverityWarning {
		return "warning"
	}
	return "error"
}

// Problem is one thing wrong with a manifest, located by the line of the
// whole file it is on (the opening "+++" is line 1).
type Problem struct {
	Line    int
	Message string
	// Severity is SeverityError unless the problem is only a warning.
	Severity Severity
}

// IsWarning reports whether the problem is only a warning.
func (p Problem) IsWarning() bool { return p.Severity == SeverityWarning }

// String returns "line <n>: <message>", with "warning: " before the
// message of a warning.
func (p Problem) String() string { return fmt.Sprintf("line %d: %s", p.Line, p.text()) }

func (p Problem) text() string {
	if p.IsWarning() {
		return "warning: " + p.Message
	}
	return p.Message
}

// HasErrors reports whether problems hold anything but warnings.
func HasErrors(problems []Problem) bool {
	for _, p := range problems {
		if !p.IsWarning() {
			return true
		}
	}
	return false
}

// sortProblems orders problems by line, keeping the order of each line's.
func sortProblems(problems []Problem) {
	sort.SliceStable(problems, func(i, j int) bool { return problems[i].Line < problems[j].Line })
}

// ValidationError lists every problem of a manifest, sorted by line.
type ValidationError struct {
	Problems []Problem
}

// Error lists the problems, one per line.
func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

func newValidationError(problems []Problem) error {
	if len(problems) == 0 {
		return nil
	}
	sortProblems(problems)
	return &ValidationError{Problems: problems}
}

// Parse parses an action.md and checks everything that does not depend on
// the installed connectors (see Check for the rest). On failure it returns a
// *ValidationError listing every problem with its line, warnings included;
// on success the warnings are in the Action's Warnings.
func Parse(data []byte) (*Action, error) {
	a, problems := parse(data)
	if HasErrors(problems) {
		return nil, newValidationError(problems)
	}
	a.Warnings = problems
	return a, nil
}

// Inspect parses an action.md and checks it against conns (the active
// connectors) in one pass: the connector checks run on whatever parsed, so
// an undeclared operation is reported together with a bad name or an
// unknown key. It returns every problem, warnings included, sorted by
// line; the Action is nil only when the file is not TOML front matter at
// all, and is valid only when HasErrors(problems) is false.
func Inspect(data []byte, conns []policy.Connector) (*Action, Target, []Problem) {
	a, problems := parse(data)
	if a == nil {
		return nil, Target{}, problems
	}
	t, more := a.Check(conns)
	problems = append(problems, more...)
	sortProblems(problems)
	if HasErrors(problems) {
		t = Target{}
	}
	return a, t, problems
}

// parse builds an Action from data and returns it with every problem found
// without the connectors, sorted by line. The Action is nil when the front
// matter cannot be split or decoded; otherwise it holds whatever was valid.
func parse(data []byte) (*Action, []Problem) {
	front, body, frontLine, problems := splitFrontMatter(data)
	if len(problems) > 0 {
		return nil, problems
	}
	var doc map[string]any
	if err := toml.Unmarshal(front, &doc); err != nil {
		line := 1
		msg := strings.TrimPrefix(err.Error(), "toml: ")
		var de *toml.DecodeError
		if errors.As(err, &de) {
			line, _ = de.Position()
		}
		return nil, []Problem{{Line: frontLine + line - 1, Message: "invalid TOML: " + msg}}
	}
	c := &checker{lines: keyLines(front, frontLine)}
	a := c.action(doc)
	a.Description = strings.TrimSpace(string(body))
	a.lines = c.lines
	sortProblems(c.problems)
	return a, c.problems
}

// splitFrontMatter returns the TOML between the "+++" lines, the Markdown
// after them and the file line of the TOML's first line.
func splitFrontMatter(data []byte) (front, body []byte, frontLine int, problems []Problem) {
	switch {
	case len(data) > MaxFileSize:
		return nil, nil, 0, []Problem{{Line: 1, Message: fmt.Sprintf("the file is larger than %d bytes; keep action.md to the manifest and its description", MaxFileSize)}}
	case !utf8.Valid(data):
		return nil, nil, 0, []Problem{{Line: 1, Message: "the file is not UTF-8 text; save it as UTF-8"}}
	}
	rest := data
	line := 0
	next := func() (string, bool) {
		if len(rest) == 0 {
			return "", false
		}
		l, r, _ := bytes.Cut(rest, []byte("\n"))
		rest = r
		line++
		return strings.TrimRight(string(l), " \t\r"), true
	}
	if first, _ := next(); first != fence {
		return nil, nil, 0, []Problem{{Line: 1, Message: `the file must start with a "+++" line opening the TOML front matter, e.g. "+++\nname = \"send-email\"\n...\n+++"`}}
	}
	start := len(data) - len(rest)
	for {
		end := len(data) - len(rest)
		l, ok := next()
		if !ok {
			return nil, nil, 0, []Problem{{Line: line, Message: `the front matter opened by the "+++" on line 1 is never closed; add a "+++" line after the last TOML line`}}
		}
		if l == fence {
			return data[start:end], rest, 2, nil
		}
	}
}

// checker collects problems while it builds an Action from the decoded
// TOML.
type checker struct {
	lines    map[string]int
	problems []Problem
}

// line returns the line of key path p, else of its nearest known parent,
// else 1.
func (c *checker) line(p string) int {
	for p != "" {
		if l, ok := c.lines[p]; ok {
			return l
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 1
}

func (c *checker) fail(p, format string, args ...any) {
	c.problems = append(c.problems, Problem{Line: c.line(p), Message: fmt.Sprintf(format, args...)})
}

func (c *checker) warn(p, format string, args ...any) {
	c.problems = append(c.problems, Problem{Line: c.line(p), Message: fmt.Sprintf(format, args...), Severity: SeverityWarning})
}

func join(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// describe names the table at key path p for messages.
func describe(p string) string {
	if p == "" {
		return "the front matter"
	}
	if i := strings.LastIndexByte(p, '['); i > 0 && strings.HasSuffix(p, "]") {
		n, _ := strconv.Atoi(p[i+1 : len(p)-1])
		return fmt.Sprintf("[[%s]] #%d", p[:i], n+1)
	}
	return "[" + p + "]"
}

// table checks v is a table and reports each key not in known.
func (c *checker) table(p string, v any, known ...string) (map[string]any, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		c.fail(p, "%s must be a table, not %s; write it as [%s]", p, tomlType(v), p)
		return nil, false
	}
	var unknown []string
	for k := range m {
		if !contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	sort.Slice(unknown, func(i, j int) bool {
		return c.line(join(p, unknown[i])) < c.line(join(p, unknown[j])) || c.line(join(p, unknown[i])) == c.line(join(p, unknown[j])) && unknown[i] < unknown[j]
	})
	for _, k := range unknown {
		c.fail(join(p, k), "unknown key %q in %s; it takes: %s", k, describe(p), strings.Join(known, ", "))
	}
	return m, true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// str returns m[key] when it is a string; a missing key gives "", false.
func (c *checker) str(m map[string]any, p, key string) (string, bool) {
	v, ok := m[key]
	if !ok {
		return "", false
	}
	s, ok := v.(string)
	if !ok {
		c.fail(join(p, key), "%s must be a string, not %s; quote it", join(p, key), tomlType(v))
		return "", false
	}
	return s, true
}

func (c *checker) boolean(m map[string]any, p, key string) (bool, bool) {
	v, ok := m[key]
	if !ok {
		return false, false
	}
	b, ok := v.(bool)
	if !ok {
		c.fail(join(p, key), "%s must be true or false, not %s", join(p, key), tomlType(v))
		return false, false
	}
	return b, true
}

// tables returns the array of tables m[key], written [[p.key]].
func (c *checker) tables(m map[string]any, p, key string) []map[string]any {
	v, ok := m[key]
	if !ok {
		return nil
	}
	kp := join(p, key)
	list, ok := v.([]any)
	if !ok {
		c.fail(kp, "%s must be an array of tables; write each entry as [[%s]]", kp, kp)
		return nil
	}
	out := make([]map[string]any, 0, len(list))
	for i, e := range list {
		t, ok := e.(map[string]any)
		if !ok {
			c.fail(kp, "%s[%d] must be a table, not %s; write each entry as [[%s]]", kp, i, tomlType(e), kp)
			continue
		}
		out = append(out, t)
	}
	return out
}

// name checks a name with the connector spec's rules.
func (c *checker) name(p, what, v, example string) bool {
	if msg := policy.NameProblem(what, v, example); msg != "" {
		c.fail(p, "%s: %s", p, msg)
		return false
	}
	return true
}

func (c *checker) version(p, v string) {
	if v != "" && !policy.IsValidVersion(v) {
		c.fail(p, "%s %q must be a semantic version MAJOR.MINOR.PATCH[-prerelease][+build] without a leading \"v\", e.g. \"0.3.0\"", p, v)
	}
}

func (c *checker) fqn(p, v string) string {
	if v == "" {
		c.fail(p, `%s is required; set it to the connector's FQN, e.g. "github://acme/aileron-connector-google"`, p)
		return ""
	}
	f, err := policy.ParseFQN(v)
	if err != nil {
		c.fail(p, "%s: %s", p, err.Error())
		return ""
	}
	return f.String()
}

func (c *checker) action(doc map[string]any) *Action {
	a := &Action{}
	top, _ := c.table("", doc, "name", "version", "source", "requires", "match", "execute", "approval", "inputs")
	if v, ok := c.str(top, "", "name"); ok {
		if c.name("name", "action", v, "send-email") {
			a.Name = v
		}
	} else if _, present := top["name"]; !present {
		c.fail("", `name is required; add name = "send-email" (letters, digits, '.', '_', ':' and '-') to the front matter`)
	}
	a.Version, _ = c.str(top, "", "version")
	c.version("version", a.Version)
	a.Source, _ = c.str(top, "", "source")
	if v, ok := top["requires"]; ok {
		if req, ok := c.table("requires", v, "connectors"); ok {
			for i, t := range c.tables(req, "requires", "connectors") {
				a.Requires = append(a.Requires, c.requirement(fmt.Sprintf("requires.connectors[%d]", i), t))
			}
		}
	}
	if v, ok := top["match"]; ok {
		if m, ok := c.table("match", v, "intent"); ok {
			a.Intent, _ = c.str(m, "match", "intent")
		}
	}
	if v, ok := top["approval"]; ok {
		if m, ok := c.table("approval", v, "required", "preview"); ok {
			a.ApprovalRequired, _ = c.boolean(m, "approval", "required")
			if pv, ok := m["preview"]; ok {
				a.Preview = c.parsePreview(pv)
			}
		}
	}
	seen := map[string]int{}
	// Problems with the inputs (or presets, see execute) leave arguments
	// unknown: Check then does not call required arguments missing.
	before := len(c.problems)
	for i, t := range c.tables(top, "", "inputs") {
		p := fmt.Sprintf("inputs[%d]", i)
		in, typed := c.input(p, t)
		if in.Name == "" {
			continue
		}
		if first, dup := seen[in.Name]; dup {
			c.fail(p+".name", "duplicate input %q (line %d declares it too); input names must be unique", in.Name, c.line(fmt.Sprintf("inputs[%d].name", first)))
			continue
		}
		seen[in.Name] = i
		a.Inputs = append(a.Inputs, in)
		a.inputPaths = append(a.inputPaths, p)
		if !typed {
			if a.untyped == nil {
				a.untyped = map[string]bool{}
			}
			a.untyped[p] = true
		}
	}
	a.incomplete = len(c.problems) > before
	c.execute(top, a)
	return a
}

func (c *checker) requirement(p string, t map[string]any) Requirement {
	var r Requirement
	m, _ := c.table(p, t, "name", "version", "hash", "capabilities")
	if v, ok := c.str(m, p, "name"); ok || m["name"] == nil {
		r.Name = c.fqn(join(p, "name"), v)
	}
	r.Version, _ = c.str(m, p, "version")
	c.version(join(p, "version"), r.Version)
	if v, ok := c.str(m, p, "hash"); ok {
		r.Hash = c.hash(join(p, "hash"), v)
	}
	if v, ok := m["capabilities"]; ok {
		list, ok := v.([]any)
		if !ok {
			c.fail(join(p, "capabilities"), `%s must be an array of strings, e.g. ["send_email"]`, join(p, "capabilities"))
		}
		for _, e := range list {
			s, ok := e.(string)
			if !ok {
				c.fail(join(p, "capabilities"), `%s must hold only strings, not %s`, join(p, "capabilities"), tomlType(e))
				continue
			}
			r.Capabilities = append(r.Capabilities, s)
		}
	}
	return r
}

// input builds one [[inputs]] entry; typed is false when its type was
// invalid (and left as string).
func (c *checker) input(p string, t map[string]any) (in Input, typed bool) {
	typed = true
	m, _ := c.table(p, t, "name", "type", "description", "required", "label", "multiline", "items_type")
	if v, ok := c.str(m, p, "name"); ok {
		if c.name(join(p, "name"), "input", v, "to") {
			in.Name = v
		}
	} else if _, present := m["name"]; !present {
		c.fail(p, `%s: name is required; add name = "to" under this [[inputs]]`, p)
	}
	in.Type = policy.InputString
	if v, ok := c.str(m, p, "type"); ok {
		if !isInputType(policy.InputType(v)) {
			c.fail(join(p, "type"), "%s %q is not a type; use string, integer, number, boolean, array or object", join(p, "type"), v)
			typed = false
		} else {
			in.Type = policy.InputType(v)
		}
	}
	in.Description, _ = c.str(m, p, "description")
	in.Required, _ = c.boolean(m, p, "required")
	if v, ok := c.str(m, p, "label"); ok {
		in.Label = c.label(join(p, "label"), v)
	}
	if b, ok := c.boolean(m, p, "multiline"); ok && b {
		if typed && in.Type != policy.InputString {
			c.fail(join(p, "multiline"), "%s: multiline applies to string inputs, and input %q is %s; remove multiline or set type = \"string\"", join(p, "multiline"), in.Name, articled(in.Type))
		} else {
			in.Multiline = true
		}
	}
	if v, ok := c.str(m, p, "items_type"); ok {
		switch {
		case !isInputType(policy.InputType(v)):
			c.fail(join(p, "items_type"), "%s %q is not a type; use string, integer, number, boolean, array or object", join(p, "items_type"), v)
		case typed && in.Type != policy.InputArray:
			c.fail(join(p, "items_type"), "%s: items_type applies to array inputs, and input %q is %s; remove items_type or set type = \"array\"", join(p, "items_type"), in.Name, articled(in.Type))
		default:
			in.ItemsType = policy.InputType(v)
		}
	}
	return in, typed
}

// maxLabel caps an input's label, in characters.
const maxLabel = 80

// label checks a display label: one line of text, at most maxLabel
// characters.
func (c *checker) label(p, v string) string {
	switch {
	case strings.TrimSpace(v) == "":
		c.fail(p, "%s is empty; write a short display name such as \"To\", or remove it", p)
	case strings.ContainsFunc(v, unicode.IsControl):
		c.fail(p, "%s %q holds a line break or control character; a label is one line of text", p, v)
	case utf8.RuneCountInString(v) > maxLabel:
		c.fail(p, "%s is %d characters long; keep a label to %d (put the rest in description)", p, utf8.RuneCountInString(v), maxLabel)
	default:
		return v
	}
	return ""
}

// hash checks a [[requires.connectors]] hash: "sha256:" and 64 hex digits
// (returned in lower case), or a placeholder such as
// "sha256:bound-at-release" that release tooling replaces (accepted with a
// warning; "" is returned).
func (c *checker) hash(p, v string) string {
	rest, ok := strings.CutPrefix(v, "sha256:")
	allHex := rest != "" && strings.Trim(strings.ToLower(rest), "0123456789abcdef") == ""
	switch {
	case !ok || rest == "":
		c.fail(p, `%s %q is not a digest; write "sha256:" and the 64 hex digits of the connector package (see "aileron-proxy connector list"), or remove it`, p, v)
	case allHex && len(rest) != 64:
		c.fail(p, "%s %q has %d hex digits; a sha256 digest has 64", p, v, len(rest))
	case allHex:
		return "sha256:" + strings.ToLower(rest)
	default:
		c.warn(p, `%s %q is a placeholder, not a digest: the installed connector is not checked against it; a released manifest carries "sha256:" and 64 hex digits`, p, v)
	}
	return ""
}

// parsePreview reads [approval.preview]: op, args (an inline table) and
// [approval.preview.render] (labels to response fields).
func (c *checker) parsePreview(v any) *Preview {
	const p = "approval.preview"
	m, ok := c.table(p, v, "op", "args", "render")
	if !ok {
		return nil
	}
	pv := &Preview{}
	if op, ok := c.str(m, p, "op"); ok {
		if c.name(join(p, "op"), "operation", op, "get_file_metadata") {
			pv.Op = op
		}
	} else if _, present := m["op"]; !present {
		c.fail(p, `[approval.preview]: op is required; name a read-only operation of the step's connector, e.g. op = "get_file_metadata"`)
	}
	if av, ok := m["args"]; ok {
		ap := join(p, "args")
		if args, isTable := av.(map[string]any); !isTable {
			c.fail(ap, `%s must be a table, e.g. args = { file_id = "${args.file_id}" }`, ap)
		} else {
			pv.Args = map[string]any{}
			for _, k := range sortedKeys(args) {
				jv, err := toJSON(args[k])
				if err != nil {
					c.fail(join(ap, k), "%s: %s", join(ap, k), err.Error())
					continue
				}
				pv.Args[k] = jv
			}
		}
	}
	if rv, ok := m["render"]; ok {
		rp := join(p, "render")
		if render, isTable := rv.(map[string]any); !isTable {
			c.fail(rp, "%s must be a table of labels to response fields; write it as [%s]", rp, rp)
		} else {
			pv.Render = map[string]string{}
			for _, k := range sortedKeys(render) {
				if s, ok := c.str(render, rp, k); ok {
					pv.Render[k] = s
				}
			}
		}
	}
	return pv
}

func isInputType(t policy.InputType) bool {
	switch t {
	case policy.InputString, policy.InputInteger, policy.InputNumber, policy.InputBoolean, policy.InputArray, policy.InputObject:
		return true
	}
	return false
}

func (c *checker) execute(top map[string]any, a *Action) {
	v, ok := top["execute"]
	if !ok {
		c.fail("", `exactly one [[execute]] step is required; add [[execute]] with connector = "<fqn>" and op = "<operation>"`)
		return
	}
	if _, isTable := v.(map[string]any); isTable {
		c.fail("execute", "execute must be an array of tables; write the step as [[execute]], not [execute]")
		return
	}
	steps := c.tables(top, "", "execute")
	switch {
	case len(steps) == 0:
		c.fail("execute", `exactly one [[execute]] step is required; add [[execute]] with connector = "<fqn>" and op = "<operation>"`)
		return
	case len(steps) > 1:
		c.fail("execute[1]", "an action has exactly one [[execute]] step in this version, found %d; split it into %d actions", len(steps), len(steps))
	}
	const p = "execute[0]"
	m, _ := c.table(p, steps[0], "id", "connector", "op", "tool", "idempotent", "args")
	s := &a.Execute
	s.ID, _ = c.str(m, p, "id")
	if v, ok := c.str(m, p, "connector"); ok || m["connector"] == nil {
		s.Connector = c.fqn(join(p, "connector"), v)
	}
	if v, ok := c.str(m, p, "op"); ok {
		if c.name(join(p, "op"), "operation", v, "gmail.messages.send") {
			s.Op = v
		}
	} else if _, present := m["op"]; !present {
		c.fail(p, `[[execute]]: op is required; name the connector's operation, e.g. op = "gmail.messages.send"`)
	}
	if v, ok := c.str(m, p, "tool"); ok {
		if c.name(join(p, "tool"), "tool", v, "google") {
			s.Tool = v
		}
	}
	if b, ok := c.boolean(m, p, "idempotent"); ok {
		s.Idempotent = &b
	}
	if v, ok := m["args"]; ok {
		ap := join(p, "args")
		args, isTable := v.(map[string]any)
		if !isTable {
			c.fail(ap, "%s must be a table; write it as [execute.args] under the step", ap)
			a.incomplete = true
			return
		}
		before := len(c.problems)
		defer func() { a.incomplete = a.incomplete || len(c.problems) > before }()
		s.Args = map[string]any{}
		for _, k := range sortedKeys(args) {
			if !c.name(join(ap, k), "argument", k, "format") {
				continue
			}
			jv, err := toJSON(args[k])
			if err != nil {
				c.fail(join(ap, k), "%s: %s", join(ap, k), err.Error())
				continue
			}
			s.Args[k] = jv
		}
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// toJSON converts a decoded TOML value into the value encoding/json gives
// with UseNumber, which the run endpoint works with.
func toJSON(v any) (any, error) {
	switch x := v.(type) {
	case string, bool:
		return x, nil
	case int64:
		return json.Number(strconv.FormatInt(x, 10)), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, errors.New("nan and inf have no JSON form; use a finite number")
		}
		return json.Number(strconv.FormatFloat(x, 'g', -1, 64)), nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			j, err := toJSON(e)
			if err != nil {
				return nil, err
			}
			out[i] = j
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			j, err := toJSON(e)
			if err != nil {
				return nil, err
			}
			out[k] = j
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s values have no JSON form; write it as a string", tomlType(v))
}

// tomlType names the TOML type of a decoded value for messages.
func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return "a date or time"
}

// jsonType returns the input type a JSON value (as toJSON returns it) has.
func jsonType(v any) policy.InputType {
	switch x := v.(type) {
	case string:
		return policy.InputString
	case bool:
		return policy.InputBoolean
	case json.Number:
		if _, err := x.Int64(); err == nil {
			return policy.InputInteger
		}
		return policy.InputNumber
	case []any:
		return policy.InputArray
	}
	return policy.InputObject
}
