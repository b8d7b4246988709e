package proxy

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/contract"
)

// TestWriteResponseHeaderAdopts checks that an intercepted HTTP/1.1
// response takes the upstream's header map as its own when nothing was set
// on it, with the same edits as a copy (hop-by-hop fields out, the audit
// id in), and copies into it when the handler had already set a field.
func TestWriteResponseHeaderAdopts(t *testing.T) {
	upstream := func() *http.Response {
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{
			"Content-Type": {"application/json"},
			"Connection":   {"keep-alive"},
			"X-Origin":     {"a", "b"},
		}}
	}
	want := http.Header{
		"Content-Type":         {"application/json"},
		"X-Origin":             {"a", "b"},
		contract.HeaderAuditID: {"audit-1"},
	}

	w := &h1Response{req: &http.Request{Method: http.MethodGet}, contentLength: -1}
	resp := upstream()
	writeResponseHeader(w, resp, false, []string{"audit-1"})
	if !reflect.DeepEqual(w.header, want) {
		t.Errorf("adopted header = %v, want %v", w.header, want)
	}
	if reflect.ValueOf(w.header).UnsafePointer() != reflect.ValueOf(resp.Header).UnsafePointer() {
		t.Error("the response copied the upstream header instead of adopting it")
	}
	if w.status != http.StatusOK {
		t.Errorf("status = %d, want 200", w.status)
	}

	// A field the handler set first survives: the header is copied.
	w = &h1Response{req: &http.Request{Method: http.MethodGet}, contentLength: -1}
	w.Header().Set("X-Set-First", "1")
	resp = upstream()
	writeResponseHeader(w, resp, false, []string{"audit-1"})
	want2 := want.Clone()
	want2.Set("X-Set-First", "1")
	if !reflect.DeepEqual(w.header, want2) {
		t.Errorf("copied header = %v, want %v", w.header, want2)
	}
	if _, ok := resp.Header[contract.HeaderAuditID]; ok {
		t.Error("the copy path wrote the audit id into the upstream's header")
	}

	if k := http.CanonicalHeaderKey(contract.HeaderAuditID); k != contract.HeaderAuditID {
		t.Errorf("contract.HeaderAuditID %q is not canonical (%q): writeResponseHeader sets it by index", contract.HeaderAuditID, k)
	}

	// Nothing is adopted once the header was written.
	w = &h1Response{req: &http.Request{Method: http.MethodGet}, contentLength: -1, wroteHeader: true}
	if w.adoptHeader(http.Header{"A": {"b"}}) || w.header != nil {
		t.Errorf("adoptHeader after WriteHeader took the map: %v", w.header)
	}
	if w := (&h1Response{}); w.adoptHeader(nil) {
		t.Error("adoptHeader(nil) = true")
	}
}
