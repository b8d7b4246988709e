package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
)

// fakeSandbox records what the API asks of it; fail, when set, is what
// every call returns.
type fakeSandbox struct {
	info  SandboxInfo
	token string
	fail  error

	mu      sync.Mutex
	written map[string]string
	execs   []SandboxExecRequest
}

func (f *fakeSandbox) Info() SandboxInfo { return f.info }
func (f *fakeSandbox) CheckToken(tok string) bool {
	a, b := sha256.Sum256([]byte(tok)), sha256.Sum256([]byte(f.token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}
func (f *fakeSandbox) Exec(_ context.Context, req SandboxExecRequest) (*SandboxExecResult, error) {
	f.mu.Lock()
	f.execs = append(f.execs, req)
	f.mu.Unlock()
	if f.fail != nil {
		return nil, f.fail
	}
	return &SandboxExecResult{Stdout: "out", ExitCode: 3}, nil
}
func (f *fakeSandbox) ReadFile(_ context.Context, path string) (io.ReadCloser, error) {
	if f.fail != nil {
		return nil, f.fail
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return io.NopCloser(strings.NewReader(f.written[path])), nil
}
func (f *fakeSandbox) WriteFile(_ context.Context, path string, body io.Reader) error {
	if f.fail != nil {
		return f.fail
	}
	b, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.written[path] = string(b)
	return nil
}
func (f *fakeSandbox) FS(_ context.Context, verb string, req SandboxFSRequest) (*SandboxFSResult, error) {
	if f.fail != nil {
		return nil, f.fail
	}
	if verb == SandboxFSReaddir {
		return &SandboxFSResult{Names: []string{".a", "b"}}, nil
	}
	return &SandboxFSResult{Stat: &SandboxStat{IsFile: true, Size: 1}}, nil
}

type fakeManager map[string]Sandbox

func (m fakeManager) CreateSandbox(context.Context, CreateSandboxRequest) (*CreatedSandbox, error) {
	return nil, ErrSandboxGone
}
func (m fakeManager) ListSandboxes() []SandboxInfo { return nil }
func (m fakeManager) RemoveSandbox(_ context.Context, id string) error {
	if _, ok := m[id]; !ok {
		return ErrSandboxNotFound
	}
	return nil
}
func (m fakeManager) Sandbox(id string) (Sandbox, bool) {
	sb, ok := m[id]
	return sb, ok
}

// TestSandboxRoutes covers the exec/files routes' authentication, error
// mapping and audit against a fake SandboxManager.
func TestSandboxRoutes(t *testing.T) {
	a := &fakeSandbox{info: SandboxInfo{ID: "sbx_a", SessionID: "ses_a", Workdir: "/w", State: "running"}, token: "tok-a", written: map[string]string{}}
	b := &fakeSandbox{info: SandboxInfo{ID: "sbx_b", SessionID: "ses_b"}, token: "tok-b", written: map[string]string{}}
	gone := &fakeSandbox{info: SandboxInfo{ID: "sbx_gone"}, token: "tok-gone", fail: ErrSandboxGone}
	enoent := &fakeSandbox{info: SandboxInfo{ID: "sbx_e"}, token: "tok-e", fail: &SandboxFSError{Code: "ENOENT", Message: "ENOENT: no such file or directory", Path: "/x"}}
	h := newHarness(t, harnessOptions{mutate: func(c *Config) {
		c.Sandboxes = fakeManager{"sbx_a": a, "sbx_b": b, "sbx_gone": gone, "sbx_e": enoent}
	}})

	for _, tc := range []struct {
		name, method, path, token string
		body                      any
		status                    int
		code                      contract.Code
	}{
		{"no token", http.MethodGet, "/v1/sandboxes/sbx_a", "", nil, 401, CodeUnauthorized},
		{"another sandbox's token", http.MethodPost, "/v1/sandboxes/sbx_a/exec", "tok-b", map[string]any{"command": "id"}, 401, CodeUnauthorized},
		{"unknown sandbox", http.MethodGet, "/v1/sandboxes/sbx_nope/", "tok-a", nil, 401, CodeUnauthorized},
		{"admin token is not a sandbox token", http.MethodGet, "/v1/sandboxes/sbx_a", adminToken, nil, 401, CodeUnauthorized},
		{"sandbox token is not the admin token", http.MethodGet, "/v1/sandboxes", "tok-a", nil, 401, CodeUnauthorized},
		{"no command", http.MethodPost, "/v1/sandboxes/sbx_a/exec", "tok-a", map[string]any{}, 400, CodeInvalidBody},
		{"negative timeout", http.MethodPost, "/v1/sandboxes/sbx_a/exec", "tok-a", map[string]any{"command": "x", "timeoutMs": -1}, 400, CodeInvalidBody},
		{"unknown fs verb", http.MethodPost, "/v1/sandboxes/sbx_a/fs/chmod", "tok-a", map[string]any{"path": "/x"}, 404, CodeNotFound},
		{"fs without path", http.MethodPost, "/v1/sandboxes/sbx_a/fs/stat", "tok-a", map[string]any{}, 400, CodeInvalidBody},
		{"read without path", http.MethodGet, "/v1/sandboxes/sbx_a/files", "tok-a", nil, 400, CodeInvalidQuery},
		{"gone", http.MethodPost, "/v1/sandboxes/sbx_gone/exec", "tok-gone", map[string]any{"command": "x"}, 410, CodeSandboxGone},
		{"gone read", http.MethodGet, "/v1/sandboxes/sbx_gone/files?path=/x", "tok-gone", nil, 410, CodeSandboxGone},
		{"enoent", http.MethodPost, "/v1/sandboxes/sbx_e/fs/stat", "tok-e", map[string]any{"path": "/x"}, 404, "ENOENT"},
		{"remove unknown", http.MethodDelete, "/v1/sandboxes/sbx_nope", adminToken, nil, 404, CodeSandboxNotFound},
		{"create needs an absolute project", http.MethodPost, "/v1/sandboxes", adminToken, map[string]any{"project": "rel"}, 400, CodeInvalidBody},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.do(tc.method, tc.path, tc.token, tc.body)
			if r.status != tc.status || r.errCode(t) != tc.code {
				t.Errorf("%s %s = %d %s, want %d %s", tc.method, tc.path, r.status, r.body, tc.status, tc.code)
			}
		})
	}
	if r := h.do(http.MethodPost, "/v1/sandboxes/sbx_e/fs/stat", "tok-e", map[string]any{"path": "/x"}); !strings.Contains(string(r.body), `"path":"/x"`) {
		t.Errorf("an fs error lacks its path: %s", r.body)
	}

	// Calls reach the sandbox of the token, and are audited without
	// command text, env values or contents.
	r := h.do(http.MethodPost, "/v1/sandboxes/sbx_a/exec", "tok-a", map[string]any{"command": "echo hush-command", "env": map[string]string{"K": "hush-env"}, "cwd": "/w"})
	if r.status != 200 || r.json(t)["exitCode"] != 3.0 {
		t.Fatalf("exec = %d %s", r.status, r.body)
	}
	if len(a.execs) != 1 || a.execs[0].Env["K"] != "hush-env" || len(b.execs) != 0 {
		t.Errorf("exec reached %v / %v", a.execs, b.execs)
	}
	if r := h.do(http.MethodPut, "/v1/sandboxes/sbx_a/files?path=/w/f", "tok-a", "hush-content"); r.status != 204 {
		t.Fatalf("write = %d %s", r.status, r.body)
	}
	if r := h.do(http.MethodGet, "/v1/sandboxes/sbx_a/files?path=/w/f", "tok-a", nil); r.status != 200 || string(r.body) != "hush-content" {
		t.Errorf("read = %d %q", r.status, r.body)
	}
	if r := h.do(http.MethodPost, "/v1/sandboxes/sbx_a/fs/readdir", "tok-a", map[string]any{"path": "/w"}); r.status != 200 || !strings.Contains(string(r.body), `"names":[".a","b"]`) {
		t.Errorf("readdir = %d %s", r.status, r.body)
	}
	calls := h.audit.byName(audit.EventSandboxCall)
	if len(calls) < 4 {
		t.Fatalf("sandbox.call events = %d, want one per call", len(calls))
	}
	ex := calls[len(calls)-4]
	if ex.Operation != "exec" || ex.SessionID != "ses_a" || ex.ExitCode == nil || *ex.ExitCode != 3 || len(ex.Fields["command_sha256"]) != 64 {
		t.Errorf("exec audit = %+v", ex)
	}
	for _, e := range h.audit.all() {
		s := e.Path + e.Reason + e.Operation
		for _, v := range e.Fields {
			s += v
		}
		if strings.Contains(s, "hush") {
			t.Errorf("audit event %s holds a command, env value or content: %+v", e.Event, e)
		}
	}
}

// TestSandboxAuthBackoff: wrong tokens for one sandbox throttle that
// sandbox's calls from the address, not another sandbox's.
func TestSandboxAuthBackoff(t *testing.T) {
	a := &fakeSandbox{info: SandboxInfo{ID: "sbx_a", SessionID: "ses_a"}, token: "tok-a", written: map[string]string{}}
	b := &fakeSandbox{info: SandboxInfo{ID: "sbx_b", SessionID: "ses_b"}, token: "tok-b", written: map[string]string{}}
	h := newHarness(t, harnessOptions{mutate: func(c *Config) {
		c.Sandboxes = fakeManager{"sbx_a": a, "sbx_b": b}
	}})
	throttled := false
	for i := 0; i < 200 && !throttled; i++ {
		throttled = h.do(http.MethodGet, "/v1/sandboxes/sbx_b", "wrong-token", nil).status == http.StatusTooManyRequests
	}
	if !throttled {
		t.Fatal("200 wrong tokens for sbx_b were never throttled (429)")
	}
	if r := h.do(http.MethodGet, "/v1/sandboxes/sbx_b", "tok-b", nil); r.status != http.StatusTooManyRequests || r.errCode(t) != CodeAuthThrottled {
		t.Errorf("right token for the throttled sbx_b = %d %s, want 429 %s", r.status, r.body, CodeAuthThrottled)
	}
	if r := h.do(http.MethodGet, "/v1/sandboxes/sbx_a", "tok-a", nil); r.status != http.StatusOK {
		t.Errorf("sbx_a with its token while sbx_b is throttled = %d %s, want 200", r.status, r.body)
	}
}

// TestSandboxBodyLimits: the sandbox files routes take bodies up to
// SandboxMaxFileBytes, the other routes up to Config.MaxBodyBytes.
func TestSandboxBodyLimits(t *testing.T) {
	a := &fakeSandbox{info: SandboxInfo{ID: "sbx_a", SessionID: "ses_a"}, token: "tok-a", written: map[string]string{}}
	h := newHarness(t, harnessOptions{mutate: func(c *Config) { c.Sandboxes = fakeManager{"sbx_a": a} }})
	overGeneral := strings.Repeat("x", 100<<10) // the harness's MaxBodyBytes is 64 KiB
	for _, tc := range []struct {
		name, method, path string
		status             int
	}{
		{"write over the general limit", http.MethodPut, "/v1/sandboxes/sbx_a/files?path=/w/big", http.StatusNoContent},
		{"exec over the general limit", http.MethodPost, "/v1/sandboxes/sbx_a/exec", http.StatusRequestEntityTooLarge},
		{"fs over the general limit", http.MethodPost, "/v1/sandboxes/sbx_a/fs/stat", http.StatusRequestEntityTooLarge},
		{"wrong method on the files path", http.MethodPost, "/v1/sandboxes/sbx_a/files", http.StatusMethodNotAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := h.do(tc.method, tc.path, "tok-a", overGeneral); r.status != tc.status {
				t.Errorf("%s %s with %d bytes = %d %s, want %d", tc.method, tc.path, len(overGeneral), r.status, r.body, tc.status)
			}
		})
	}
	if got := len(a.written["/w/big"]); got != len(overGeneral) {
		t.Errorf("the sandbox got %d bytes, want %d", got, len(overGeneral))
	}

	// Over SandboxMaxFileBytes is refused from Content-Length alone.
	req := httptest.NewRequest(http.MethodPut, "/v1/sandboxes/sbx_a/files?path=/w/huge", strings.NewReader("x"))
	req.Host = "127.0.0.1"
	req.ContentLength = SandboxMaxFileBytes + 1
	req.Header.Set("Authorization", "Bearer tok-a")
	rec := httptest.NewRecorder()
	h.srv.Handler().ServeHTTP(rec, req)
	if r := (response{status: rec.Code, body: rec.Body.Bytes()}); r.status != http.StatusRequestEntityTooLarge || r.errCode(t) != CodeBodyTooLarge {
		t.Errorf("PUT files with Content-Length %d = %d %s, want 413 %s", req.ContentLength, r.status, r.body, CodeBodyTooLarge)
	}
	if _, ok := a.written["/w/huge"]; ok {
		t.Error("a body over SandboxMaxFileBytes reached the sandbox")
	}
}

// discardSandbox is a fakeSandbox whose WriteFile reads the body to its
// end and keeps nothing.
type discardSandbox struct{ *fakeSandbox }

func (d discardSandbox) WriteFile(_ context.Context, _ string, body io.Reader) error {
	_, err := io.Copy(io.Discard, body)
	return err
}

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestSandboxWriteOverLimitAudit: a chunked write that runs past
// SandboxMaxFileBytes answers 413 body_too_large, and its sandbox.call
// event records that code, not an internal error.
func TestSandboxWriteOverLimitAudit(t *testing.T) {
	a := &fakeSandbox{info: SandboxInfo{ID: "sbx_a", SessionID: "ses_a"}, token: "tok-a", written: map[string]string{}}
	h := newHarness(t, harnessOptions{mutate: func(c *Config) { c.Sandboxes = fakeManager{"sbx_a": discardSandbox{a}} }})
	req := httptest.NewRequest(http.MethodPut, "/v1/sandboxes/sbx_a/files?path=/w/huge", io.LimitReader(zeros{}, SandboxMaxFileBytes+1))
	req.Host = "127.0.0.1"
	req.ContentLength = -1
	req.Header.Set("Authorization", "Bearer tok-a")
	rec := httptest.NewRecorder()
	h.srv.Handler().ServeHTTP(rec, req)
	if r := (response{status: rec.Code, body: rec.Body.Bytes()}); r.status != http.StatusRequestEntityTooLarge || r.errCode(t) != CodeBodyTooLarge {
		t.Fatalf("chunked PUT files over the limit = %d %s, want 413 %s", r.status, r.body, CodeBodyTooLarge)
	}
	calls := h.audit.byName(audit.EventSandboxCall)
	if len(calls) != 1 || calls[0].Operation != "write" || calls[0].Decision != "failed" || calls[0].Reason != string(CodeBodyTooLarge) {
		t.Errorf("sandbox.call events = %+v, want one failed write with reason %s", calls, CodeBodyTooLarge)
	}
}
