package openapiimport

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"

	"github.com/aileron-dev/aileron-proxy/policy"
)

// applyUpdateDefaults fills the connector-level options the import leaves
// open from the spec being updated: the FQN when --fqn is empty, the
// version when --version is empty, and the tool name when --tool is empty
// and the spec has one tool. An FQN that differs from the spec's is an
// error: an update is of the same connector.
func applyUpdateDefaults(opts *Options) error {
	base := opts.Update
	if opts.FQN == "" {
		opts.FQN = base.Connector.FQN
	} else if opts.FQN != base.Connector.FQN {
		return fmt.Errorf("--fqn %q differs from the FQN %q of the spec given to --update; an update keeps the connector's FQN: drop --fqn or update a spec of that connector", opts.FQN, base.Connector.FQN)
	}
	if opts.Version == "" {
		opts.Version = base.Connector.Version
	}
	if opts.Tool == "" && len(base.Tools) == 1 {
		opts.Tool = base.Tools[0].Name
	}
	return nil
}

// mergeUpdate applies the update rules (docs/import.md, "Updating a spec")
// to the imported spec in r: an imported operation on the route of one of
// the updated spec's operations takes that operation's name and the fields
// a person sets; the updated spec's operations the import does not produce
// are carried over unchanged, and so are its other tools.
func mergeUpdate(r *Result, opts Options) error {
	base := opts.Update
	imported := r.Spec.Tools[0]
	bi := slices.IndexFunc(base.Tools, func(t policy.Tool) bool { return t.Name == imported.Name })
	var baseOps []policy.Operation
	if bi >= 0 {
		baseOps = base.Tools[bi].Operations
		imported.Description = base.Tools[bi].Description
	}

	matched := make([]bool, len(baseOps))
	taken := map[string]bool{}
	for _, op := range baseOps {
		taken[op.Name] = true
	}
	ops := make([]policy.Operation, 0, len(imported.Operations)+len(baseOps))
	var fresh []int // indexes in ops of imported operations without a match
	for _, op := range imported.Operations {
		j := slices.IndexFunc(baseOps, func(b policy.Operation) bool { return sameRoute(b, op) })
		for j >= 0 && matched[j] {
			next := slices.IndexFunc(baseOps[j+1:], func(b policy.Operation) bool { return sameRoute(b, op) })
			if next < 0 {
				j = -1
				break
			}
			j += 1 + next
		}
		if j < 0 {
			fresh = append(fresh, len(ops))
			ops = append(ops, op)
			continue
		}
		matched[j] = true
		r.Matched++
		ops = append(ops, mergeOperation(baseOps[j], op, opts.Credential != ""))
	}
	// A kept name wins: an imported operation whose name the updated spec
	// gives to another route gets the next free suffix.
	for _, i := range fresh {
		base := ops[i].Name
		if !slices.ContainsFunc(baseOps, func(b policy.Operation) bool { return b.Name == base }) {
			continue
		}
		name := base
		for n := 2; taken[name] || nameUsed(ops, name); n++ {
			suffix := fmt.Sprintf("-%d", n)
			name = truncate(base, 128-len(suffix)) + suffix
		}
		r.Notes = append(r.Notes, Note{ops[i].Method + " " + ops[i].Path, fmt.Sprintf("operation name %q is the updated spec's name of another route; this one is %q", base, name)})
		ops[i].Name = name
		taken[name] = true
	}
	for j, op := range baseOps {
		if !matched[j] {
			ops = append(ops, op)
			r.Carried = append(r.Carried, Note{op.Method + " " + op.Path, fmt.Sprintf("%s is not in the document; kept as the updated spec has it", op.Name)})
		}
	}
	sort.SliceStable(ops, func(a, b int) bool {
		if ops[a].Path != ops[b].Path {
			return ops[a].Path < ops[b].Path
		}
		return methodRank(ops[a].Method) < methodRank(ops[b].Method)
	})
	imported.Operations = ops

	tools := slices.Clone(base.Tools)
	if bi >= 0 {
		tools[bi] = imported
	} else {
		tools = append(tools, imported)
	}
	spec := &policy.Spec{
		SchemaVersion: policy.SchemaVersion,
		Connector:     policy.ConnectorMeta{FQN: r.Spec.Connector.FQN, Version: r.Spec.Connector.Version, Description: base.Connector.Description},
		Tools:         tools,
	}
	data, err := render(spec)
	if err != nil {
		return err
	}
	parsed, _, err := policy.ParseSpec(data)
	if err != nil {
		var ve *policy.ValidationError
		if errors.As(err, &ve) {
			return fmt.Errorf("the imported operations merged with the spec given to --update are not a valid spec (edit the updated spec's operation, or leave the route out with --exclude): %w", err)
		}
		return fmt.Errorf("validating the updated spec: %w", err)
	}
	r.Spec, r.JSON = parsed, data
	return nil
}

func nameUsed(ops []policy.Operation, name string) bool {
	return slices.ContainsFunc(ops, func(o policy.Operation) bool { return o.Name == name })
}

// template matches one path template, whatever its name.
var template = regexp.MustCompile(`\{[^{}]*\}`)

// sameRoute reports whether a and b are the same route: one method, one
// path once template names are ignored, and a host in common. Two such
// operations in one spec would make the proxy refuse their requests as
// ambiguous.
func sameRoute(a, b policy.Operation) bool {
	if a.Method != b.Method || template.ReplaceAllString(a.Path, "{}") != template.ReplaceAllString(b.Path, "{}") {
		return false
	}
	for _, h := range a.Hosts {
		if slices.Contains(b.Hosts, h) {
			return true
		}
	}
	return false
}

// mergeOperation is the imported operation op on the route of the updated
// spec's operation kept: the document gives method, path, hosts and inputs;
// the kept operation gives its name and every field a person sets when it
// sets them (summary, description, idempotency, credential unless
// --credential is given, websocket, audit, approval preview); approval is
// the stricter of the two.
func mergeOperation(kept, op policy.Operation, credentialFlag bool) policy.Operation {
	out := op
	out.Name = kept.Name
	if kept.Summary != "" {
		out.Summary = kept.Summary
	}
	if kept.Description != "" {
		out.Description = kept.Description
	}
	if kept.Idempotency != "" {
		out.Idempotency = kept.Idempotency
	}
	if out.Approval == "" { // the import sets only "required"
		out.Approval = kept.Approval
	}
	if kept.Credential != "" && !credentialFlag {
		out.Credential = kept.Credential
	}
	out.WebSocket = out.WebSocket || kept.WebSocket
	if len(kept.Audit) > 0 {
		out.Audit = kept.Audit
	}
	if kept.ApprovalPreview != nil {
		out.ApprovalPreview = kept.ApprovalPreview
	}
	out.Inputs = mergeInputs(kept, op)
	return out
}

// mergeInputs is the document's inputs (names, types, required), each
// taking the kept input's description when it has one, followed by the kept
// operation's inputs the document does not declare (a query parameter a
// person added), except the kept path's templates.
func mergeInputs(kept, op policy.Operation) []policy.Input {
	keptPath := map[string]bool{}
	for _, m := range template.FindAllString(kept.Path, -1) {
		keptPath[m[1:len(m)-1]] = true
	}
	out := slices.Clone(op.Inputs)
	for _, k := range kept.Inputs {
		i := slices.IndexFunc(out, func(in policy.Input) bool { return in.Name == k.Name })
		switch {
		case i >= 0:
			if k.Description != "" {
				out[i].Description = k.Description
			}
		case !keptPath[k.Name]:
			out = append(out, k)
		}
	}
	return out
}
