package console

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// FuzzSameOrigin: sameOrigin never panics and never accepts an Origin
// whose host is not the request's Host, nor a cross-site fetch.
func FuzzSameOrigin(f *testing.F) {
	for _, s := range [][3]string{
		{"127.0.0.1:7700", "http://127.0.0.1:7700", "same-origin"},
		{"127.0.0.1:7700", "http://evil.example", ""},
		{"127.0.0.1:7700", "null", ""},
		{"localhost:7700", "http://LOCALHOST:7700", "none"},
		{"127.0.0.1:7700", "https://127.0.0.1:7700", "cross-site"},
		{"127.0.0.1:7700", "http://127.0.0.1:7700@evil.example", ""},
		{"[::1]:7700", "http://[::1]:7700", "same-site"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, host, origin, site string) {
		r := httptest.NewRequest("POST", "/ui/approvals/x", nil)
		r.Host = host
		r.Header.Set("Origin", origin)
		r.Header.Set("Sec-Fetch-Site", site)
		if !sameOrigin(r) {
			return
		}
		if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
			t.Fatalf("accepted Sec-Fetch-Site %q", s)
		}
		if o := r.Header.Get("Origin"); o != "" {
			u, err := url.Parse(o)
			if err != nil || !strings.EqualFold(u.Host, r.Host) || u.Scheme != "http" {
				t.Fatalf("accepted Origin %q for Host %q", o, r.Host)
			}
		}
	})
}
