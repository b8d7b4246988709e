package main

import (
	"strings"
	"testing"
)

// TestInternalGuardApplyInput: bad or missing endpoints are refused before
// any netlink call, with what to pass.
func TestInternalGuardApplyInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--allow", "10.0.0.1"}, exitUsage, `--allow "10.0.0.1" is not IP:PORT (e.g. 10.89.1.1:41000)`},
		{nil, exitFailure, "no allowed endpoint"},
		{[]string{"--allow", "[fd00::1]:80"}, exitFailure, `"[fd00::1]:80" is not an IPv4 address and port`},
	} {
		_, stderr, code := runCLI(t, t.TempDir(), "", nil, append([]string{"internal", "guard", "apply"}, tc.args...)...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("internal guard apply %q = exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}
