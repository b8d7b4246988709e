package proxy

import (
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// TestDecisionReasonsCoverContract fails when a policy reason or a proxy
// code has no label of its own in the decisions counter (it would be
// counted as "other"). policy's TestReasonsListed and contract's
// TestCodesUniqueAndListed make sure those lists are complete.
func TestDecisionReasonsCoverContract(t *testing.T) {
	m, err := newMetrics(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range policy.Reasons() {
		want = append(want, r.String())
	}
	for _, c := range contract.ProxyCodes {
		want = append(want, c.String())
	}
	want = append(want, reasonApproved, reasonStreamAborted, modePassthrough)
	for _, r := range want {
		for result, set := range map[string]map[string]bool{"allow": keys(m.allow), "deny": keys(m.deny)} {
			if !set[r] || r == reasonOther {
				t.Errorf("reason %q has no %s label in aileron_proxy_decisions_total; it would be counted as %q", r, result, reasonOther)
			}
		}
	}
}

func keys[V any](m map[string]V) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}
