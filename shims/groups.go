package shims

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aileron-dev/aileron-proxy/policy"
)

// Large tools. A tool with more than groupedAbove operations (an API
// imported whole has hundreds) would make `<tool> --help` thousands of lines
// and tools.txt one line of every name, so its help lists one line per
// operation, grouped, and tools.txt and the shim's usage errors name the
// groups instead of every operation. The group of an operation is its name
// up to the first '.' ("repos.list-for-org" is in "repos"); names without
// a '.' are in noPrefixGroup. Keep this in step with docs/shims.md.
const (
	groupedAbove  = 30
	noPrefixGroup = "(no prefix)"
	// maxNameColumn caps the padding of the name column of the grouped
	// help; longer names push their line's other columns right.
	maxNameColumn = 40
)

// opGroup is the operations of a tool that share a group, sorted by name.
type opGroup struct {
	name string
	ops  []*policy.Operation
}

// isGrouped reports whether t is large enough for grouped help.
func isGrouped(t *policy.Tool) bool { return len(t.Operations) > groupedAbove }

// groupOf returns the group of an operation name.
func groupOf(name string) string {
	if g, _, ok := strings.Cut(name, "."); ok && g != "" {
		return g
	}
	return noPrefixGroup
}

// groupOperations returns t's operations by group: groups sorted by name,
// noPrefixGroup last, operations in a group sorted by name.
func groupOperations(t *policy.Tool) []opGroup {
	idx := map[string]int{}
	var groups []opGroup
	for i := range t.Operations {
		op := &t.Operations[i]
		g := groupOf(op.Name)
		j, ok := idx[g]
		if !ok {
			j = len(groups)
			idx[g] = j
			groups = append(groups, opGroup{name: g})
		}
		groups[j].ops = append(groups[j].ops, op)
	}
	slices.SortFunc(groups, func(a, b opGroup) int {
		switch {
		case a.name == noPrefixGroup:
			return 1
		case b.name == noPrefixGroup:
			return -1
		}
		return strings.Compare(a.name, b.name)
	})
	for _, g := range groups {
		slices.SortStableFunc(g.ops, func(a, b *policy.Operation) int { return strings.Compare(a.Name, b.Name) })
	}
	return groups
}

// operationList is what tools.txt and the shim's usage errors say a
// connector tool offers: every operation name in spec order, or for a
// grouped tool the count, the groups with their sizes, and where the list
// is.
func operationList(command string, t *policy.Tool) string {
	if !isGrouped(t) {
		return strings.Join(operationNames(t), ", ")
	}
	groups := groupOperations(t)
	parts := make([]string, len(groups))
	for i, g := range groups {
		parts[i] = g.name + " (" + strconv.Itoa(len(g.ops)) + ")"
	}
	return fmt.Sprintf("%d in %d groups, listed by '%s --help': %s", len(t.Operations), len(groups), command, strings.Join(parts, ", "))
}

// writeGroupedOperations writes the operations part of a grouped tool's
// help: per group a heading with its size, then one line per operation:
// name, method, path and summary.
func writeGroupedOperations(b *strings.Builder, r toolRef) {
	groups := groupOperations(r.tool)
	fmt.Fprintf(b, "\nOperations: %d in %d groups (by the name's prefix before the first \".\");\n", len(r.tool.Operations), len(groups))
	fmt.Fprintf(b, "'%s <operation> --help' shows one with its hosts, credential, approval and inputs.\n", r.command)
	for _, g := range groups {
		fmt.Fprintf(b, "\n%s (%d):\n", cleanLine(g.name), len(g.ops))
		nameW := 0
		for _, op := range g.ops {
			nameW = max(nameW, min(maxNameColumn, utf8.RuneCountInString(cleanLine(op.Name))))
		}
		for _, op := range g.ops {
			line := "  " + pad(cleanLine(op.Name), nameW) + "  "
			if op.IsProxyable() {
				line += pad(cleanLine(op.Method), 6) + " " + cleanLine(op.Path)
			} else {
				line += "(no method and path)"
			}
			if op.Summary != "" {
				line += " - " + cleanLine(op.Summary)
			}
			b.WriteString(line)
			b.WriteString("\n")
		}
	}
}
