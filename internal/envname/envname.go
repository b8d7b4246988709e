// Package envname is the one rule for environment variable names: the
// names credentials read from and the launcher and the CLI pass to a
// container.
package envname

// Valid reports whether s is an environment variable name: ASCII letters,
// digits and '_', not starting with a digit.
func Valid(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
