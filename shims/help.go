package shims

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/aileron-dev/aileron-proxy/policy"
)

// exitCodesHelp closes every help text; keep it in step with the script and
// docs/shims.md.
const exitCodesHelp = `Output: the upstream response body on stdout, as the upstream sent it;
--json prints the daemon's whole response envelope instead.
Exit status: 0 upstream 2xx; 1 upstream non-2xx (body printed, status on
stderr); 64 usage error or invalid args; 69 daemon unreachable or
AILERON_API_URL unset; 70 cannot create temporary files; 76 daemon reply
without the shim protocol; 77 denied (policy, approval or credential).
`

// toolHelp renders `<tool> --help`: every operation in full, or for a
// grouped tool (see isGrouped) one line per operation by group.
func toolHelp(r toolRef) string {
	var b strings.Builder
	writeToolHeader(&b, r)
	fmt.Fprintf(&b, "\nUsage:\n  %s <operation> [--args '<json object>'] [--json]\n  %s <operation> --help\n", r.command, r.command)
	if isGrouped(r.tool) {
		writeGroupedOperations(&b, r)
		b.WriteString("\n")
		b.WriteString(exitCodesHelp)
		return b.String()
	}
	b.WriteString("\nOperations:\n")
	for i := range r.tool.Operations {
		op := &r.tool.Operations[i]
		b.WriteString("\n")
		fmt.Fprintf(&b, "  %s", cleanLine(op.Name))
		if op.Summary != "" {
			fmt.Fprintf(&b, " - %s", cleanLine(op.Summary))
		}
		b.WriteString("\n")
		writeOperation(&b, op, "    ")
	}
	b.WriteString("\n")
	b.WriteString(exitCodesHelp)
	return b.String()
}

// operationHelp renders `<tool> <op> --help`.
func operationHelp(r toolRef, op *policy.Operation) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.command, cleanLine(op.Name))
	if op.Summary != "" {
		fmt.Fprintf(&b, " - %s", cleanLine(op.Summary))
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "Connector %s %s, tool %s", cleanLine(r.conn.Spec.Connector.FQN), versionText(r.conn.Spec.Connector.Version), r.command)
	if r.tool.Description != "" {
		first, _, _ := strings.Cut(clean(r.tool.Description), "\n")
		fmt.Fprintf(&b, ": %s", first)
	}
	b.WriteString("\n\n")
	writeOperation(&b, op, "  ")
	fmt.Fprintf(&b, "\nUsage:\n  %s %s [--args '<json object>'] [--json]\n", r.command, cleanLine(op.Name))
	fmt.Fprintf(&b, "\nExample:\n  %s\n\n", exampleCall(r.command, op))
	b.WriteString(exitCodesHelp)
	return b.String()
}

func writeToolHeader(b *strings.Builder, r toolRef) {
	b.WriteString(r.command)
	if r.tool.Description != "" {
		fmt.Fprintf(b, " - %s", indentText(clean(r.tool.Description), "  "))
	}
	b.WriteString("\n")
	meta := r.conn.Spec.Connector
	fmt.Fprintf(b, "Connector %s %s", cleanLine(meta.FQN), versionText(meta.Version))
	if r.tool.Name != r.command {
		fmt.Fprintf(b, ", tool %q", cleanLine(r.tool.Name))
	}
	b.WriteString("\n")
	if meta.Description != "" {
		fmt.Fprintf(b, "%s\n", indentText(clean(meta.Description), ""))
	}
}

func versionText(v string) string {
	if v == "" {
		return "(unversioned)"
	}
	return cleanLine(v)
}

// writeOperation writes the details of op, each line prefixed by indent.
func writeOperation(b *strings.Builder, op *policy.Operation, indent string) {
	if op.Description != "" {
		fmt.Fprintf(b, "%s%s\n", indent, indentText(clean(op.Description), indent))
	}
	if op.IsProxyable() {
		fmt.Fprintf(b, "%s%s %s\n", indent, cleanLine(op.Method), cleanLine(op.Path))
	} else {
		fmt.Fprintf(b, "%smethod and path: not declared (the daemon cannot run this operation)\n", indent)
	}
	hosts := "none"
	if len(op.Hosts) > 0 {
		hs := make([]string, len(op.Hosts))
		for i, h := range op.Hosts {
			hs[i] = cleanLine(h)
		}
		hosts = strings.Join(hs, ", ")
	}
	fmt.Fprintf(b, "%shosts: %s\n", indent, hosts)
	fmt.Fprintf(b, "%scredential: %s\n", indent, cleanLine(op.Credential.String()))
	if op.WebSocket {
		fmt.Fprintf(b, "%swebsocket: yes (an agent may open this GET as a WebSocket through the proxy; this command sends a plain request)\n", indent)
	}
	approval := cleanLine(op.Approval.String())
	if op.Approval.IsRequired() {
		approval += " (each call waits until a person approves or denies it)"
	}
	fmt.Fprintf(b, "%sapproval: %s\n", indent, approval)
	idem := cleanLine(op.Idempotency.String())
	if !op.Idempotency.IsRetryable() {
		idem += " (never retried; check the result before repeating a call)"
	}
	fmt.Fprintf(b, "%sidempotency: %s\n", indent, idem)
	writeInputs(b, op.Inputs, indent)
}

// writeInputs writes an inputs table, each line prefixed by indent.
func writeInputs(b *strings.Builder, inputs []policy.Input, indent string) {
	if len(inputs) == 0 {
		fmt.Fprintf(b, "%sinputs: none\n", indent)
		return
	}
	fmt.Fprintf(b, "%sinputs:\n", indent)
	nameW, typeW := 0, 0
	for _, in := range inputs {
		nameW = max(nameW, utf8.RuneCountInString(cleanLine(in.Name)))
		typeW = max(typeW, utf8.RuneCountInString(inputType(in)))
	}
	for _, in := range inputs {
		req := "optional"
		if in.Required {
			req = "required"
		}
		line := fmt.Sprintf("%s  %s  %s  %s", indent, pad(cleanLine(in.Name), nameW), pad(inputType(in), typeW), req)
		if in.Description != "" {
			descIndent := indent + "  " + strings.Repeat(" ", nameW+2+typeW+2+len(req)+2)
			line += "  " + indentText(clean(in.Description), descIndent)
		}
		b.WriteString(line)
		b.WriteString("\n")
	}
}

func inputType(in policy.Input) string {
	if in.Type == "" {
		return string(policy.InputString)
	}
	return cleanLine(in.Type.String())
}

func pad(s string, w int) string {
	if n := utf8.RuneCountInString(s); n < w {
		return s + strings.Repeat(" ", w-n)
	}
	return s
}

// exampleCall builds a call with placeholder values for the required inputs
// (the first input when none is required), quoted for a POSIX shell.
func exampleCall(command string, op *policy.Operation) string {
	inputs := make([]policy.Input, 0, len(op.Inputs))
	for _, in := range op.Inputs {
		if in.Required {
			inputs = append(inputs, in)
		}
	}
	if len(inputs) == 0 && len(op.Inputs) > 0 {
		inputs = op.Inputs[:1]
	}
	call := command + " " + op.Name
	if len(inputs) == 0 {
		return call
	}
	var obj bytes.Buffer
	obj.WriteByte('{')
	for i, in := range inputs {
		if i > 0 {
			obj.WriteByte(',')
		}
		obj.WriteString(jsonString(in.Name))
		obj.WriteByte(':')
		obj.WriteString(placeholder(in))
	}
	obj.WriteByte('}')
	return call + " --args " + ShellQuote(obj.String())
}

func placeholder(in policy.Input) string {
	switch in.Type {
	case policy.InputInteger:
		return "1"
	case policy.InputNumber:
		return "1.5"
	case policy.InputBoolean:
		return "true"
	case policy.InputArray:
		return "[" + jsonString("<"+in.Name+">") + "]"
	case policy.InputObject:
		return "{}"
	default:
		return jsonString("<" + in.Name + ">")
	}
}

// jsonString encodes s as a JSON string without HTML escaping.
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // encoding a string cannot fail
	return strings.TrimSuffix(b.String(), "\n")
}

// ShellQuote quotes s for a POSIX shell: everything inside single quotes is
// literal, and each single quote becomes quote, backslash, quote, quote.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// clean makes spec text safe to print on an agent's terminal: CR and CRLF
// become LF, tabs become spaces, other control characters, bidirectional
// overrides and line separators are shown as \uXXXX, trailing spaces and
// blank leading or trailing lines are removed.
func clean(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n':
			b.WriteRune(r)
		case r == '\t':
			b.WriteString("  ")
		case unicode.IsControl(r) || isInvisibleFormat(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	lines := strings.Split(b.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	for len(lines) > 0 && lines[0] == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return strings.Join(lines, "\n")
}

// cleanLine is clean for values that must stay on one line: newlines are
// shown as \n.
func cleanLine(s string) string {
	return strings.ReplaceAll(clean(s), "\n", `\n`)
}

// isInvisibleFormat reports whether r reorders or hides text on a terminal:
// bidirectional controls, line and paragraph separators, and the BOM.
func isInvisibleFormat(r rune) bool {
	switch {
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069,
		r == 0x200e, r == 0x200f, r == 0x061c,
		r == 0x2028, r == 0x2029, r == 0xfeff:
		return true
	}
	return false
}

// indentText prefixes every line after the first with indent.
func indentText(s, indent string) string {
	return strings.ReplaceAll(s, "\n", "\n"+indent)
}
