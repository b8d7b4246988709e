package policy

import (
	"fmt"
	"slices"
	"strings"
)

// SelectConnectors returns the connectors of active named by fqns, in the
// order of fqns with repeats dropped; it returns active itself when fqns is
// empty. Every FQN that names no active connector is reported in one error,
// which lists the active connectors (sorted) or says how to install one.
// Connectors without a Spec are skipped.
func SelectConnectors(active []Connector, fqns []string) ([]Connector, error) {
	if len(fqns) == 0 {
		return active, nil
	}
	byFQN := map[string]Connector{}
	var names []string
	for _, c := range active {
		if c.Spec == nil {
			continue
		}
		byFQN[c.Spec.Connector.FQN] = c
		names = append(names, c.Spec.Connector.FQN)
	}
	slices.Sort(names)
	var out []Connector
	seen := map[string]bool{}
	var unknown []string
	for _, f := range fqns {
		c, ok := byFQN[f]
		switch {
		case !ok:
			if !slices.Contains(unknown, f) {
				unknown = append(unknown, f)
			}
		case !seen[f]:
			seen[f] = true
			out = append(out, c)
		}
	}
	if len(unknown) == 0 {
		return out, nil
	}
	avail := "none are installed; install one with \"aileron-proxy connector install PATH\""
	if len(names) > 0 {
		avail = "active connectors: " + strings.Join(names, ", ")
	}
	quoted := make([]string, len(unknown))
	for i, f := range unknown {
		quoted[i] = fmt.Sprintf("%q", f)
	}
	what := "is not an active installed connector"
	if len(unknown) > 1 {
		what = "are not active installed connectors"
	}
	return nil, fmt.Errorf("%s %s (see \"aileron-proxy connector list\"); %s", strings.Join(quoted, ", "), what, avail)
}
