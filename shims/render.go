package shims

import (
	"bytes"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/aileron-dev/aileron-proxy/actions"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// basicCommands are the commands a sandbox needs to work (a shell, the
// environment, the network clients the shims and agents use, file basics,
// privilege changes and common runtimes). A tool whose command equals one of
// them is refused, because the shim in /usr/local/bin would shadow the real
// program. Shell builtins that are also commands (echo, printf, true, ...)
// are here too: the shell would run its builtin and never reach the shim.
// Keep the list short and in step with docs/shims.md. Read only.
var basicCommands = []string{
	"[", "aileron-proxy", "bash", "busybox", "cat", "cd", "command", "cp", "curl", "dash",
	"echo", "env", "exec", "export", "false", "git", "kill", "ls", "mkdir", "mv", "node", "npm",
	"printf", "pwd", "python", "python3", "read", "rm", "set", "sh", "ssh", "su", "sudo",
	"test", "true", "type", "wget",
}

// BasicCommands returns a copy of the commands no tool may shadow, sorted.
func BasicCommands() []string {
	out := append([]string(nil), basicCommands...)
	sort.Strings(out)
	return out
}

// helpWords are the words a shim reserves for its own help; no operation may
// be named like them.
var helpWords = map[string]bool{"help": true}

// RenderOptions says what to render and which command names are taken.
type RenderOptions struct {
	// Connectors are the active connectors whose tools become commands.
	// Every Spec must be non-nil; order does not matter.
	Connectors []policy.Connector
	// AgentCommand is the agent the sandbox runs (e.g. "claude"); a path is
	// reduced to its base name. Empty means no agent command is checked.
	AgentCommand string
	// Reserved are other command names the launcher mounts; empty entries
	// are ignored.
	Reserved []string
	// Actions are installed actions; the active ones become one
	// action-derived tool per connector they run (ActionCommand).
	Actions []actions.Installed
}

// Rendered is the complete output of Render, held in memory until WriteDir.
type Rendered struct {
	// ToolsTxt is the content of tools.txt: one line per action-derived
	// tool, then one per connector tool, each group sorted by command.
	ToolsTxt []byte
	// Shims holds one script per tool, sorted by Command.
	Shims []Shim
}

// Shim is the script of one tool.
type Shim struct {
	// Command is the file name under bin/ and the word the agent types:
	// policy.ToolCommand of the tool name.
	Command string
	// ConnectorFQN and ConnectorHash identify the connector the tool is from.
	ConnectorFQN  string
	ConnectorHash string
	// Actions are the actions of an action-derived tool, by name; nil for
	// a connector tool.
	Actions []string
	// Tool is the tool name as the spec writes it; the shim sends it to the
	// run endpoint.
	Tool string
	// Script is the POSIX sh script, written with mode 0755.
	Script []byte
}

// ConflictKind says why a command cannot be rendered. The zero value is
// never produced by Render.
type ConflictKind string

// Conflict kinds.
const (
	ConflictUnknown ConflictKind = ""
	// ConflictDuplicate: two or more tools resolve to the same command.
	ConflictDuplicate ConflictKind = "duplicate_command"
	// ConflictAgent: the command equals the agent command.
	ConflictAgent ConflictKind = "agent_command"
	// ConflictReserved: the command equals a reserved name.
	ConflictReserved ConflictKind = "reserved_command"
	// ConflictBasic: the command would shadow a basic sandbox command.
	ConflictBasic ConflictKind = "basic_command"
	// ConflictInvalid: a name or spec the shim cannot carry safely.
	ConflictInvalid ConflictKind = "invalid_spec"
	// ConflictAction: a connector tool's command equals the command of an
	// action-derived tool.
	ConflictAction ConflictKind = "action_command"
)

// String returns the kind's spelling, "unknown" for the zero value.
func (k ConflictKind) String() string {
	if k == ConflictUnknown {
		return "unknown"
	}
	return string(k)
}

// Conflict is one reason Render refused to render.
type Conflict struct {
	Kind ConflictKind
	// Command is the tool command concerned; empty when the problem is not
	// about one command.
	Command string
	// Message names the connectors (FQN and hash) involved and says how to
	// fix it.
	Message string
}

// ConflictError lists every conflict Render found. Nothing is rendered when
// it is returned.
type ConflictError struct {
	Conflicts []Conflict
}

// Error lists every conflict, one per line.
func (e *ConflictError) Error() string {
	var b strings.Builder
	if len(e.Conflicts) == 1 {
		b.WriteString("rendering tools: 1 conflict:")
	} else {
		fmt.Fprintf(&b, "rendering tools: %d conflicts:", len(e.Conflicts))
	}
	for _, c := range e.Conflicts {
		b.WriteString("\n  ")
		b.WriteString(c.Message)
	}
	return b.String()
}

// toolRef is one tool of one connector on its way to becoming a command.
type toolRef struct {
	command string
	conn    policy.Connector
	tool    *policy.Tool
}

func (r toolRef) describe() string {
	return fmt.Sprintf("tool %q of %s (%s)", r.tool.Name, r.conn.Spec.Connector.FQN, r.conn.Hash)
}

func removeHint(fqn string) string {
	return fmt.Sprintf("%q", "aileron-proxy connector remove "+fqn)
}

// Render renders tools.txt and one shim per tool of opts.Connectors. It
// returns a *ConflictError listing every conflict when any tool command is
// claimed twice, equals the agent command or a reserved name, would shadow a
// basic command (BasicCommands), or when a name is not safe to put in a
// shim; then nothing is rendered. The active opts.Actions add one
// action-derived tool per connector (ActionCommand), which must not share a
// command with a connector tool (ConflictAction), another action tool, the
// agent, a reserved or a basic command.
func Render(opts RenderOptions) (*Rendered, error) {
	var conflicts []Conflict
	add := func(kind ConflictKind, cmd, format string, args ...any) {
		conflicts = append(conflicts, Conflict{Kind: kind, Command: cmd, Message: fmt.Sprintf(format, args...)})
	}

	byCommand := map[string][]toolRef{}
	for i, c := range opts.Connectors {
		if c.Spec == nil {
			add(ConflictInvalid, "", "connector %d (%s) has no spec; reinstall it with \"aileron-proxy connector install\"", i, c.Hash)
			continue
		}
		fqn := c.Spec.Connector.FQN
		if _, err := policy.ParseFQN(fqn); err != nil {
			add(ConflictInvalid, "", "connector %q (%s) has an invalid FQN: %s; fix the spec and reinstall it", fqn, c.Hash, err.Error())
			continue
		}
		for ti := range c.Spec.Tools {
			t := &c.Spec.Tools[ti]
			cmd := policy.ToolCommand(t.Name)
			if !policy.IsValidName(t.Name) || !policy.IsSafeCommandName(cmd) {
				add(ConflictInvalid, "", "tool %q of %s (%s) is not a safe command name; rename it in the spec to letters, digits, '.', '_' and '-', starting with a letter or digit", t.Name, fqn, c.Hash)
				continue
			}
			if problems := checkOperations(t); len(problems) > 0 {
				for _, p := range problems {
					add(ConflictInvalid, cmd, "tool %q of %s (%s): %s", t.Name, fqn, c.Hash, p)
				}
				continue
			}
			byCommand[cmd] = append(byCommand[cmd], toolRef{command: cmd, conn: c, tool: t})
		}
	}

	agent := normalizeCommand(opts.AgentCommand)
	reserved := map[string]bool{}
	for _, r := range opts.Reserved {
		if n := normalizeCommand(r); n != "" {
			reserved[n] = true
		}
	}
	basic := map[string]bool{}
	for _, b := range basicCommands {
		basic[b] = true
	}

	commands := make([]string, 0, len(byCommand))
	for cmd := range byCommand {
		commands = append(commands, cmd)
	}
	sort.Strings(commands)

	var refs []toolRef
	for _, cmd := range commands {
		owners := byCommand[cmd]
		sort.Slice(owners, func(i, j int) bool {
			a, b := owners[i], owners[j]
			if a.conn.Spec.Connector.FQN != b.conn.Spec.Connector.FQN {
				return a.conn.Spec.Connector.FQN < b.conn.Spec.Connector.FQN
			}
			return a.tool.Name < b.tool.Name
		})
		if len(owners) > 1 {
			add(ConflictDuplicate, cmd, "%s", duplicateMessage(cmd, owners))
		}
		first := owners[0]
		fqn := first.conn.Spec.Connector.FQN
		switch {
		case agent != "" && cmd == agent:
			add(ConflictAgent, cmd, "command %q of %s would shadow the agent command %q; remove the connector with %s or launch a different agent", cmd, first.describe(), agent, removeHint(fqn))
		case reserved[cmd]:
			add(ConflictReserved, cmd, "command %q of %s would shadow %q, a command the sandbox mounts; remove the connector with %s or rename the tool in its spec", cmd, first.describe(), cmd, removeHint(fqn))
		case basic[cmd]:
			add(ConflictBasic, cmd, "command %q of %s would shadow the basic sandbox command %q (see docs/shims.md); remove the connector with %s or rename the tool in its spec", cmd, first.describe(), cmd, removeHint(fqn))
		}
		refs = append(refs, first)
	}
	atools := actionTools(opts.Actions, add)
	actionConflicts(atools, byCommand, agent, reserved, basic, add)
	for _, t := range atools {
		for _, n := range t.names() {
			if strings.HasPrefix(n, "-") || helpWords[n] {
				add(ConflictInvalid, t.command, "action %q collides with the shim's own flags and help; rename it in its action.md", n)
			}
		}
	}
	if len(conflicts) > 0 {
		return nil, &ConflictError{Conflicts: conflicts}
	}

	out := &Rendered{}
	var txt bytes.Buffer
	for _, t := range atools {
		script, err := renderActionScript(t)
		if err != nil {
			return nil, fmt.Errorf("rendering the shim of %s: %w", t.describe(), err)
		}
		out.Shims = append(out.Shims, Shim{Command: t.command, ConnectorFQN: t.fqn, Actions: t.names(), Script: script})
		writeToolsLine(&txt, t.command, t.fqn, "installed Aileron connector used by actions: "+strings.Join(t.names(), ", "))
	}
	for _, r := range refs {
		script, err := renderScript(r)
		if err != nil {
			return nil, fmt.Errorf("rendering the shim of %s: %w", r.describe(), err)
		}
		out.Shims = append(out.Shims, Shim{
			Command:       r.command,
			ConnectorFQN:  r.conn.Spec.Connector.FQN,
			ConnectorHash: r.conn.Hash,
			Tool:          r.tool.Name,
			Script:        script,
		})
		writeToolsLine(&txt, r.command, r.conn.Spec.Connector.FQN, "Aileron connector operations: "+operationList(r.command, r.tool))
	}
	sort.SliceStable(out.Shims, func(i, j int) bool { return out.Shims[i].Command < out.Shims[j].Command })
	out.ToolsTxt = txt.Bytes()
	return out, nil
}

// writeToolsLine writes one tools.txt line: the command, one space, the
// connector FQN, " -- " and what the tool offers. Action and connector
// lines share it, so they separate their fields the same way.
func writeToolsLine(w *bytes.Buffer, command, fqn, what string) {
	fmt.Fprintf(w, "%s %s -- %s\n", command, fqn, what)
}

// operationNames returns the names of t's operations in spec order.
func operationNames(t *policy.Tool) []string {
	names := make([]string, len(t.Operations))
	for i, op := range t.Operations {
		names[i] = op.Name
	}
	return names
}

// checkOperations returns what makes the operations of t unsafe or
// ambiguous in a shim.
func checkOperations(t *policy.Tool) []string {
	var problems []string
	if len(t.Operations) == 0 {
		problems = append(problems, "declares no operations; add at least one to the spec")
	}
	seen := map[string]bool{}
	for _, op := range t.Operations {
		switch {
		case !policy.IsValidName(op.Name):
			problems = append(problems, fmt.Sprintf("operation %q is not a valid name; use letters, digits, '.', '_', ':' and '-'", op.Name))
		case strings.HasPrefix(op.Name, "-") || helpWords[op.Name]:
			problems = append(problems, fmt.Sprintf("operation %q collides with the shim's own flags and help; rename it in the spec", op.Name))
		case seen[op.Name]:
			problems = append(problems, fmt.Sprintf("operation %q is declared twice; remove one from the spec", op.Name))
		}
		seen[op.Name] = true
		for _, in := range op.Inputs {
			if !policy.IsValidName(in.Name) {
				problems = append(problems, fmt.Sprintf("input %q of operation %q is not a valid name; use letters, digits, '.', '_', ':' and '-'", in.Name, op.Name))
			}
		}
	}
	return problems
}

func duplicateMessage(cmd string, owners []toolRef) string {
	var b strings.Builder
	fmt.Fprintf(&b, "command %q is claimed by ", cmd)
	fqns := map[string]bool{}
	for i, o := range owners {
		if i > 0 {
			b.WriteString(" and ")
		}
		b.WriteString(o.describe())
		fqns[o.conn.Spec.Connector.FQN] = true
	}
	if len(fqns) == 1 {
		b.WriteString("; rename one of the tools in the spec and reinstall it")
		return b.String()
	}
	b.WriteString("; keep one: remove the others with ")
	var hints []string
	for _, o := range owners {
		h := removeHint(o.conn.Spec.Connector.FQN)
		if fqns[o.conn.Spec.Connector.FQN] {
			hints = append(hints, h)
			delete(fqns, o.conn.Spec.Connector.FQN)
		}
	}
	b.WriteString(strings.Join(hints, " or "))
	return b.String()
}

// normalizeCommand reduces a command or path to the lower-case base name
// that tool commands are compared with.
func normalizeCommand(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	return strings.ToLower(path.Base(s))
}
