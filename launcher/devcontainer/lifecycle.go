package devcontainer

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tailscale/hujson"
)

// The devcontainer lifecycle commands run inside the sandbox, in order.
var LifecycleKeys = []string{"onCreateCommand", "updateContentCommand", "postCreateCommand", "postStartCommand"}

// createTimeKeys run once per container; a long-lived sandbox skips them
// on later starts.
func isCreateTime(key string) bool { return key != "postStartCommand" }

// LifecycleCommand is one command: a shell string (run with /bin/sh -c)
// or argv (run as is, no shell).
type LifecycleCommand struct {
	// Name is the entry's name in the object form; empty otherwise.
	Name  string   `json:"name,omitempty"`
	Shell string   `json:"shell,omitempty"`
	Args  []string `json:"args,omitempty"`
}

// LifecycleStep is one lifecycle key's commands; several (the object
// form) run in parallel, and the step fails when any does.
type LifecycleStep struct {
	Key      string             `json:"key"`
	Commands []LifecycleCommand `json:"commands"`
}

// parseLifecycle reads a lifecycle command in its string, array or object
// form; ok is false when it is empty or malformed (a problem recorded).
func (p *dcParser) parseLifecycle(v *hujson.Value, key string) (LifecycleStep, bool) {
	step := LifecycleStep{Key: key}
	one := func(v *hujson.Value, key, name string) (LifecycleCommand, bool) {
		switch x := v.Value.(type) {
		case hujson.Literal:
			if x.Kind() != '"' {
				break
			}
			s := x.String()
			return LifecycleCommand{Name: name, Shell: s}, strings.TrimSpace(s) != ""
		case *hujson.Array:
			args := p.strings(v, key)
			return LifecycleCommand{Name: name, Args: args}, len(args) > 0
		}
		p.addf(v, key, "must be a string, an array of strings or an object of them, not %s", kindName(v))
		return LifecycleCommand{}, false
	}
	if _, isObj := v.Value.(*hujson.Object); isObj {
		members, _ := objectMembers(v)
		for _, m := range members {
			if c, ok := one(m.value, key+"."+m.name, m.name); ok {
				step.Commands = append(step.Commands, c)
			}
		}
		sort.SliceStable(step.Commands, func(i, j int) bool { return step.Commands[i].Name < step.Commands[j].Name })
	} else if c, ok := one(v, key, ""); ok {
		step.Commands = append(step.Commands, c)
	}
	return step, len(step.Commands) > 0
}

// substitute resolves the variables in the command.
func (c LifecycleCommand) Substitute(vc VarContext) LifecycleCommand {
	out := LifecycleCommand{Name: c.Name, Shell: Substitute(c.Shell, vc)}
	for _, a := range c.Args {
		out.Args = append(out.Args, Substitute(a, vc))
	}
	return out
}

// String is the command as shown in the plan and messages.
func (c LifecycleCommand) String() string {
	s := c.Shell
	if s == "" {
		s = strings.Join(c.Args, " ")
	}
	if c.Name != "" {
		return c.Name + ": " + s
	}
	return s
}

// shQuote quotes s for a POSIX shell.
func ShQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// shellLine is c as one shell command line.
func (c LifecycleCommand) shellLine() string {
	if c.Shell != "" {
		return "/bin/sh -c " + ShQuote(c.Shell)
	}
	q := make([]string, len(c.Args))
	for i, a := range c.Args {
		q[i] = ShQuote(a)
	}
	return strings.Join(q, " ")
}

// LifecycleScript is a /bin/sh script that runs steps in order (the
// commands of one step in parallel), showing each on stderr, and then
// execs its arguments (the agent) in the same process, so the agent keeps
// PID 1 and its exit status. A failing command stops it with that
// command's exit status, before the agent starts. createTime false skips
// the create-time steps (a long-lived sandbox's later starts). Run it as
// /bin/sh -c SCRIPT aileron-lifecycle AGENT [ARGS...].
func LifecycleScript(steps []LifecycleStep, createTime bool) string {
	var b strings.Builder
	b.WriteString("set -u\n")
	for _, s := range steps {
		if !createTime && isCreateTime(s.Key) {
			continue
		}
		for i, c := range s.Commands {
			fmt.Fprintf(&b, "echo %s >&2\n", ShQuote("aileron: running "+s.Key+": "+c.String()))
			fmt.Fprintf(&b, "( %s ) & p%d=$!\n", c.shellLine(), i)
		}
		b.WriteString("rc=0\n")
		for i, c := range s.Commands {
			fmt.Fprintf(&b, "wait $p%d; r=$?; if [ $r -ne 0 ]; then echo %s\"$r\"%s >&2; [ $rc -ne 0 ] || rc=$r; fi\n", i,
				ShQuote("aileron: "+s.Key+" failed ("+c.String()+") with exit status "), ShQuote("; the agent was not started"))
		}
		b.WriteString("[ $rc -eq 0 ] || exit $rc\n")
	}
	b.WriteString("exec \"$@\"\n")
	return b.String()
}
