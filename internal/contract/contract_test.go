package contract

import (
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// TestCodesUniqueAndListed fails when two codes share a value (one code,
// two meanings: the bug that split host_not_allowed) or when a proxy code
// is missing from ProxyCodes (its metric would be counted as "other").
func TestCodesUniqueAndListed(t *testing.T) {
	listed := map[Code]bool{}
	for _, c := range ProxyCodes {
		if listed[c] {
			t.Errorf("ProxyCodes lists %q twice", c)
		}
		listed[c] = true
	}
	byValue := map[string]string{}
	proxyConsts := 0
	consts := testkit.StringConsts(t, "contract.go", "Code")
	for _, c := range consts {
		if other, dup := byValue[c.Value]; dup {
			t.Errorf("%s and %s are both %q; give each meaning its own code", other, c.Name, c.Value)
		}
		byValue[c.Value] = c.Name
		proxy := c.BlockDoc == "Codes of responses the proxy originates.\n" || c.BlockDoc == "Codes shared by the proxy and the API.\n"
		if proxy {
			proxyConsts++
		}
		if proxy && !listed[Code(c.Value)] {
			t.Errorf("%s (%q) is a proxy code missing from ProxyCodes", c.Name, c.Value)
		}
	}
	if len(consts) < 40 {
		t.Fatalf("found only %d codes; the parse is broken", len(consts))
	}
	// Without this, a reworded block comment would make every proxy check
	// above pass vacuously.
	if proxyConsts != len(listed) {
		t.Errorf("found %d codes in the proxy blocks of contract.go, ProxyCodes lists %d; list exactly the proxy codes (and keep the block comments the test matches)", proxyConsts, len(listed))
	}
}
