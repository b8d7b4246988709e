package mcpserver

import (
	"fmt"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aileron-dev/aileron-proxy/actions"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// Entry is one MCP tool and what it calls.
type Entry struct {
	// Name is the MCP tool name: [A-Za-z0-9_-], at most MaxNameLen.
	Name string
	// ConnectorFQN, Tool and Operation name the connector operation the
	// tool runs (for an action, the one its step runs).
	ConnectorFQN string
	Tool         string
	Operation    string
	// Action is the action's name for an action tool; empty for an
	// operation tool.
	Action string
	// Def is the tool as tools/list shows it.
	Def *mcp.Tool
}

// Catalog builds the tools of a session whose connectors are scope: one
// per proxyable operation of each connector in scope, then one per active
// action whose operation is in scope, sorted by name. Names follow
// assignNames.
func Catalog(snap *policy.Snapshot, scope policy.Scope, acts []actions.Installed) []*Entry {
	if snap == nil {
		return nil
	}
	var out []*Entry
	for _, fqn := range scope.FQNs() {
		c, ok := snap.Connector(fqn)
		if !ok || c.Spec == nil {
			continue
		}
		for ti := range c.Spec.Tools {
			t := &c.Spec.Tools[ti]
			for oi := range t.Operations {
				m, err := snap.Lookup(scope, fqn, t.Name, t.Operations[oi].Name)
				if err != nil || !m.Compiled.Operation().IsProxyable() {
					continue
				}
				out = append(out, operationEntry(fqn, t.Name, m.Compiled))
			}
		}
	}
	for _, a := range acts {
		if !a.IsActive() || a.Action == nil || a.Target.Operation == nil {
			continue
		}
		if _, err := snap.Lookup(scope, a.Target.ConnectorFQN, a.Target.Tool, a.Target.Operation.Name); err != nil {
			continue
		}
		out = append(out, actionEntry(a))
	}
	assignNames(out)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	for _, e := range out {
		e.Def.Name = e.Name
	}
	return out
}

// AllScope is the scope of every connector of snap, for rendering the
// mapping outside a session.
func AllScope(snap *policy.Snapshot) policy.Scope {
	var fqns []string
	for _, c := range snap.Connectors() {
		if c.Spec != nil {
			fqns = append(fqns, c.Spec.Connector.FQN)
		}
	}
	return policy.NewScope(fqns)
}

func operationEntry(fqn, tool string, c *policy.CompiledOperation) *Entry {
	op := c.Operation()
	schema := newSchema()
	for _, in := range c.Inputs().Inputs() {
		schema.add(in.Name, in.Type, "", in.Description, in.Required || c.Template().HasParam(in.Name))
	}
	for _, p := range c.Template().Params() {
		if _, ok := c.Inputs().Input(p); !ok {
			schema.add(p, policy.InputString, "", "path parameter {"+p+"}", true)
		}
	}
	var desc []string
	if op.Summary != "" {
		desc = append(desc, op.Summary)
	}
	if op.Description != "" && op.Description != op.Summary {
		desc = append(desc, op.Description)
	}
	desc = append(desc, fmt.Sprintf("%s %s (operation %s of tool %s, connector %s).", op.Method, op.Path, op.Name, tool, fqn))
	if op.Approval == policy.ApprovalRequired {
		desc = append(desc, "Each call waits until a person approves it.")
	}
	title := op.Summary
	if title == "" {
		title = tool + " " + op.Name
	}
	return &Entry{
		ConnectorFQN: fqn, Tool: tool, Operation: op.Name,
		Def: &mcp.Tool{
			Title:       title,
			Description: strings.Join(desc, "\n\n"),
			InputSchema: schema.value(),
			Annotations: annotations(title, op),
		},
	}
}

func actionEntry(a actions.Installed) *Entry {
	act := a.Action
	op := a.Target.Operation
	schema := newSchema()
	for _, in := range act.Inputs {
		schema.add(in.Name, in.Type, in.ItemsType, in.Description, in.Required)
	}
	var desc []string
	if act.Intent != "" {
		desc = append(desc, act.Intent)
	}
	if act.Description != "" {
		desc = append(desc, act.Description)
	}
	desc = append(desc, fmt.Sprintf("Action %s: runs %s %s (operation %s of tool %s, connector %s).",
		act.Name, op.Method, op.Path, op.Name, a.Target.Tool, a.Target.ConnectorFQN))
	if act.ApprovalRequired || op.Approval == policy.ApprovalRequired {
		desc = append(desc, "Each call waits until a person approves it.")
	}
	title := act.Intent
	if title == "" {
		title = "action " + act.Name
	}
	return &Entry{
		ConnectorFQN: a.Target.ConnectorFQN, Tool: a.Target.Tool, Operation: op.Name, Action: act.Name,
		Def: &mcp.Tool{
			Title:       title,
			Description: strings.Join(desc, "\n\n"),
			InputSchema: schema.value(),
			Annotations: annotations(title, op),
		},
	}
}

func annotations(title string, op *policy.Operation) *mcp.ToolAnnotations {
	readOnly := op.Method == "GET" || op.Method == "HEAD" || op.Method == "OPTIONS"
	destructive := op.Method == "DELETE"
	open := true
	a := &mcp.ToolAnnotations{
		Title:          title,
		ReadOnlyHint:   readOnly,
		IdempotentHint: op.Idempotency == policy.Idempotent,
		OpenWorldHint:  &open,
	}
	if !readOnly {
		a.DestructiveHint = &destructive
	}
	return a
}

// schema is a JSON Schema object built input by input.
type schema struct {
	props    map[string]any
	required []string
}

func newSchema() *schema { return &schema{props: map[string]any{}} }

func (s *schema) add(name string, typ, items policy.InputType, description string, required bool) {
	if typ == "" {
		typ = policy.InputString
	}
	p := map[string]any{"type": string(typ)}
	if typ == policy.InputArray && items != "" {
		p["items"] = map[string]any{"type": string(items)}
	}
	if description != "" {
		p["description"] = description
	}
	s.props[name] = p
	if required && !containsString(s.required, name) {
		s.required = append(s.required, name)
	}
}

func (s *schema) value() map[string]any {
	v := map[string]any{
		"type":                 "object",
		"properties":           s.props,
		"additionalProperties": false,
	}
	if len(s.required) > 0 {
		sort.Strings(s.required)
		v["required"] = s.required
	}
	return v
}

func containsString(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}
