package shims

import (
	"fmt"
	"sort"
	"strings"

	"github.com/aileron-dev/aileron-proxy/actions"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// ActionsPath is the run path of an action, appended to
// ${AILERON_API_URL%/} with the action's name in place of %s.
const ActionsPath = "/actions/%s/run"

// ActionCommand returns the command of the action-derived tool of a
// connector: the repository segment of its FQN without a leading
// "aileron-connector-" or "connector-", in lower case, with every character
// a command name cannot hold replaced by '-' and leading non-alphanumerics
// dropped ("github://acme/aileron-connector-google" → "google"). It returns
// "" when nothing usable is left or the FQN is invalid.
func ActionCommand(fqn string) string {
	f, err := policy.ParseFQN(fqn)
	if err != nil {
		return ""
	}
	name := f.Repo
	for _, prefix := range []string{"aileron-connector-", "connector-"} {
		if rest, ok := strings.CutPrefix(strings.ToLower(name), prefix); ok && rest != "" {
			name = name[len(prefix):]
			break
		}
	}
	cmd := []byte(policy.ToolCommand(name))
	for i, c := range cmd {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			cmd[i] = '-'
		}
	}
	out := strings.TrimLeft(string(cmd), "._-")
	if !policy.IsSafeCommandName(out) {
		return ""
	}
	return out
}

// actionTool is the command of one connector's installed actions.
type actionTool struct {
	command string
	fqn     string
	actions []actions.Installed // sorted by name
}

func (t actionTool) names() []string {
	out := make([]string, len(t.actions))
	for i, a := range t.actions {
		out[i] = a.Action.Name
	}
	return out
}

// describe names the tool's source for conflict messages.
func (t actionTool) describe() string {
	return fmt.Sprintf("the action tool of %s (installed actions: %s)", t.fqn, strings.Join(t.names(), ", "))
}

func (t actionTool) removeHints() string {
	hints := make([]string, len(t.actions))
	for i, n := range t.names() {
		hints[i] = fmt.Sprintf("%q", "aileron-proxy action remove "+n)
	}
	return strings.Join(hints, " and ")
}

// actionTools groups the active actions by the connector they run, one
// tool per connector, sorted by command. Actions whose connector yields no
// command are reported through add.
func actionTools(list []actions.Installed, add func(kind ConflictKind, cmd, format string, args ...any)) []actionTool {
	byFQN := map[string]*actionTool{}
	for _, a := range list {
		if !a.IsActive() {
			continue
		}
		fqn := a.Target.ConnectorFQN
		t := byFQN[fqn]
		if t == nil {
			t = &actionTool{command: ActionCommand(fqn), fqn: fqn}
			byFQN[fqn] = t
		}
		t.actions = append(t.actions, a)
	}
	var out []actionTool
	for _, t := range byFQN {
		sort.Slice(t.actions, func(i, j int) bool { return t.actions[i].Action.Name < t.actions[j].Action.Name })
		if t.command == "" {
			add(ConflictInvalid, "", "the connector %s of installed actions %s gives no usable command name; remove them with %s", t.fqn, strings.Join(t.names(), ", "), t.removeHints())
			continue
		}
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].command < out[j].command || out[i].command == out[j].command && out[i].fqn < out[j].fqn
	})
	return out
}

// actionConflicts reports each action tool whose command another action
// tool, a connector tool, the agent, a reserved name or a basic command
// already has.
func actionConflicts(tools []actionTool, specs map[string][]toolRef, agent string, reserved, basic map[string]bool, add func(kind ConflictKind, cmd, format string, args ...any)) {
	for i, t := range tools {
		cmd := t.command
		if i > 0 && tools[i-1].command == cmd {
			add(ConflictDuplicate, cmd, "command %q is claimed by %s and %s; keep one: remove the actions of one connector with %s or %s",
				cmd, tools[i-1].describe(), t.describe(), tools[i-1].removeHints(), t.removeHints())
			continue
		}
		if owners := specs[cmd]; len(owners) > 0 {
			o := owners[0]
			add(ConflictAction, cmd, "command %q of %s conflicts with %s; remove the connector with %s, or the actions with %s",
				cmd, o.describe(), t.describe(), removeHint(o.conn.Spec.Connector.FQN), t.removeHints())
		}
		switch {
		case agent != "" && cmd == agent:
			add(ConflictAgent, cmd, "command %q of %s would shadow the agent command %q; remove the actions with %s or launch a different agent", cmd, t.describe(), agent, t.removeHints())
		case reserved[cmd]:
			add(ConflictReserved, cmd, "command %q of %s would shadow %q, a command the sandbox mounts; remove the actions with %s", cmd, t.describe(), cmd, t.removeHints())
		case basic[cmd]:
			add(ConflictBasic, cmd, "command %q of %s would shadow the basic sandbox command %q (see docs/shims.md); remove the actions with %s", cmd, t.describe(), cmd, t.removeHints())
		}
	}
}

// actionInputs returns an action's inputs as operation inputs, for the help
// helpers. A label and the multi-line hint lead the description:
// "Body (multi-line): Plain-text body...".
func actionInputs(a *actions.Action) []policy.Input {
	out := make([]policy.Input, len(a.Inputs))
	for i, in := range a.Inputs {
		out[i] = policy.Input{Name: in.Name, Type: in.Type, Required: in.Required, Description: inputDescription(in)}
	}
	return out
}

// inputDescription returns the help text of an action input: its label,
// "(multi-line)" for long text, "(array of <type>)" for a typed array and
// its description.
func inputDescription(in actions.Input) string {
	var head []string
	if in.Label != "" {
		head = append(head, in.Label)
	}
	if in.Multiline {
		head = append(head, `(multi-line: write line breaks as \n in the JSON string)`)
	}
	if in.ItemsType != "" {
		head = append(head, fmt.Sprintf("(each element %s)", articled(in.ItemsType)))
	}
	switch {
	case len(head) == 0:
		return in.Description
	case in.Description == "":
		return strings.Join(head, " ")
	}
	return strings.Join(head, " ") + ": " + in.Description
}

func articled(t policy.InputType) string {
	switch t {
	case policy.InputInteger, policy.InputArray, policy.InputObject:
		return "an " + string(t)
	}
	return "a " + string(t)
}

// writeAction writes the details of one action, each line prefixed by
// indent.
func writeAction(b *strings.Builder, a actions.Installed, indent string) {
	act := a.Action
	fmt.Fprintf(b, "%sruns: %s %s of %s\n", indent, cleanLine(a.Target.Tool), cleanLine(a.Target.Operation.Name), cleanLine(a.Target.ConnectorFQN))
	approval := "none"
	if act.ApprovalRequired {
		approval = "required (each run waits until a person approves or denies it)"
	}
	fmt.Fprintf(b, "%sapproval: %s\n", indent, approval)
	if len(act.Execute.Args) > 0 {
		keys := make([]string, 0, len(act.Execute.Args))
		for k := range act.Execute.Args {
			keys = append(keys, cleanLine(k))
		}
		sort.Strings(keys)
		fmt.Fprintf(b, "%spresets: %s (fixed; not arguments)\n", indent, strings.Join(keys, ", "))
	}
	writeInputs(b, actionInputs(act), indent)
}

func actionTitle(a *actions.Action) string {
	if a.Intent == "" {
		return cleanLine(a.Name)
	}
	return cleanLine(a.Name) + " - " + cleanLine(a.Intent)
}

// actionToolHelp renders `<tool> --help` of an action tool.
func actionToolHelp(t actionTool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s - installed Aileron actions\nConnector %s\n", t.command, cleanLine(t.fqn))
	fmt.Fprintf(&b, "\nUsage:\n  %s <action> [--args '<json object>'] [--json]\n  %s <action> --help\n", t.command, t.command)
	b.WriteString("\nActions:\n")
	for _, a := range t.actions {
		fmt.Fprintf(&b, "\n  %s\n", actionTitle(a.Action))
		writeAction(&b, a, "    ")
	}
	b.WriteString("\n")
	b.WriteString(exitCodesHelp)
	return b.String()
}

// actionHelp renders `<tool> <action> --help`.
func actionHelp(t actionTool, a actions.Installed) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", t.command, actionTitle(a.Action))
	fmt.Fprintf(&b, "Action %s %s, connector %s\n\n", cleanLine(a.Action.Name), versionText(a.Action.Version), cleanLine(t.fqn))
	writeAction(&b, a, "  ")
	if a.Action.Description != "" {
		fmt.Fprintf(&b, "\n%s\n", indentText(clean(a.Action.Description), ""))
	}
	fmt.Fprintf(&b, "\nUsage:\n  %s %s [--args '<json object>'] [--json]\n", t.command, cleanLine(a.Action.Name))
	op := &policy.Operation{Name: a.Action.Name, Inputs: actionInputs(a.Action)}
	fmt.Fprintf(&b, "\nExample:\n  %s\n\n", exampleCall(t.command, op))
	b.WriteString(exitCodesHelp)
	return b.String()
}

// renderActionScript renders the shim of an action tool: the prelude the
// shared runtime needs, then scriptRuntime. Manifest text appears only in
// quoted heredocs and names only inside single quotes.
func renderActionScript(t actionTool) ([]byte, error) {
	general := actionToolHelp(t)
	helps := make([]string, len(t.actions))
	all := general
	for i, a := range t.actions {
		helps[i] = actionHelp(t, a)
		all += helps[i]
	}
	delim, err := heredocDelimiter(all)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "#!/bin/sh\n# Shim of the Aileron actions of %s, generated by\n", cleanLine(t.fqn))
	b.WriteString("# \"aileron-proxy tools render\". Do not edit: render the tools again.\n")
	b.WriteString("# It needs only a POSIX sh, wget (BusyBox or GNU), cat, mktemp and rm;\n")
	b.WriteString("# see docs/shims.md and docs/actions.md.\n\n")
	fmt.Fprintf(&b, "aileron_cmd=%s\n", ShellQuote(t.command))
	fmt.Fprintf(&b, "aileron_ops=%s\n", ShellQuote(strings.Join(t.names(), ", ")))
	b.WriteString("aileron_noun=action\naileron_path=\n\n")

	b.WriteString("# aileron_help prints the help of the tool.\naileron_help() {\n")
	writeHeredoc(&b, "\t", general, delim)
	b.WriteString("}\n\n")

	b.WriteString("# aileron_op_help ACTION prints the help of one action.\naileron_op_help() {\n\tcase $1 in\n")
	for i, a := range t.actions {
		fmt.Fprintf(&b, "\t%s)\n", ShellQuote(a.Action.Name))
		writeHeredoc(&b, "\t\t", helps[i], delim)
		b.WriteString("\t\t;;\n")
	}
	b.WriteString("\tesac\n}\n\n")

	b.WriteString("# aileron_operation ACTION sets aileron_path to its run path, or fails.\naileron_operation() {\n\tcase $1 in\n")
	for _, a := range t.actions {
		fmt.Fprintf(&b, "\t%s) aileron_path=%s ;;\n", ShellQuote(a.Action.Name), ShellQuote(fmt.Sprintf(ActionsPath, a.Action.Name)))
	}
	b.WriteString("\t*) return 1 ;;\n\tesac\n}\n\n")

	b.WriteString("# aileron_request writes the action run endpoint's request body.\naileron_request() {\n")
	b.WriteString("\tprintf '{\"args\":%s%s}' \"$aileron_args\" \"$aileron_auth\"\n}\n\n")
	b.WriteString(scriptRuntime)
	return []byte(b.String()), nil
}
