package credentials

import (
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// The search engine's tests (every strategy against a reference, streaming,
// switching, memory bounds, the fuzzer and the benchmarks) are in
// internal/multimatch; these cover the secret semantics on top of it.

func mustScrubber(t testing.TB, secrets ...string) *Scrubber {
	t.Helper()
	var vs []Value
	for _, s := range secrets {
		vs = append(vs, NewValue(s))
	}
	s, err := NewScrubber(vs...)
	if err != nil {
		t.Fatalf("NewScrubber: %v", err)
	}
	return s
}

func TestScrubberHeader(t *testing.T) {
	secret := "tok_Zq81/xK+9w"
	sc := mustScrubber(t, secret, "Bearer "+secret)
	h := http.Header{
		"X-Echo":       {"Bearer " + secret, "ok"},
		"Location":     {"https://x.example/cb?t=" + url.QueryEscape(secret)},
		"X-B64":        {base64.StdEncoding.EncodeToString([]byte(secret))},
		"Content-Type": {"application/json"},
	}
	sc.Header(h)
	for k, vs := range h {
		for _, v := range vs {
			for _, f := range testkit.SecretForms(secret) {
				if strings.Contains(v, f) {
					t.Errorf("header %s still holds a form of the secret: %q", k, v)
				}
			}
		}
	}
	if got := h.Get("X-Echo"); got != strings.Repeat("*", len("Bearer "+secret)) {
		t.Errorf("X-Echo = %q", got)
	}
	if h.Values("X-Echo")[1] != "ok" || h.Get("Content-Type") != "application/json" {
		t.Errorf("unrelated values changed: %v", h)
	}
	var nilScrubber *Scrubber
	nilScrubber.Header(h) // no panic
	body := io.NopCloser(strings.NewReader("x"))
	if nilScrubber.Reader(body) != body {
		t.Error("nil Scrubber wrapped the body")
	}
}

func TestNewScrubberRefusesShortSecrets(t *testing.T) {
	for _, s := range []string{"Q", "Qz", "Qz7"} {
		if _, err := NewScrubber(NewValue(s)); err == nil {
			t.Errorf("NewScrubber(%d-byte secret) succeeded, want error", len(s))
		} else if strings.Contains(err.Error(), s) {
			t.Errorf("error %q contains the secret", err)
		}
	}
	if s, err := NewScrubber(); s != nil || err != nil {
		t.Errorf("NewScrubber() = %v, %v; want nil, nil", s, err)
	}
}

// TestSecretFormsMatchTestForms keeps the scrubber's list of encodings and
// the tests' independent list in step.
func TestSecretFormsMatchTestForms(t *testing.T) {
	s := "tok_Zq81/xK+9w é"
	got, want := secretForms(s), testkit.SecretForms(s)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("secretForms(%q) = %q, want %q", s, got, want)
	}
	sc := mustScrubber(t, s)
	for _, f := range want {
		if b := sc.Bytes([]byte("<" + f + ">")); string(b) != "<"+strings.Repeat("*", len(f))+">" {
			t.Errorf("Bytes(<%s>) = %q: form not masked", f, b)
		}
	}
	if r := sc.Reader(io.NopCloser(strings.NewReader(s))); r == nil {
		t.Error("Reader returned nil")
	}
}
