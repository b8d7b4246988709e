// Package actions owns installed action manifests: the action.md format
// (TOML front matter between "+++" lines, then Markdown), its validation
// against the installed connector specs, and the content-addressed store
// under $AILERON_HOME/store/actions.
//
// An action names one operation of an installed connector, declares the
// inputs a caller may pass and may preset further arguments. The package is
// pure: no network, no logging globals, no servers.
package actions

import "github.com/aileron-dev/aileron-proxy/policy"

// FileName is the name of a manifest file, in the store and in a connector
// package (actions/<name>/action.md).
const FileName = "action.md"

// Action is a parsed, structurally valid action manifest.
type Action struct {
	// Name identifies the action (policy name rules); the run endpoint is
	// /v1/actions/<name>/run.
	Name string
	// Version is a semantic version without a leading "v"; empty means
	// unversioned (lowest).
	Version string
	// Source is where the manifest was published; informational.
	Source string
	// Requires lists the connectors the action declares it needs.
	Requires []Requirement
	// Intent is [match] intent, shown in the shim's help.
	Intent string
	// Execute is the one step the action runs.
	Execute Step
	// ApprovalRequired is [approval] required: each run waits for a person.
	ApprovalRequired bool
	// Preview is [approval.preview]: a read-only operation another runtime
	// calls before it shows the approval. It is checked against the
	// connector but not run (the approval shows the request itself); nil
	// when absent.
	Preview *Preview
	// Inputs are the arguments a caller may pass, in manifest order.
	Inputs []Input
	// Description is the Markdown after the front matter, trimmed.
	Description string
	// Warnings are what Parse accepted but the author should know (a
	// placeholder hash, a preview that is not fetched), with their lines.
	Warnings []Problem

	// lines maps a key path ("inputs[1].name") to its line in the file.
	lines map[string]int
	// inputPaths holds the key path ("inputs[3]") of each Inputs entry,
	// which differs from its index when an earlier entry was dropped.
	inputPaths []string
	// untyped marks the key paths of inputs whose type was invalid: they
	// are kept (as strings) but their type is not compared.
	untyped map[string]bool
	// incomplete is set when an input or preset was dropped as invalid, so
	// the arguments the action supplies are not known.
	incomplete bool
}

// Preview is [approval.preview] of a published manifest.
type Preview struct {
	// Op is the operation of the step's connector to call.
	Op string
	// Args are its arguments: JSON values, where "${args.<input>}" stands
	// for the value of an action input.
	Args map[string]any
	// Render maps a label to a field of the preview's response.
	Render map[string]string
}

// Requirement is one [[requires.connectors]] entry.
type Requirement struct {
	Name         string
	Version      string
	Capabilities []string
	// Hash is the digest of the connector package the action was released
	// with, "sha256:<64 hex digits>" in lower case, which Check compares
	// with the installed connector's; empty when absent or a placeholder
	// ("sha256:bound-at-release", which Parse accepts with a warning).
	Hash string
}

// Step is the [[execute]] step: one operation of an installed connector.
type Step struct {
	ID string
	// Connector is the connector FQN, normalized.
	Connector string
	// Op is the operation name.
	Op string
	// Tool names the tool when two tools of the spec share the operation
	// name; empty otherwise.
	Tool string
	// Idempotent, when set, is the manifest's claim; informational.
	Idempotent *bool
	// Args are [execute.args]: fixed arguments merged under the caller's
	// inputs, as JSON values (numbers as json.Number).
	Args map[string]any
}

// Input is one argument a caller may pass.
type Input struct {
	Name        string
	Type        policy.InputType
	Description string
	Required    bool
	// Label is the input's display name for people (help, approvals);
	// empty means the name is shown.
	Label string
	// Multiline marks a string input whose value is long text: help says
	// so and approval views show it as a block, whole.
	Multiline bool
	// ItemsType is the type of each element of an array input; empty when
	// not declared (any element).
	ItemsType policy.InputType
}

// DisplayName returns the label of the input, else its name.
func (in Input) DisplayName() string {
	if in.Label != "" {
		return in.Label
	}
	return in.Name
}

// Line returns the line of the file where key path p (e.g. "execute[0].op")
// is written, or 0 when unknown.
func (a *Action) Line(p string) int { return a.lines[p] }
