package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// previewSpec is a mail-like connector whose send is held for approval,
// shows its to, subject and body first, and fetches the thread it answers
// (with the session's credential) before the person is asked.
const previewSpec = `{
  "schema_version": "aileron.connector.v1",
  "connector": {"fqn": "local://test/mail", "version": "1.0.0"},
  "tools": [{
    "name": "mail",
    "description": "Loopback mail API",
    "operations": [
      {"name": "messages.send", "method": "POST", "path": "/v1/messages/send", "hosts": ["mail.example.test"], "credential": "bearer",
       "approval": "required",
       "inputs": [{"name": "to", "required": true}, {"name": "subject"}, {"name": "body"}, {"name": "thread_id"}],
       "approval_preview": {"fields": ["to", "subject", "body"],
         "fetch": {"operation": "threads.get", "args": {"thread_id": "{body.thread_id}"},
                   "render": {"Thread subject": "subject", "Participants": "participants", "Last message": "last.snippet"}}}},
      {"name": "threads.get", "method": "GET", "path": "/v1/threads/{thread_id}", "hosts": ["mail.example.test"], "credential": "bearer",
       "inputs": [{"name": "thread_id", "required": true}]},
      {"name": "files.upload", "method": "POST", "path": "/v1/upload", "hosts": ["mail.example.test"], "credential": "bearer",
       "approval": "required"}
    ]
  }]
}`

// received is what the mail stand-in got: the SHA-256 and size of each
// whole body, by path, and the Authorization of each thread fetch.
type received struct {
	mu      sync.Mutex
	bodies  map[string][]string // path → "sha256/size"
	fetches []string            // Authorization headers of thread fetches
}

func (rc *received) body(path string) []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.bodies[path]...)
}

func (rc *received) fetchAuth() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.fetches...)
}

// mailHandler stands in for the mail API. A thread fetch without the
// session's credential gets 401, so a fetch that did not go through the
// proxy's injection cannot render. The thread's last message reflects
// the caller's token, as a careless API might: the scrubber must mask it.
func mailHandler(rc *received) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/threads/{id}", func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		rc.mu.Lock()
		rc.fetches = append(rc.fetches, auth)
		rc.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if auth != "Bearer "+canary {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":"unauthorized"}`)
			return
		}
		if r.PathValue("id") != "th-42" {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"error":"no such thread"}`)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "th-42", "subject": "Quarterly plan (thread)", "participants": []string{"alice@example.test", "bob@example.test"},
			"last": map[string]any{"snippet": "see you Monday; debug token=" + strings.TrimPrefix(auth, "Bearer ")},
		})
	})
	sum := func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+canary {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		rc.mu.Lock()
		rc.bodies[r.URL.Path] = append(rc.bodies[r.URL.Path], fmt.Sprintf("%x/%d", h.Sum(nil), n))
		rc.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"ok":true,"size":%d}`, n)
	}
	mux.HandleFunc("POST /v1/messages/send", sum)
	mux.HandleFunc("POST /v1/upload", sum)
	return mux
}

// newPreviewEnv runs serve with the mail connector, its canary credential
// and a session; the thread fetch and the held sends go to the stand-in.
func newPreviewEnv(t *testing.T, serveFlags ...string) (*env, *received) {
	t.Helper()
	home := t.TempDir()
	rc := &received{bodies: map[string][]string{}}
	up := newUpstream(t, []string{"mail.example.test"}, mailHandler(rc))
	spec := filepath.Join(t.TempDir(), "mail.aileron.connector.v1.json")
	if err := os.WriteFile(spec, []byte(previewSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, home, "", "connector", "install", spec)
	mustCLI(t, home, canary+"\n", "credential", "set", "local://test/mail", "--kind", "bearer", "--stdin")
	flags := append([]string{"--resolve", "mail.example.test:443=" + up.addr, "--upstream-ca", up.certFile}, serveFlags...)
	d := startServe(t, home, nil, flags...)
	e := &env{home: home, up: up, d: d, s: createSession(t, home)}
	t.Cleanup(func() { e.assertNoCanary(t) })
	return e, rc
}

// approvalsAPI is GET /v1/approvals?state=STATE with the admin token; the
// raw answer is checked for the credential.
func (e *env) approvalsAPI(t *testing.T, state string) []map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.d.APIURL+"/v1/approvals?state="+state, nil)
	req.Header.Set("Authorization", "Bearer "+e.d.Admin)
	resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	for _, f := range testkit.SecretForms(canary) {
		if bytes.Contains(raw, []byte(f)) {
			t.Errorf("GET /v1/approvals carries the credential (as %q)", f)
		}
	}
	var v struct {
		Approvals []map[string]any `json:"approvals"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(raw, &v) != nil {
		t.Fatalf("GET /v1/approvals = %d %s", resp.StatusCode, raw)
	}
	return v.Approvals
}

// waitPending waits for the one pending approval of operation op and
// returns it as the API shows it.
func (e *env) waitPending(t *testing.T, op string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, a := range e.approvalsAPI(t, "pending") {
			if a["operation"] == op {
				return a
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no pending approval of %s appeared", op)
	return nil
}

// heldPost runs curl POSTing the file body with content type ct to path
// through the session's proxy and returns its result once curl exits.
func (e *env) heldPost(t *testing.T, path, ct, bodyFile string) <-chan [2]string {
	ch := make(chan [2]string, 1)
	go func() {
		r := [2]string{"", "-1"}
		defer func() { ch <- r }()
		body, code := e.curl(t, "--http1.1", "-X", "POST", "-H", "Content-Type: "+ct, "--data-binary", "@"+bodyFile, "https://mail.example.test"+path)
		r = [2]string{body, fmt.Sprint(code)}
	}()
	return ch
}

// fieldsOf maps a preview's field list (as JSON) by name.
func fieldsOf(v any) map[string]map[string]any {
	out := map[string]map[string]any{}
	list, _ := v.([]any)
	for _, x := range list {
		if f, ok := x.(map[string]any); ok {
			out[fmt.Sprint(f["name"])] = f
		}
	}
	return out
}

func writeTemp(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func sha(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// decidedEvent waits for the approval.decided event of approval id.
func decidedEvent(t *testing.T, home, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, ev := range auditEvents(t, home) {
			if f, _ := ev["fields"].(map[string]any); ev["event"] == "approval.decided" && f != nil && f["approval_id"] == id {
				return ev
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no approval.decided event for %s", id)
	return nil
}

// TestApprovalPreviewThroughServe holds real requests (curl through the
// session's proxy) and checks what the person is shown by the API and
// `approvals show`, that the bytes forwarded are the bytes whose digest
// the approval event records, and that no previewed value reaches the
// audit log.
func TestApprovalPreviewThroughServe(t *testing.T) {
	testkit.RequireTool(t, "curl")
	e, rc := newPreviewEnv(t, "--approval-timeout", "60s")
	// Values that the person sees and the audit log must never hold.
	secrets := []string{"Quarterly plan (thread)", "see you Monday", "Numbers for Q3", "line two of the body", "carol@example.test",
		"alice@example.test", "urgent-flag-value", "report-2026.csv", "dave@example.test"}

	t.Run("JSON body with a preview fetch", func(t *testing.T) {
		body := []byte(`{"to":"carol@example.test","subject":"Numbers for Q3","body":"line one\nline two of the body","thread_id":"th-42","priority":"urgent-flag-value"}`)
		ch := e.heldPost(t, "/v1/messages/send", "application/json", writeTemp(t, "send.json", body))
		a := e.waitPending(t, "messages.send")
		id := fmt.Sprint(a["id"])
		if n := len(rc.body("/v1/messages/send")); n != 0 {
			t.Fatalf("the held send reached the upstream before approval")
		}
		if a["body_sha256"] != sha(body) || a["body_size"] != float64(len(body)) {
			t.Errorf("pending body digest = %v/%v, want %s/%d", a["body_sha256"], a["body_size"], sha(body), len(body))
		}
		pv, _ := a["preview"].(map[string]any)
		b, _ := pv["body"].(map[string]any)
		if b == nil || b["kind"] != "json" {
			t.Fatalf("preview body = %v, want kind json", pv["body"])
		}
		list, _ := b["fields"].([]any)
		var order []string
		for _, x := range list {
			order = append(order, fmt.Sprint(x.(map[string]any)["name"]))
		}
		if strings.Join(order, ",") != "to,subject,body,priority,thread_id" {
			t.Errorf("body fields in order %v, want the declared to,subject,body first, then the rest by name", order)
		}
		fs := fieldsOf(b["fields"])
		if fs["to"]["value"] != "carol@example.test" || fs["to"]["primary"] != true || fs["priority"]["primary"] == true {
			t.Errorf("body fields = %v", fs)
		}
		if fs["body"]["value"] != "line one\nline two of the body" || fs["body"]["multiline"] != true {
			t.Errorf("multi-line body field = %v, want multiline", fs["body"])
		}
		f, _ := pv["fetch"].(map[string]any)
		if f == nil || f["state"] != "fetched" || f["operation"] != "mail threads.get" || fmt.Sprint(f["status"]) != "200" {
			t.Fatalf("fetch = %v, want fetched threads.get", pv["fetch"])
		}
		ff := fieldsOf(f["fields"])
		if ff["subject"]["label"] != "Thread subject" || ff["subject"]["value"] != "Quarterly plan (thread)" ||
			ff["participants"]["value"] != `["alice@example.test","bob@example.test"]` {
			t.Errorf("fetched fields = %v", ff)
		}
		if s := fmt.Sprint(ff["last.snippet"]["value"]); !strings.HasPrefix(s, "see you Monday; debug token=") || strings.Contains(s, canary) {
			t.Errorf("fetched snippet = %q, want the reflected token masked", redactCanary(s))
		}
		if auths := rc.fetchAuth(); len(auths) != 1 || auths[0] != "Bearer "+canary {
			t.Errorf("the stand-in saw %d thread fetches (want 1, with the session's credential)", len(auths))
		}
		fetchEv := waitAudit(t, e.home, map[string]any{"event": "approval.preview_fetch", "operation": "threads.get"})
		if fetchEv["decision"] != "allowed" || fmt.Sprint(fetchEv["status"]) != "200" || fetchEv["credential_kind"] != "bearer" ||
			fetchEv["path"] != "/v1/threads/th-42" || fetchEv["session_id"] != e.s.ID || fetchEv["audit_id"] != f["audit_id"] {
			t.Errorf("preview fetch audit event = %v (preview audit_id %v)", fetchEv, f["audit_id"])
		}

		show := mustCLI(t, e.home, "", "approvals", "show", id)
		for _, want := range []string{"Request:    POST mail.example.test:443/v1/messages/send", "to: carol@example.test", "subject: Numbers for Q3",
			"  body:\n    | line one\n    | line two of the body\n", "(other fields)", "priority: urgent-flag-value",
			"sha256 " + sha(body), "Fetched:    mail threads.get (status 200)", "Thread subject: Quarterly plan (thread)"} {
			if !strings.Contains(show, want) {
				t.Errorf("`approvals show` lacks %q:\n%s", want, redactCanary(show))
			}
		}
		if strings.Contains(show, canary) {
			t.Errorf("`approvals show` prints the credential")
		}
		list1 := mustCLI(t, e.home, "", "approvals", "list")
		if !strings.Contains(list1, fmt.Sprintf("%dB sha256:%.12s", len(body), sha(body))) {
			t.Errorf("`approvals list` lacks the body's size and digest:\n%s", list1)
		}

		mustCLI(t, e.home, "", "approvals", "approve", id)
		out, code := waitCurl(t, ch)
		if code != "200" {
			t.Fatalf("approved send = %s %s", code, out)
		}
		ev := decidedEvent(t, e.home, id)
		fields, _ := ev["fields"].(map[string]any)
		got := rc.body("/v1/messages/send")
		if ev["decision"] != "approved" || len(got) != 1 || got[0] != fmt.Sprintf("%s/%s", fields["body_sha256"], fields["body_size"]) {
			t.Errorf("upstream received %v; the approval event records sha256 %v size %v", got, fields["body_sha256"], fields["body_size"])
		}
		if fields["body_sha256"] != sha(body) {
			t.Errorf("recorded digest %v is not the digest of the sent body", fields["body_sha256"])
		}
		if pf := fmt.Sprint(fields["preview_fields"]); !strings.Contains(pf, "body.to") || !strings.Contains(pf, "fetch.subject") {
			t.Errorf("preview_fields = %q, want the field names", pf)
		}
		// Decided: the preview is dropped, the digest stays.
		for _, a := range e.approvalsAPI(t, "decided") {
			if a["id"] == id && (a["preview"] != nil || a["body_sha256"] != sha(body)) {
				t.Errorf("a decided approval = %v, want no preview and the digest", a)
			}
		}
	})

	t.Run("form body", func(t *testing.T) {
		body := []byte("to=dave%40example.test&to=erin%40example.test&file=report-2026.csv")
		ch := e.heldPost(t, "/v1/upload", "application/x-www-form-urlencoded", writeTemp(t, "form", body))
		a := e.waitPending(t, "files.upload")
		b, _ := a["preview"].(map[string]any)["body"].(map[string]any)
		fs := fieldsOf(b["fields"])
		if b["kind"] != "form" || fs["to"]["value"] != "dave@example.test,erin@example.test" || fs["file"]["value"] != "report-2026.csv" {
			t.Errorf("form preview = %v", b)
		}
		mustCLI(t, e.home, "", "approvals", "approve", fmt.Sprint(a["id"]))
		if out, code := waitCurl(t, ch); code != "200" {
			t.Fatalf("approved upload = %s %s", code, out)
		}
		if got := rc.body("/v1/upload"); len(got) != 1 || got[0] != fmt.Sprintf("%s/%d", sha(body), len(body)) {
			t.Errorf("upstream received %v, want %s/%d", got, sha(body), len(body))
		}
	})

	t.Run("binary body", func(t *testing.T) {
		body := append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), bytes.Repeat([]byte{0, 1, 2, 0xff}, 100)...)
		ch := e.heldPost(t, "/v1/upload", "image/png", writeTemp(t, "img.png", body))
		a := e.waitPending(t, "files.upload")
		b, _ := a["preview"].(map[string]any)["body"].(map[string]any)
		if b["kind"] != "binary" || b["content_type"] != "image/png" || b["size"] != float64(len(body)) ||
			b["sha256"] != sha(body) || !strings.HasPrefix(fmt.Sprint(b["excerpt"]), "89504e470d0a1a0a") || b["fields"] != nil {
			t.Errorf("binary preview = %v", b)
		}
		show := mustCLI(t, e.home, "", "approvals", "show", fmt.Sprint(a["id"]))
		if !strings.Contains(show, fmt.Sprintf("Body:       image/png, %d bytes, sha256 %s", len(body), sha(body))) || !strings.Contains(show, "binary excerpt:") {
			t.Errorf("`approvals show` of a binary body:\n%s", show)
		}
		mustCLI(t, e.home, "", "approvals", "approve", fmt.Sprint(a["id"]))
		if out, code := waitCurl(t, ch); code != "200" {
			t.Fatalf("approved upload = %s %s", code, out)
		}
		if got := rc.body("/v1/upload"); len(got) != 2 || got[1] != fmt.Sprintf("%s/%d", sha(body), len(body)) {
			t.Errorf("upstream received %v, want %s/%d last", got, sha(body), len(body))
		}
	})

	t.Run("5 MiB body", func(t *testing.T) {
		body := make([]byte, 5<<20)
		for i := range body {
			body[i] = byte(i*7 + i>>13)
		}
		ch := e.heldPost(t, "/v1/upload", "application/octet-stream", writeTemp(t, "big.bin", body))
		a := e.waitPending(t, "files.upload")
		b, _ := a["preview"].(map[string]any)["body"].(map[string]any)
		if b["kind"] != "too_large" || b["size"] != float64(5<<20) || b["sha256"] != sha(body) || b["excerpt"] != nil || b["fields"] != nil {
			t.Errorf("5 MiB preview = %v, want size and digest only", b)
		}
		id := fmt.Sprint(a["id"])
		mustCLI(t, e.home, "", "approvals", "approve", id)
		if out, code := waitCurl(t, ch); code != "200" {
			t.Fatalf("approved upload = %s %s", code, out)
		}
		fields, _ := decidedEvent(t, e.home, id)["fields"].(map[string]any)
		want := fmt.Sprintf("%s/%d", sha(body), len(body))
		if got := rc.body("/v1/upload"); len(got) != 3 || got[2] != want || fmt.Sprintf("%s/%s", fields["body_sha256"], fields["body_size"]) != want {
			t.Errorf("upstream received %v, approval event %v/%v, want %s", got, fields["body_sha256"], fields["body_size"], want)
		}
	})

	t.Run("a failing fetch is shown and the approval still works", func(t *testing.T) {
		body := []byte(`{"to":"carol@example.test","subject":"Numbers for Q3","thread_id":"th-missing"}`)
		ch := e.heldPost(t, "/v1/messages/send", "application/json", writeTemp(t, "send2.json", body))
		a := e.waitPending(t, "messages.send")
		f, _ := a["preview"].(map[string]any)["fetch"].(map[string]any)
		if f == nil || f["state"] != "failed" || fmt.Sprint(f["status"]) != "404" || !strings.Contains(fmt.Sprint(f["error"]), "404") || f["code"] != "upstream_status" || f["fields"] != nil {
			t.Errorf("failed fetch = %v", f)
		}
		show := mustCLI(t, e.home, "", "approvals", "show", fmt.Sprint(a["id"]))
		if !strings.Contains(show, "Fetched:    mail threads.get FAILED: mail.example.test:443 answered 404 Not Found (upstream_status)") {
			t.Errorf("`approvals show` of a failed fetch:\n%s", show)
		}
		mustCLI(t, e.home, "", "approvals", "approve", fmt.Sprint(a["id"]))
		if out, code := waitCurl(t, ch); code != "200" {
			t.Fatalf("approved send = %s %s", code, out)
		}
		if got := rc.body("/v1/messages/send"); len(got) != 2 || got[1] != fmt.Sprintf("%s/%d", sha(body), len(body)) {
			t.Errorf("upstream received %v", got)
		}
		waitAudit(t, e.home, map[string]any{"event": "approval.preview_fetch", "status": 404})
	})

	t.Run("remembered for the session: no fetch, no preview", func(t *testing.T) {
		body := []byte(`{"to":"carol@example.test","thread_id":"th-42"}`)
		ch := e.heldPost(t, "/v1/messages/send", "application/json", writeTemp(t, "send3.json", body))
		a := e.waitPending(t, "messages.send")
		mustCLI(t, e.home, "", "approvals", "approve", fmt.Sprint(a["id"]), "--remember", "session")
		if out, code := waitCurl(t, ch); code != "200" {
			t.Fatalf("approved send = %s %s", code, out)
		}
		before := len(rc.fetchAuth())
		out, code := waitCurl(t, e.heldPost(t, "/v1/messages/send", "application/json", writeTemp(t, "send4.json", body)))
		if code != "200" {
			t.Fatalf("a remembered send = %s %s", code, out)
		}
		if n := len(rc.fetchAuth()) - before; n != 0 {
			t.Errorf("a send answered by a remembered decision made %d preview fetches, want none", n)
		}
		if got := rc.body("/v1/messages/send"); len(got) != 4 || got[3] != fmt.Sprintf("%s/%d", sha(body), len(body)) {
			t.Errorf("upstream received %v", got)
		}
	})

	raw, err := os.ReadFile(filepath.Join(e.home, "audit", "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		if bytes.Contains(raw, []byte(s)) {
			t.Errorf("the audit log holds the previewed value %q", s)
		}
	}
}

// TestConsolePreviewInBrowser drives the console's approval card in
// headless chromium: before the decision it shows the held request's
// fields as a definition list, a multi-line field as a block, the body's
// digest, and the fetched state in its own section (or the fetch's
// failure); approving from the card sends the request.
func TestConsolePreviewInBrowser(t *testing.T) {
	testkit.RequireTool(t, "curl")
	e, rc := newPreviewEnv(t, "--approval-timeout", "60s")
	ctx := browser(t)
	var login string
	for deadline := time.Now().Add(5 * time.Second); login == ""; time.Sleep(50 * time.Millisecond) {
		login = signInLine.FindString(e.d.stderr.String())
		if time.Now().After(deadline) {
			t.Fatalf("serve logged no sign-in link")
		}
	}
	run(t, ctx, "signing in", chromedp.Navigate(login), chromedp.WaitVisible(chromedp.CSS("#pending")))

	t.Run("fetched state and blocks before the decision", func(t *testing.T) {
		body := []byte(`{"to":"carol@example.test","subject":"Numbers for Q3","body":"line one\nline two of the body","thread_id":"th-42"}`)
		done := e.heldPost(t, "/v1/messages/send", "application/json", writeTemp(t, "send.json", body))
		run(t, ctx, "waiting for the card", chromedp.WaitVisible(chromedp.CSS("article.approval section.fetched")))
		html := e.pageHTML(t, ctx)
		fetched := get(t, ctx, "reading the fetched section", chromedp.Evaluate[string](
			`[...document.querySelectorAll("article.approval section.fetched.fetched dl.fields.fetched > *")].map(e => e.tagName + ":" + e.textContent).join("|")`))
		if !strings.Contains(fetched, "DT:Thread subject|DD:Quarterly plan (thread)") || !strings.Contains(fetched, `DT:Participants|DD:["alice@example.test","bob@example.test"]`) {
			t.Errorf("the card's fetched section = %q", fetched)
		}
		if strings.Contains(fetched, canary) || !strings.Contains(fetched, "debug token=") {
			t.Errorf("the fetched section shows the reflected credential, or not the masked field: %q", redactCanary(fetched))
		}
		// The fetched state is its own section, apart from what is sent.
		apart := get(t, ctx, "checking the sections", chromedp.Evaluate[bool](
			`!document.querySelector("article.approval section.preview").contains(document.querySelector("article.approval section.fetched"))`))
		if !apart {
			t.Errorf("the fetched state is inside the section of what is sent")
		}
		block := get(t, ctx, "reading the multi-line field", chromedp.Evaluate[string](
			`(() => { const dts = [...document.querySelectorAll("article.approval section.preview dl.fields.body > dt")];
			  const dt = dts.find(d => d.textContent === "body"); if (!dt) return "no body field";
			  const pre = dt.nextElementSibling.querySelector("pre.block"); if (!pre) return "no block";
			  const lh = parseFloat(getComputedStyle(pre).lineHeight) || 16;
			  return getComputedStyle(pre).display + "|" + (pre.getBoundingClientRect().height >= 1.8 * lh) + "|" + pre.textContent; })()`))
		if block != "block|true|line one\nline two of the body" {
			t.Errorf("the multi-line field = %q, want a block two lines tall", block)
		}
		primary := get(t, ctx, "reading the body fields", chromedp.Evaluate[string](
			`[...document.querySelectorAll("article.approval section.preview dl.fields.body > dt")].map(e => e.textContent).join(",")`))
		if primary != "to,subject,body,thread_id" {
			t.Errorf("the card's body fields = %q, want the declared to,subject,body first", primary)
		}
		if !strings.Contains(html, sha(body)) {
			t.Errorf("the card lacks the body's digest")
		}
		screenshot(t, ctx, "approval-preview")
		select {
		case r := <-done:
			t.Fatalf("curl finished before a decision: %v", r)
		default:
		}
		run(t, ctx, "approving", chromedp.Click(chromedp.CSS("article.approval button.approve")),
			chromedp.WaitNotPresent(chromedp.CSS("article.approval")))
		if out, code := waitCurl(t, done); code != "200" {
			t.Errorf("approved curl = %s %q", code, out)
		}
		if got := rc.body("/v1/messages/send"); len(got) != 1 || got[0] != fmt.Sprintf("%s/%d", sha(body), len(body)) {
			t.Errorf("upstream received %v", got)
		}
	})

	t.Run("a failed fetch on the card", func(t *testing.T) {
		done := e.heldPost(t, "/v1/messages/send", "application/json", writeTemp(t, "send2.json", []byte(`{"to":"carol@example.test","thread_id":"th-gone"}`)))
		run(t, ctx, "waiting for the card", chromedp.WaitVisible(chromedp.CSS("article.approval section.fetched.failed")))
		msg := get(t, ctx, "reading the failure", chromedp.Evaluate[string](`document.querySelector("article.approval section.fetched.failed p.fetch-failed").textContent`))
		if !strings.HasPrefix(msg, "Preview unavailable: ") || !strings.Contains(msg, "404") || !strings.HasSuffix(msg, "(upstream_status)") {
			t.Errorf("the failed fetch reads %q", msg)
		}
		e.pageHTML(t, ctx)
		run(t, ctx, "approving", chromedp.Click(chromedp.CSS("article.approval button.approve")),
			chromedp.WaitNotPresent(chromedp.CSS("article.approval")))
		if out, code := waitCurl(t, done); code != "200" {
			t.Errorf("approved curl after a failed fetch = %s %q", code, out)
		}
	})
}
