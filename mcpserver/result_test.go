package mcpserver

import (
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func resultText(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	var b strings.Builder
	for _, c := range res.Content {
		tc, ok := c.(*mcp.TextContent)
		if !ok {
			t.Fatalf("content %T, want text", c)
		}
		b.WriteString(tc.Text)
	}
	return b.String()
}

// TestResultBodies: the cut of a long text body never splits a character
// and says how much was shown; a body is binary by its content type even
// when its bytes happen to be valid UTF-8, and by its bytes when it has no
// content type.
func TestResultBodies(t *testing.T) {
	s := New(Options{MaxText: 6})
	ok := func(ct string, body string) *reply {
		return &reply{status: http.StatusOK, upstreamStatus: http.StatusOK, contentType: ct, body: []byte(body)}
	}
	for _, tc := range []struct {
		name, ct, body, want string
	}{
		// "é" is two bytes at 5 and 6: the cut at 6 backs off to 5.
		{"cut on a rune boundary", "text/plain", "héllé wörld", "héll\n[truncated by Aileron: 5 of 14 bytes shown]"},
		{"at the cap", "text/plain", "abcdef", "abcdef"},
		{"image with UTF-8 bytes", "image/png", "PNG", "HTTP 200: a binary body of 3 bytes (image/png), not shown"},
		{"no content type, NUL", "", "a\x00b", "HTTP 200: a binary body of 3 bytes (no content type), not shown"},
		{"no content type, text", "", "plain", "plain"},
		{"empty", "text/plain", "", "HTTP 200 with an empty body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := s.result(&Entry{Name: "t"}, ok(tc.ct, tc.body))
			if err != nil {
				t.Fatal(err)
			}
			got := resultText(t, res)
			if got != tc.want || !utf8.ValidString(got) || res.IsError {
				t.Errorf("result = isError %v %q, want %q", res.IsError, got, tc.want)
			}
		})
	}
	// An upstream error status keeps the cut body and says the status.
	r := ok("text/plain", "not found here")
	r.upstreamStatus = http.StatusNotFound
	res, err := s.result(&Entry{Name: "t"}, r)
	if err != nil {
		t.Fatal(err)
	}
	if got := resultText(t, res); !res.IsError || got != "HTTP 404 from the upstream:\nnot fo\n[truncated by Aileron: 6 of 14 bytes shown]" {
		t.Errorf("404 result = isError %v %q", res.IsError, got)
	}
}
