package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// requestHeadLines splits a rendered request head into its request line
// and its other lines, sorted: writeRequestHead keeps the header map's
// order.
func requestHeadLines(t testing.TB, head string) (string, []string) {
	t.Helper()
	line, rest, ok := strings.Cut(head, "\r\n")
	if !ok || !strings.HasSuffix(rest, "\r\n\r\n") {
		t.Fatalf("not a request head: %q", head)
	}
	lines := strings.Split(strings.TrimSuffix(rest, "\r\n\r\n"), "\r\n")
	slices.Sort(lines)
	return line, lines
}

// checkRequestHead asserts that writeRequestHead either declines r and
// writes nothing, or writes what (*http.Request).Write does.
func checkRequestHead(t testing.TB, r *http.Request) (took bool) {
	t.Helper()
	var fast bytes.Buffer
	bw := bufio.NewWriter(&fast)
	took = writeRequestHead(bw, r)
	_ = bw.Flush()
	if !took {
		if fast.Len() > 0 {
			t.Fatalf("declined %s %q but wrote %q", r.Method, r.URL, fast.String())
		}
		return false
	}
	var want bytes.Buffer
	if err := r.Write(&want); err != nil {
		t.Fatalf("took %s %q, which Write refuses: %v", r.Method, r.URL, err)
	}
	gotHead, gotLines := requestHeadLines(t, fast.String())
	wantHead, wantLines := requestHeadLines(t, want.String())
	if gotHead != wantHead || !slices.Equal(gotLines, wantLines) {
		t.Fatalf("writeRequestHead wrote\n%q %q\nWrite writes\n%q %q", gotHead, gotLines, wantHead, wantLines)
	}
	return true
}

func TestWriteRequestHeadMatchesWrite(t *testing.T) {
	base := func(method, target string) *http.Request {
		r, err := http.NewRequest(method, "https://api.example.test"+target, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Authorization", "Bearer injected")
		r.Header.Set("Accept", "application/json")
		return r
	}
	cases := []struct {
		name string
		req  func() *http.Request
		took bool
	}{
		{"GET", func() *http.Request { return base("GET", "/v1/items?page=2&q=a%20b") }, true},
		{"empty method", func() *http.Request { r := base("GET", "/"); r.Method = ""; return r }, true},
		{"HEAD", func() *http.Request { return base("HEAD", "/x") }, true},
		{"DELETE without length", func() *http.Request { return base("DELETE", "/x/1") }, true},
		{"POST zero length", func() *http.Request { return base("POST", "/x") }, true},
		{"PUT zero length", func() *http.Request { return base("PUT", "/x") }, true},
		{"PATCH zero length", func() *http.Request { return base("PATCH", "/x") }, true},
		{"no User-Agent sends Go's", func() *http.Request { return base("GET", "/") }, true},
		{"User-Agent kept", func() *http.Request {
			r := base("GET", "/")
			r.Header.Set("User-Agent", "curl/8.5.0")
			return r
		}, true},
		{"empty User-Agent sends none", func() *http.Request {
			r := base("GET", "/")
			r.Header["User-Agent"] = []string{""}
			return r
		}, true},
		{"User-Agent with a newline", func() *http.Request {
			r := base("GET", "/")
			r.Header["User-Agent"] = []string{" a\r\nInjected: 1 "}
			return r
		}, true},
		{"values with newlines and spaces", func() *http.Request {
			r := base("GET", "/")
			r.Header["X-Multi"] = []string{"one", " two\nthree ", "\r\n"}
			return r
		}, true},
		{"invalid field name dropped", func() *http.Request {
			r := base("GET", "/")
			r.Header["Bad Name"] = []string{"x"}
			r.Header["Bad:Name"] = []string{"x"}
			return r
		}, true},
		{"fields Write takes from the request", func() *http.Request {
			r := base("GET", "/")
			r.Header["Host"] = []string{"other.test"}
			r.Header["Content-Length"] = []string{"10"}
			r.Header["Transfer-Encoding"] = []string{"chunked"}
			r.Header["Trailer"] = []string{"X"}
			return r
		}, true},
		{"Host differs from the URL", func() *http.Request { r := base("GET", "/"); r.Host = "h.test:8443"; return r }, true},
		{"IPv6 host", func() *http.Request { r := base("GET", "/"); r.Host = "[::1]:443"; return r }, true},
		{"IPv6 zone", func() *http.Request { r := base("GET", "/"); r.Host = "[fe80::1%25eth0]:443"; return r }, false},
		{"non-ASCII host", func() *http.Request { r := base("GET", "/"); r.Host = "bücher.test"; return r }, false},
		{"invalid host", func() *http.Request { r := base("GET", "/"); r.Host = "a b"; return r }, false},
		{"control byte in the target", func() *http.Request {
			r := base("GET", "/")
			r.URL = &url.URL{Path: "/a", RawQuery: "b=\x01"}
			return r
		}, false},
		{"opaque URL", func() *http.Request { r := base("GET", "/"); r.URL.Opaque = "//h/x"; return r }, false},
		{"CONNECT", func() *http.Request { r := base("GET", "/"); r.Method = "CONNECT"; return r }, false},
		{"Close", func() *http.Request { r := base("GET", "/"); r.Close = true; return r }, false},
		{"body", func() *http.Request {
			r, _ := http.NewRequest("POST", "https://api.example.test/x", strings.NewReader("{}"))
			return r
		}, false},
		{"chunked", func() *http.Request {
			r := base("POST", "/x")
			r.Body = io.NopCloser(strings.NewReader("{}"))
			r.ContentLength = -1
			r.TransferEncoding = []string{"chunked"}
			return r
		}, false},
		{"trailer", func() *http.Request { r := base("GET", "/"); r.Trailer = http.Header{"X": nil}; return r }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := checkRequestHead(t, c.req()); got != c.took {
				t.Fatalf("writeRequestHead took it: %v, want %v", got, c.took)
			}
		})
	}
}

func FuzzWriteRequestHead(f *testing.F) {
	f.Add("GET", "/v1/items", "page=1", "api.example.test", "Authorization", "Bearer x", true)
	f.Add("POST", "/a b", "", "[::1]:8443", "User-Agent", " ua\r\n", false)
	f.Add("", "/", "x=\x7f", "h.test", "X-A", "\n", true)
	f.Fuzz(func(t *testing.T, method, path, query, host, key, value string, twice bool) {
		r := &http.Request{
			Method: method,
			URL:    &url.URL{Scheme: "https", Host: "api.example.test", Path: path, RawQuery: query},
			Host:   host,
			Header: http.Header{key: {value}, "Accept": {"*/*"}},
			Body:   http.NoBody,
		}
		if twice {
			r.Header[key] = append(r.Header[key], value+"2")
		}
		if strings.ContainsFunc(method, func(r rune) bool { return !httpguts.IsTokenRune(r) }) {
			// Write does not check the method; the proxy's requests carry
			// one the client's parser accepted (a token).
			return
		}
		checkRequestHead(t, r)
	})
}
