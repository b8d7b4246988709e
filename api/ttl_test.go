package api

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/session"
)

func TestParseTTL(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string // substring; empty means no error
	}{
		{"", 0, ""},
		{"8h", 8 * time.Hour, ""},
		{"90m", 90 * time.Minute, ""},
		{"2d", 48 * time.Hour, ""},
		{"7d", session.MaxTTL, ""},
		{"168h", session.MaxTTL, ""},
		{"8d", 0, "exceeds the maximum of 168h0m0s (7d)"},
		{"169h", 0, "exceeds the maximum"},
		// 213504 days overflow int64 nanoseconds to about 25 minutes.
		{"213504d", 0, "exceeds the maximum"},
		{"106752d", 0, "exceeds the maximum"},
		{"99999999999999999999d", 0, "exceeds the maximum"},
		{"2562048h", 0, "exceeds the maximum"},
		{"9223372036854775808ns", 0, "exceeds the maximum"},
		{"1e400h", 0, "not valid"},
		{"0d", 0, "not valid"},
		{"-1d", 0, "not valid"},
		{"-5h", 0, "not valid"},
		{"0s", 0, "not valid"},
		{"soon", 0, "not valid"},
		{"d", 0, "not valid"},
		{"1.5d", 0, "not valid"},
	}
	for _, tc := range tests {
		got, err := ParseTTL(tc.in)
		if tc.wantErr == "" {
			if err != nil || got != tc.want {
				t.Errorf("ParseTTL(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("ParseTTL(%q) = %v, %v; want an error containing %q", tc.in, got, err, tc.wantErr)
		}
	}
}

// TestCreateSessionTTLOverflow is the adversarial run's case: a day count
// whose nanoseconds overflow must not wrap into a short, accepted TTL.
func TestCreateSessionTTLOverflow(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	for _, ttl := range []string{"213504d", "106752d", "2562048h"} {
		r := h.do(http.MethodPost, "/v1/sessions", adminToken, `{"ttl":"`+ttl+`"}`)
		if r.status != http.StatusBadRequest || r.errCode(t) != CodeInvalidBody {
			t.Fatalf("ttl %q = %d %s, want 400 %s", ttl, r.status, r.body, CodeInvalidBody)
		}
		if msg := r.json(t)["error"].(map[string]any)["message"].(string); !strings.Contains(msg, session.MaxTTL.String()) {
			t.Errorf("ttl %q: message %q does not name the maximum %s", ttl, msg, session.MaxTTL)
		}
	}
	if got := h.reg.List(); len(got) != 0 {
		t.Errorf("%d sessions exist after refused creates", len(got))
	}
}

func FuzzParseTTL(f *testing.F) {
	for _, s := range []string{"", "8h", "2d", "7d", "213504d", "106752d", "9223372036854775807ns",
		"2562048h", "1.5h", "+3d", "-1d", "0", ".5h", "1h30m", "99999999999999999999d", "soon"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseTTL(s)
		if err != nil {
			if d != 0 {
				t.Fatalf("ParseTTL(%q) = %v with error %v", s, d, err)
			}
			return
		}
		if d < 0 || d > session.MaxTTL {
			t.Fatalf("ParseTTL(%q) = %v, outside (0, %v]", s, d, session.MaxTTL)
		}
		if d == 0 && strings.TrimSpace(s) != "" {
			t.Fatalf("ParseTTL(%q) = 0 for a non-empty ttl", s)
		}
		// A well-formed Go duration that parses must agree with time.
		if want, perr := time.ParseDuration(strings.TrimSpace(s)); perr == nil && want != d {
			t.Fatalf("ParseTTL(%q) = %v, time.ParseDuration says %v", s, d, want)
		}
	})
}
