package actions

import (
	"fmt"
	"sort"
	"strings"

	"github.com/aileron-dev/aileron-proxy/policy"
)

// Target is the operation an action's step resolves to.
type Target struct {
	ConnectorFQN string
	Tool         string
	Operation    *policy.Operation
}

// Check validates a against the installed connectors (the active set): the
// step's connector is installed and declares the operation, every input and
// preset is an argument of the operation with an agreeing type, every
// required argument of the operation is supplied by an input or a preset,
// a [[requires.connectors]] hash matches the installed connector's and an
// [approval.preview] names an operation of the connector. It returns the
// resolved target and the problems (warnings included, see HasErrors),
// each with its line. It works on a partly valid Action too (as Inspect
// passes it), skipping what was already reported.
func (a *Action) Check(conns []policy.Connector) (Target, []Problem) {
	c := &checker{lines: a.lines}
	c.hashes(a, conns)
	var t Target
	if a.Execute.Connector != "" {
		t = c.resolve(a, conns)
	}
	if t.Operation != nil {
		c.arguments(a, t)
	}
	if a.Preview != nil && a.Preview.Op != "" && a.Execute.Connector != "" {
		c.checkPreview(a, conns)
	}
	sortProblems(c.problems)
	return t, c.problems
}

// hashes compares each [[requires.connectors]] digest with the installed
// connector of that FQN, when one is installed.
func (c *checker) hashes(a *Action, conns []policy.Connector) {
	for i, r := range a.Requires {
		if r.Hash == "" || r.Name == "" {
			continue
		}
		p := fmt.Sprintf("requires.connectors[%d].hash", i)
		for _, cn := range conns {
			if cn.Spec == nil || cn.Spec.Connector.FQN != r.Name {
				continue
			}
			switch {
			case cn.Hash == "":
				c.warn(p, "connector %q was not installed from the store, so its digest is unknown and %s is not checked", r.Name, r.Hash)
			case !strings.EqualFold(cn.Hash, r.Hash):
				c.fail(p, "connector %q is installed as %s, but the action requires %s; install the connector package the action was released with, or the action's release for the installed connector", r.Name, cn.Hash, r.Hash)
			}
		}
	}
}

// specOf returns the installed spec of fqn and every installed FQN.
func specOf(conns []policy.Connector, fqn string) (*policy.Spec, []string) {
	var spec *policy.Spec
	var fqns []string
	for _, cn := range conns {
		if cn.Spec == nil {
			continue
		}
		fqns = append(fqns, cn.Spec.Connector.FQN)
		if cn.Spec.Connector.FQN == fqn {
			spec = cn.Spec
		}
	}
	sort.Strings(fqns)
	return spec, fqns
}

// checkPreview checks [approval.preview] against the step's connector: the
// operation is declared, its args are arguments of it, and every
// "${args.<name>}" names an input of the action.
func (c *checker) checkPreview(a *Action, conns []policy.Connector) {
	pv := a.Preview
	spec, _ := specOf(conns, a.Execute.Connector)
	if spec == nil {
		return // the step's check reports it
	}
	var op *policy.Operation
	var ops []string
	for ti := range spec.Tools {
		for oi := range spec.Tools[ti].Operations {
			o := &spec.Tools[ti].Operations[oi]
			if !contains(ops, o.Name) {
				ops = append(ops, o.Name)
			}
			if o.Name == pv.Op && op == nil {
				op = o
			}
		}
	}
	if op == nil {
		sort.Strings(ops)
		c.fail("approval.preview.op", "[approval.preview]: connector %q declares no operation %q; it offers: %s", a.Execute.Connector, pv.Op, listOrNone(ops))
		return
	}
	takes := map[string]bool{}
	var names []string
	for _, in := range op.Inputs {
		takes[in.Name] = true
		names = append(names, in.Name)
	}
	for _, pp := range PathParams(op.Path) {
		if !takes[pp] {
			takes[pp] = true
			names = append(names, pp)
		}
	}
	declared := map[string]bool{}
	for _, in := range a.Inputs {
		declared[in.Name] = true
	}
	for _, k := range sortedKeys(pv.Args) {
		p := "approval.preview.args." + k
		if !takes[k] {
			c.fail(p, "[approval.preview]: %q is not an argument of operation %q; it takes: %s", k, pv.Op, listOrNone(names))
		}
		if s, ok := pv.Args[k].(string); ok {
			if ref, ok := strings.CutPrefix(s, "${args."); ok && strings.HasSuffix(ref, "}") {
				if ref = strings.TrimSuffix(ref, "}"); !declared[ref] {
					c.fail(p, "[approval.preview]: %q refers to %q, which is not an input of the action", s, ref)
				}
			}
		}
	}
}

func (c *checker) resolve(a *Action, conns []policy.Connector) Target {
	s := a.Execute
	var fqns []string
	var spec *policy.Spec
	for _, cn := range conns {
		if cn.Spec == nil {
			continue
		}
		fqns = append(fqns, cn.Spec.Connector.FQN)
		if cn.Spec.Connector.FQN == s.Connector {
			spec = cn.Spec
		}
	}
	if spec == nil {
		sort.Strings(fqns)
		c.fail("execute[0].connector", "connector %q is not installed; install it first with \"aileron-proxy connector install <package>\" (installed: %s)", s.Connector, listOrNone(fqns))
		return Target{}
	}
	if s.Op == "" {
		return Target{} // reported by Parse
	}
	var found []Target
	var tools, ops []string
	for ti := range spec.Tools {
		tool := &spec.Tools[ti]
		tools = append(tools, tool.Name)
		if s.Tool != "" && tool.Name != s.Tool {
			continue
		}
		for oi := range tool.Operations {
			op := &tool.Operations[oi]
			if !contains(ops, op.Name) {
				ops = append(ops, op.Name)
			}
			if op.Name == s.Op {
				found = append(found, Target{ConnectorFQN: spec.Connector.FQN, Tool: tool.Name, Operation: op})
			}
		}
	}
	switch {
	case s.Tool != "" && !contains(tools, s.Tool):
		c.fail("execute[0].tool", "connector %q has no tool %q; its tools: %s", s.Connector, s.Tool, strings.Join(tools, ", "))
	case len(found) == 0:
		sort.Strings(ops)
		c.fail("execute[0].op", "connector %q declares no operation %q; it offers: %s", s.Connector, s.Op, listOrNone(ops))
	case len(found) > 1:
		var in []string
		for _, f := range found {
			in = append(in, f.Tool)
		}
		c.fail("execute[0].op", "operation %q is declared by tools %s of %q; choose one with tool = %q", s.Op, strings.Join(in, " and "), s.Connector, in[0])
	default:
		return found[0]
	}
	return Target{}
}

// arguments checks the inputs and presets against the operation's inputs
// and path parameters.
func (c *checker) arguments(a *Action, t Target) {
	op := t.Operation
	opInputs := map[string]policy.Input{}
	var names []string
	for _, in := range op.Inputs {
		opInputs[in.Name] = in
		names = append(names, in.Name)
	}
	required := map[string]bool{}
	for _, in := range op.Inputs {
		if in.Required {
			required[in.Name] = true
		}
	}
	for _, p := range PathParams(op.Path) {
		if _, ok := opInputs[p]; !ok {
			opInputs[p] = policy.Input{Name: p, Type: policy.InputString, Required: true}
			names = append(names, p)
		}
		required[p] = true
	}
	where := fmt.Sprintf("operation %q of %s", op.Name, t.ConnectorFQN)
	supplied := map[string]bool{}
	for i, in := range a.Inputs {
		supplied[in.Name] = true
		p := fmt.Sprintf("inputs[%d]", i)
		if i < len(a.inputPaths) {
			p = a.inputPaths[i]
		}
		want, ok := opInputs[in.Name]
		if !ok {
			c.fail(p+".name", "input %q is not an argument of %s; it takes: %s", in.Name, where, listOrNone(names))
			continue
		}
		if !a.untyped[p] && !typeAgrees(in.Type, want.Type) {
			at := p + ".type"
			if _, ok := c.lines[at]; !ok {
				at = p + ".name"
			}
			c.fail(at, "input %q is %s but %s takes %s; set type = %q", in.Name, articled(in.Type), where, articled(want.Type), want.Type)
		}
	}
	for _, k := range sortedKeys(a.Execute.Args) {
		supplied[k] = true
		p := "execute[0].args." + k
		want, ok := opInputs[k]
		if !ok {
			c.fail(p, "preset %q is not an argument of %s; it takes: %s", k, where, listOrNone(names))
			continue
		}
		if got := jsonType(a.Execute.Args[k]); !typeAgrees(got, want.Type) {
			c.fail(p, "preset %q is %s but %s takes %s", k, articled(got), where, articled(want.Type))
		}
	}
	var missing []string
	for _, n := range names {
		if a.incomplete {
			break // an invalid input or preset may be the one; Parse reported it
		}
		if required[n] && !supplied[n] {
			missing = append(missing, n)
		}
	}
	for _, n := range missing {
		c.fail("execute[0].op", "%s requires %q, which neither an action input nor [execute.args] supplies; add an [[inputs]] entry name = %q or preset it in [execute.args]", where, n, n)
	}
}

// typeAgrees reports whether a value of type got is acceptable where want
// is declared: the same type, or an integer for a number.
func typeAgrees(got, want policy.InputType) bool {
	if want == "" {
		want = policy.InputString
	}
	return got == want || got == policy.InputInteger && want == policy.InputNumber
}

func articled(t policy.InputType) string {
	switch t {
	case policy.InputInteger, policy.InputArray, policy.InputObject:
		return "an " + string(t)
	}
	return "a " + string(t)
}

// PathParams returns the names of the whole-segment {name} templates of an
// operation path, in order.
func PathParams(path string) []string {
	var out []string
	for _, seg := range strings.Split(path, "/") {
		if len(seg) > 2 && seg[0] == '{' && seg[len(seg)-1] == '}' {
			out = append(out, seg[1:len(seg)-1])
		}
	}
	return out
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

// ArgProblem is one reason a caller's args were refused.
type ArgProblem struct {
	Arg     string
	Message string
}

// Merge validates a caller's args against the action's inputs and returns
// them merged over [execute.args]. Only declared inputs are accepted, so an
// undeclared arg can never override a preset; required inputs must be
// present and values must have the input's type (numbers as json.Number,
// as encoding/json's UseNumber gives them).
func (a *Action) Merge(args map[string]any) (map[string]any, []ArgProblem) {
	var problems []ArgProblem
	declared := map[string]Input{}
	var names []string
	for _, in := range a.Inputs {
		declared[in.Name] = in
		names = append(names, in.Name)
	}
	for _, k := range sortedKeys(args) {
		in, ok := declared[k]
		if !ok {
			problems = append(problems, ArgProblem{k, fmt.Sprintf("not an input of action %q; it takes: %s", a.Name, listOrNone(names))})
			continue
		}
		if got := jsonType(args[k]); args[k] == nil || !typeAgrees(got, in.Type) {
			problems = append(problems, ArgProblem{k, fmt.Sprintf("must be %s", articled(in.Type))})
		} else if list, ok := args[k].([]any); ok && in.ItemsType != "" {
			for i, e := range list {
				if e == nil || !typeAgrees(jsonType(e), in.ItemsType) {
					problems = append(problems, ArgProblem{k, fmt.Sprintf("element %d must be %s (items_type)", i, articled(in.ItemsType))})
					break
				}
			}
		}
	}
	for _, in := range a.Inputs {
		if _, ok := args[in.Name]; in.Required && !ok {
			problems = append(problems, ArgProblem{in.Name, fmt.Sprintf("required input is missing (%s)", articled(in.Type))})
		}
	}
	if len(problems) > 0 {
		return nil, problems
	}
	merged := make(map[string]any, len(a.Execute.Args)+len(args))
	for k, v := range a.Execute.Args {
		merged[k] = v
	}
	for k, v := range args {
		merged[k] = v
	}
	return merged, nil
}
