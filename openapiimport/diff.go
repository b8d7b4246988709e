package openapiimport

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/aileron-dev/aileron-proxy/policy"
)

// Change is one difference between two specs' operations.
type Change struct {
	// Kind is "+" (added), "-" (removed) or "~" (changed).
	Kind string
	// Tool and Operation name the operation; Method and Path are the new
	// one's (the old one's when removed).
	Tool, Operation, Method, Path string
	// Fields lists the changed fields of a "~" change.
	Fields []string
}

// String returns "+ tool/op METHOD /path" or "~ tool/op: field, field".
func (c Change) String() string {
	if c.Kind == "~" {
		return fmt.Sprintf("~ %s/%s %s %s: %s", c.Tool, c.Operation, c.Method, c.Path, strings.Join(c.Fields, ", "))
	}
	return fmt.Sprintf("%s %s/%s %s %s", c.Kind, c.Tool, c.Operation, c.Method, c.Path)
}

// Diff lists what changes from old to new, operation by operation (keyed by
// tool and operation name), sorted by tool, then operation name.
func Diff(old, new *policy.Spec) []Change {
	type key struct{ tool, op string }
	index := func(s *policy.Spec) map[key]policy.Operation {
		m := map[key]policy.Operation{}
		if s == nil {
			return m
		}
		for _, t := range s.Tools {
			for _, op := range t.Operations {
				m[key{t.Name, op.Name}] = op
			}
		}
		return m
	}
	a, b := index(old), index(new)
	var out []Change
	for k, op := range b {
		prev, ok := a[k]
		if !ok {
			out = append(out, Change{Kind: "+", Tool: k.tool, Operation: k.op, Method: op.Method, Path: op.Path})
			continue
		}
		if fields := changedFields(prev, op); len(fields) > 0 {
			out = append(out, Change{Kind: "~", Tool: k.tool, Operation: k.op, Method: op.Method, Path: op.Path, Fields: fields})
		}
	}
	for k, op := range a {
		if _, ok := b[k]; !ok {
			out = append(out, Change{Kind: "-", Tool: k.tool, Operation: k.op, Method: op.Method, Path: op.Path})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Tool != out[j].Tool {
			return out[i].Tool < out[j].Tool
		}
		return out[i].Operation < out[j].Operation
	})
	return out
}

// changedFields names the JSON fields that differ between a and b.
func changedFields(a, b policy.Operation) []string {
	var ma, mb map[string]json.RawMessage
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	_ = json.Unmarshal(ja, &ma)
	_ = json.Unmarshal(jb, &mb)
	var fields []string
	for k, v := range mb {
		if string(ma[k]) != string(v) {
			fields = append(fields, k)
		}
	}
	for k := range ma {
		if _, ok := mb[k]; !ok {
			fields = append(fields, k)
		}
	}
	sort.Strings(fields)
	return fields
}
