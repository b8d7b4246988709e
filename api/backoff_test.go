package api

import (
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/proxy"
)

// TestAPIAuthBackoff: 2,000 wrong tokens from one address are throttled
// (429 with Retry-After, counted, audited once per burst); the right token
// from another address works at once.
func TestAPIAuthBackoff(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	cs := h.createSession(fqnGH)
	var n401, n429 int
	start := time.Now()
	for i := 0; i < 2000; i++ {
		r := h.do(http.MethodGet, "/v1/sessions", "wrong-admin-token-"+strconv.Itoa(i), nil)
		switch r.status {
		case http.StatusUnauthorized:
			n401++
		case http.StatusTooManyRequests:
			n429++
			if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 || r.errCode(t) != CodeAuthThrottled {
				t.Fatalf("429 without Retry-After or code: %v %s", r.header, r.body)
			}
		default:
			t.Fatalf("wrong admin token = %d %s", r.status, r.body)
		}
	}
	elapsed := time.Since(start)
	t.Logf("2000 wrong admin tokens in %v: %d got 401, %d got 429", elapsed, n401, n429)
	if limit := int(proxy.DefaultAuthFailureBurst + proxy.DefaultAuthFailureRate*(elapsed.Seconds()+1)); n401 > limit || n429 == 0 {
		t.Fatalf("%d wrong tokens were checked (401), %d throttled; want at most %d checked", n401, n429, limit)
	}
	if got := counterValue(t, h, "aileron_api_auth_throttled_total"); got != float64(n429) {
		t.Errorf("aileron_api_auth_throttled_total = %v, want %d", got, n429)
	}
	bursts := 0
	for _, ev := range h.audit.byName(audit.EventDenied) {
		if ev.Reason == CodeAuthThrottled.String() {
			bursts++
		}
	}
	if bursts != 1 {
		t.Errorf("%d auth_throttled audit events, want 1", bursts)
	}

	// The throttled address is refused even with the right token; another
	// address is not.
	if r := h.do(http.MethodGet, "/v1/sessions", adminToken, nil); r.status != http.StatusTooManyRequests {
		t.Errorf("right admin token from the throttled address = %d, want 429", r.status)
	}
	other := &http.Client{Transport: &http.Transport{Proxy: nil,
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	defer other.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, h.url+"/v1/sessions", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := other.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("right admin token from another address = %d, want 200", resp.StatusCode)
	}
	// Admin failures do not throttle session tokens, nor the reverse.
	for i := 0; i < 50; i++ {
		h.do(http.MethodPost, "/v1/connector-operations/run", "wrong-session-token", `{}`, HeaderSessionID, cs.ID)
	}
	if r := h.do(http.MethodPost, "/v1/connector-operations/run", cs.APIToken, `{}`, HeaderSessionID, cs.ID); r.status != http.StatusTooManyRequests {
		t.Errorf("session token after 50 failures for its session = %d, want 429", r.status)
	}
	if r := h.do(http.MethodPost, "/v1/connector-operations/run", cs.APIToken, `{}`); r.status == http.StatusTooManyRequests || r.status == http.StatusUnauthorized {
		t.Errorf("session token without naming the throttled session = %d, want it checked", r.status)
	}
}

func counterValue(t *testing.T, h *harness, name string) float64 {
	t.Helper()
	mfs, err := h.promReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
