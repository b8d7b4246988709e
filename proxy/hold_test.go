package proxy

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/internal/preview"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// previewSpec declares held operations with previews, on the test connector.
const previewSpec = `{
  "schema_version": "aileron.connector.v1",
  "connector": {"fqn": "github://acme/aileron-connector-test", "version": "1.0.0"},
  "tools": [{"name": "api", "operations": [
    {"name": "send", "method": "POST", "path": "/v1/send", "hosts": ["api.example.test", "h2.example.test"], "credential": "bearer",
     "approval": "required", "inputs": [{"name": "to"}, {"name": "subject"}, {"name": "body"}],
     "approval_preview": {"fields": ["to", "subject", "body"]}},
    {"name": "blob.put", "method": "PUT", "path": "/blobs/{name}", "hosts": ["api.example.test", "h2.example.test"], "credential": "bearer",
     "approval": "required", "inputs": [{"name": "name", "required": true}]},
    {"name": "files.move", "method": "PATCH", "path": "/files/{fileId}", "hosts": ["api.example.test", "h2.example.test"], "credential": "bearer",
     "approval": "required", "inputs": [{"name": "fileId", "required": true}, {"name": "addParents"}],
     "approval_preview": {"fetch": {"operation": "files.get", "args": {"file_id": "{path.fileId}", "fields": "name,parents"},
       "render": {"Name": "name", "Folders": "parents", "Owner": "owner"}}}},
    {"name": "files.get", "method": "GET", "path": "/files/{file_id}", "hosts": ["api.example.test", "h2.example.test"], "credential": "bearer",
     "inputs": [{"name": "file_id", "required": true}, {"name": "fields"}]}
  ]}]
}`

func newPreviewEnv(t *testing.T) *env {
	t.Helper()
	spec, _, err := policy.ParseSpec([]byte(previewSpec))
	if err != nil {
		t.Fatalf("ParseSpec: %v", err)
	}
	snap, err := policy.Compile([]policy.Connector{{Spec: spec, Hash: "sha256:preview"}})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	e := newEnv(t, func(c *Config) { c.Policy = func() *policy.Snapshot { return snap } })
	e.useSession(t, snap)
	return e
}

// held sends req through the proxy in the background, returns the held
// request the approver was given and lets the test decide it.
func (e *env) held(t *testing.T, h2 bool, req *http.Request) (ApprovalRequest, <-chan *http.Response) {
	t.Helper()
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := e.client(h2).Do(req)
		if err != nil {
			t.Errorf("request: %v", err)
			done <- nil
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- resp
	}()
	select {
	case r := <-e.approver.requests:
		return r, done
	case <-time.After(10 * time.Second):
		t.Fatal("no request was held")
		return ApprovalRequest{}, nil
	}
}

func fieldMap(fs []preview.Field) map[string]preview.Field {
	m := map[string]preview.Field{}
	for _, f := range fs {
		m[f.Name] = f
	}
	return m
}

func TestHeldJSONIsPreviewedAndForwardedByteForByte(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "h1", true: "h2"}[h2], func(t *testing.T) {
			e := newPreviewEnv(t)
			host := map[bool]string{false: apiHost, true: h2Host}[h2]
			body := `{"zeta": 1, "body": "Hi Bob,\nsee you at 10.", "to": "bob@example.test", "subject": "Meeting"}`
			req, _ := http.NewRequest(http.MethodPost, "https://"+host+"/v1/send?draft=no", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			r, done := e.held(t, h2, req)
			p := r.Preview
			if p == nil || p.Body == nil {
				t.Fatalf("held request has no body preview: %+v", r)
			}
			sum := sha256.Sum256([]byte(body))
			if p.Body.Kind != preview.KindJSON || p.Body.Size != int64(len(body)) || p.Body.SHA256 != hex.EncodeToString(sum[:]) {
				t.Errorf("body preview = %s %d %s, want json %d %x", p.Body.Kind, p.Body.Size, p.Body.SHA256, len(body), sum)
			}
			var names []string
			for _, f := range p.Body.Fields {
				names = append(names, f.Name)
			}
			if got := strings.Join(names, ","); got != "to,subject,body,zeta" {
				t.Errorf("field order = %s, want the declared fields first: to,subject,body,zeta", got)
			}
			fm := fieldMap(p.Body.Fields)
			if f := fm["body"]; !f.Multiline || !f.Primary || f.Value != "Hi Bob,\nsee you at 10." {
				t.Errorf("body field = %+v, want the multi-line text, primary", f)
			}
			if f := fm["zeta"]; f.Primary || f.Value != "1" {
				t.Errorf("zeta field = %+v, want folded, value 1", f)
			}
			if q := fieldMap(p.Query); q["draft"].Value != "no" {
				t.Errorf("query preview = %+v, want draft=no", p.Query)
			}
			e.approver.outcomes <- ApprovalApproved
			if resp := <-done; resp == nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("approved request answered %v", resp)
			}
			seen := e.expectSeen(t)
			if seen.SHA256 != p.Body.SHA256 || seen.Body != int64(len(body)) {
				t.Errorf("upstream received %d bytes with SHA-256 %s; the preview showed %d bytes with %s", seen.Body, seen.SHA256, p.Body.Size, p.Body.SHA256)
			}
		})
	}
}

func TestHeldFormAndBinaryBodies(t *testing.T) {
	e := newPreviewEnv(t)
	req, _ := http.NewRequest(http.MethodPost, "https://api.example.test/v1/send", strings.NewReader("to=a%40b.test&subject=Hi+there&to=c%40d.test"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r, done := e.held(t, false, req)
	if b := r.Preview.Body; b.Kind != preview.KindForm || fieldMap(b.Fields)["to"].Value != "a@b.test,c@d.test" || fieldMap(b.Fields)["subject"].Value != "Hi there" {
		t.Errorf("form preview = %+v", b)
	}
	e.approver.outcomes <- ApprovalDenied
	if resp := <-done; resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("denied request answered %v", resp)
	}
	e.expectNothingSeen(t)

	bin := []byte{0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d, 0x1b, '[', '2', 'J'}
	req, _ = http.NewRequest(http.MethodPut, "https://api.example.test/blobs/logo.png", bytes.NewReader(bin))
	req.Header.Set("Content-Type", "image/png")
	r, done = e.held(t, false, req)
	b := r.Preview.Body
	if b.Kind != preview.KindBinary || b.ContentType != "image/png" || b.Size != int64(len(bin)) || !strings.HasPrefix(b.Excerpt, "89504e47") {
		t.Errorf("binary preview = %+v, want binary image/png %d bytes with a hex excerpt", b, len(bin))
	}
	if strings.ContainsRune(b.Excerpt, 0x1b) {
		t.Errorf("binary excerpt holds a raw escape character")
	}
	if pp := fieldMap(r.Preview.PathParams); pp["name"].Value != "logo.png" {
		t.Errorf("path params = %+v, want name=logo.png", r.Preview.PathParams)
	}
	e.approver.outcomes <- ApprovalApproved
	<-done
	sum := sha256.Sum256(bin)
	if seen := e.expectSeen(t); seen.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("upstream received SHA-256 %s, want %x", seen.SHA256, sum)
	}
}

func TestHeldLargeBodyIsSpooledAndForwardedIntact(t *testing.T) {
	e := newPreviewEnv(t)
	big := make([]byte, 5<<20)
	_, _ = rand.Read(big)
	sum := sha256.Sum256(big)
	req, _ := http.NewRequest(http.MethodPut, "https://api.example.test/blobs/big.bin", bytes.NewReader(big))
	req.Header.Set("Content-Type", "application/octet-stream")
	r, done := e.held(t, false, req)
	b := r.Preview.Body
	if b.Kind != preview.KindTooLarge || b.Size != 5<<20 || b.SHA256 != hex.EncodeToString(sum[:]) || b.Excerpt != "" || len(b.Fields) != 0 {
		t.Errorf("large body preview = %s %d %s excerpt %d bytes, want too_large by size and digest only", b.Kind, b.Size, b.SHA256, len(b.Excerpt))
	}
	e.approver.outcomes <- ApprovalApproved
	if resp := <-done; resp == nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("approved request answered %v", resp)
	}
	if seen := e.expectSeen(t); seen.Body != 5<<20 || seen.SHA256 != b.SHA256 {
		t.Errorf("upstream received %d bytes with %s, want %d with %s", seen.Body, seen.SHA256, 5<<20, b.SHA256)
	}
}

func TestPreviewFetchRunsThroughTheProxy(t *testing.T) {
	e := newPreviewEnv(t)
	e.handlers.Store("/files/f-123", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+testToken {
			t.Errorf("preview fetch carried no credential")
		}
		if r.URL.Query().Get("fields") != "name,parents" {
			t.Errorf("preview fetch query = %q, want fields=name,parents", r.URL.RawQuery)
		}
		w.Header().Set("Content-Type", "application/json")
		// An upstream that echoes the credential: the scrubber must mask it.
		_ = json.NewEncoder(w).Encode(map[string]any{"name": "Q2 plan", "parents": []string{"folderA"}, "owner": r.Header.Get("Authorization")})
	}))
	req, _ := http.NewRequest(http.MethodPatch, "https://api.example.test/files/f-123?addParents=folderB", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	r, done := e.held(t, false, req)
	fetched := e.expectSeen(t) // the fetch came before the person was asked
	if fetched.Method != http.MethodGet || !strings.HasPrefix(fetched.RequestURI, "/files/f-123?") {
		t.Errorf("upstream saw %s %s, want the preview fetch", fetched.Method, fetched.RequestURI)
	}
	f := r.Preview.Fetch
	if f == nil || f.State != preview.FetchOK {
		t.Fatalf("fetch = %+v, want fetched", f)
	}
	fm := map[string]string{}
	for _, fl := range f.Fields {
		fm[fl.Label] = fl.Value
	}
	if fm["Name"] != "Q2 plan" || fm["Folders"] != `["folderA"]` {
		t.Errorf("rendered fields = %v", fm)
	}
	js, _ := json.Marshal(r.Preview)
	if strings.Contains(string(js), "CANARY") || strings.Contains(string(js), testToken) {
		t.Errorf("the preview holds the credential: %s", js)
	}
	ev := e.audit.WaitFor(t, "preview fetch event", func(ev audit.Event) bool { return ev.Event == audit.EventApprovalPreviewFetch })
	if ev.AuditID != f.AuditID || ev.Decision != "allowed" || ev.Status != 200 || ev.Operation != "files.get" || ev.CredentialKind != "bearer" || ev.Path != "/files/f-123" {
		t.Errorf("preview fetch event = %+v", ev)
	}
	e.approver.outcomes <- ApprovalApproved
	<-done
	if seen := e.expectSeen(t); seen.Method != http.MethodPatch {
		t.Errorf("upstream saw %s, want the approved PATCH", seen.Method)
	}
}

func TestFailedPreviewFetchStillLetsAPersonDecide(t *testing.T) {
	e := newPreviewEnv(t)
	e.handlers.Store("/files/gone", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			return
		}
		http.Error(w, `{"error": "not found"}`, http.StatusNotFound)
	}))
	req, _ := http.NewRequest(http.MethodPatch, "https://api.example.test/files/gone", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	r, done := e.held(t, false, req)
	e.expectSeen(t) // the fetch
	if f := r.Preview.Fetch; f == nil || f.State != preview.FetchFailed || f.Status != 404 || !strings.Contains(f.Error, "404") {
		t.Fatalf("fetch = %+v, want failed with 404", f)
	}
	e.approver.outcomes <- ApprovalApproved
	if resp := <-done; resp == nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("approved request answered %v after a failed fetch", resp)
	}
	e.expectSeen(t)
}

// A preview fetch naming an operation the session lacks fails with a short
// message and a code: the lookup's own text, which lists the session's
// connectors and operations, is not shown to the person.
func TestPreviewFetchOfAnUnknownOperationFailsShortly(t *testing.T) {
	e := newPreviewEnv(t)
	req, _ := http.NewRequest(http.MethodPut, "https://api.example.test/blobs/b1", strings.NewReader(`{"a":1}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(contract.HeaderInternal, "internal-key-for-tests")
	req.Header.Set(contract.HeaderApprovalPreview, preview.Directive{Operation: "files.nope", Args: map[string]string{"file_id": "{path.name}"}}.Encode())
	r, done := e.held(t, false, req)
	f := r.Preview.Fetch
	if f == nil || f.State != preview.FetchFailed || f.Code != string(contract.CodeOperationNotAllowed) || f.Error != "api files.nope is not an operation of this session" {
		t.Errorf("fetch = %+v, want failed, operation_not_allowed, a short message", f)
	}
	e.approver.outcomes <- ApprovalDenied
	<-done
}

// A held request whose chunked body ends with trailers is refused before
// anyone is asked: forwarding it with a Content-Length would drop them, and
// the person would not have seen them.
func TestHeldRequestWithTrailersIsRefused(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		e := newPreviewEnv(t)
		pr, pw := io.Pipe()
		go func() {
			_, _ = pw.Write([]byte(`{"to":"a@b.test"}`))
			_ = pw.Close()
		}()
		req, _ := http.NewRequest(http.MethodPost, "https://api.example.test/v1/send", pr)
		req.ContentLength = -1
		req.Header.Set("Content-Type", "application/json")
		req.Trailer = http.Header{"X-Checksum": {"abc123"}}
		resp, err := e.client(h2).Do(req)
		if err != nil {
			t.Fatalf("h2=%v: %v", h2, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "bad_request_framing") || !strings.Contains(string(body), "without trailers") {
			t.Errorf("h2=%v: held request with trailers = %d %s, want 400 bad_request_framing", h2, resp.StatusCode, body)
		}
		select {
		case r := <-e.approver.requests:
			t.Errorf("h2=%v: a request with trailers was held for %s", h2, r.Operation)
		default:
		}
		e.expectNothingSeen(t)
	}
}
