package console

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/approval"
	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/policy"
	"github.com/aileron-dev/aileron-proxy/session"
)

type harness struct {
	c      *Console
	srv    *httptest.Server
	broker *approval.Broker
	reg    *session.Registry
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	dir := t.TempDir()
	w, err := audit.Open(filepath.Join(dir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	h := &harness{broker: approval.NewBroker(approval.BrokerConfig{Audit: w, Timeout: 10 * time.Second}), reg: session.NewRegistry(session.RegistryConfig{})}
	h.srv = httptest.NewUnstartedServer(nil)
	h.srv.Start()
	t.Cleanup(h.srv.Close)
	h.c, err = New(Config{Logger: zap.NewNop(), Sessions: h.reg, Approvals: h.broker, AuditPath: w.Path(), BaseURL: h.srv.URL, Tick: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	h.srv.Config.Handler = h.c
	return h
}

// client returns a browser-like client that does not follow redirects.
func (h *harness) client(t *testing.T) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (h *harness) signIn(t *testing.T, c *http.Client) {
	t.Helper()
	u, _, err := h.c.NewLoginURL()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != Prefix {
		t.Fatalf("GET %s = %d Location %q, want 303 to %s", LoginPath, resp.StatusCode, resp.Header.Get("Location"), Prefix)
	}
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestLoginCodeWorksOnceAndSetsAStrictCookie(t *testing.T) {
	h := newHarness(t)
	u, exp, err := h.c.NewLoginURL()
	if err != nil || !strings.HasPrefix(u, h.srv.URL+LoginPath+"?code=") || time.Until(exp) > CodeTTL {
		t.Fatalf("NewLoginURL = %q %v %v", u, exp, err)
	}
	c := h.client(t)
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != Prefix {
		t.Fatalf("first use = %d %q, want 303 to /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
	ck := resp.Cookies()
	if len(ck) != 1 || ck[0].Name != CookieName || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("cookie = %+v, want one HttpOnly SameSite=Strict %s", ck, CookieName)
	}
	if strings.Contains(resp.Header.Get("Location"), "code") {
		t.Errorf("the redirect keeps the code: %q", resp.Header.Get("Location"))
	}
	resp, err = h.client(t).Get(u)
	if err != nil {
		t.Fatal(err)
	}
	if b := body(t, resp); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 || !strings.Contains(b, "aileron-proxy ui") {
		t.Errorf("second use = %d %q cookies %v, want 401 naming `aileron-proxy ui`", resp.StatusCode, b, resp.Cookies())
	}
	// The cookie opens the pages.
	resp, err = c.Get(h.srv.URL + "/ui/approvals")
	if err != nil {
		t.Fatal(err)
	}
	if b := body(t, resp); resp.StatusCode != 200 || !strings.Contains(b, "Approvals") {
		t.Errorf("GET /ui/approvals signed in = %d", resp.StatusCode)
	}
}

func TestExpiredCodeRefused(t *testing.T) {
	h := newHarness(t)
	now := time.Now()
	h.c.cfg.Now = func() time.Time { return now }
	u, _, _ := h.c.NewLoginURL()
	now = now.Add(CodeTTL + time.Second)
	resp, err := h.client(t).Get(u)
	if err != nil {
		t.Fatal(err)
	}
	if body(t, resp); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("expired code = %d, want 401", resp.StatusCode)
	}
}

func TestNoCookieNoData(t *testing.T) {
	h := newHarness(t)
	id := h.hold(t)
	for _, p := range []string{"/ui/", "/ui/approvals", "/ui/sessions", "/ui/audit", "/ui/audit?fragment=1", "/ui/events", "/ui/assets/app.js", "/ui/nope"} {
		resp, err := h.client(t).Get(h.srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		b := body(t, resp)
		if resp.StatusCode < 300 || resp.StatusCode >= 500 || (resp.StatusCode >= 400 && resp.StatusCode != 401 && resp.StatusCode != 403) {
			t.Errorf("GET %s without the cookie = %d, want 3xx, 401 or 403", p, resp.StatusCode)
		}
		if strings.Contains(b, id) {
			t.Errorf("GET %s without the cookie shows the approval", p)
		}
	}
}

// hold starts a held request and returns its approval id.
func (h *harness) hold(t *testing.T) string { t.Helper(); return h.holdFor(t, "ses_1") }

// holdFor starts a held request of session and returns its approval id.
func (h *harness) holdFor(t *testing.T, sessionID string) string {
	t.Helper()
	before := len(h.broker.List(approval.StatePending))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go h.broker.Await(ctx, approval.Request{SessionID: sessionID, ConnectorFQN: "local://t/c", Tool: "t", Operation: "o", Method: "POST", Host: "h:443", Path: "/p"})
	for range 200 {
		if l := h.broker.List(approval.StatePending); len(l) > before {
			return l[len(l)-1].ID
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no pending approval")
	return ""
}

// csrfOf reads the CSRF token from a signed-in page.
func (h *harness) csrfOf(t *testing.T, c *http.Client) string {
	t.Helper()
	resp, err := c.Get(h.srv.URL + "/ui/approvals")
	if err != nil {
		t.Fatal(err)
	}
	b := body(t, resp)
	_, rest, ok := strings.Cut(b, `<meta name="csrf-token" content="`)
	tok, _, _ := strings.Cut(rest, `"`)
	if !ok || tok == "" {
		t.Fatalf("no csrf meta tag in %s", b)
	}
	return tok
}

func TestStateChangesNeedCookieCSRFAndSameOrigin(t *testing.T) {
	h := newHarness(t)
	c := h.client(t)
	h.signIn(t, c)
	csrf := h.csrfOf(t, c)
	id := h.hold(t)
	origin := h.srv.URL
	post := func(c *http.Client, form url.Values, hdr map[string]string) int {
		req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/ui/approvals/"+id, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body(t, resp)
		return resp.StatusCode
	}
	approve := url.Values{"decision": {"approve"}}
	withCSRF := url.Values{"decision": {"approve"}, CSRFField: {csrf}}
	for _, tc := range []struct {
		name   string
		c      *http.Client
		form   url.Values
		hdr    map[string]string
		status int
	}{
		{"no cookie", h.client(t), withCSRF, map[string]string{"Origin": origin}, 401},
		{"no CSRF token", c, approve, map[string]string{"Origin": origin}, 403},
		{"wrong CSRF token", c, url.Values{"decision": {"approve"}, CSRFField: {"x" + csrf}}, map[string]string{"Origin": origin}, 403},
		{"cross origin", c, withCSRF, map[string]string{"Origin": "http://evil.example"}, 403},
		{"cross site fetch", c, withCSRF, map[string]string{"Origin": origin, "Sec-Fetch-Site": "cross-site"}, 403},
		{"no origin at all", c, withCSRF, nil, 403},
		{"an API token", c, withCSRF, map[string]string{"Origin": origin, "Authorization": "Bearer tok"}, 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := post(tc.c, tc.form, tc.hdr); got != tc.status {
				t.Errorf("POST = %d, want %d", got, tc.status)
			}
			if n := len(h.broker.List(approval.StatePending)); n != 1 {
				t.Errorf("the refused request decided the approval (%d pending)", n)
			}
		})
	}
	if got := post(c, url.Values{"decision": {"approve"}}, map[string]string{"Origin": origin, HeaderCSRF: csrf}); got != http.StatusSeeOther {
		t.Fatalf("POST with cookie, header token and same origin = %d, want 303", got)
	}
	if d := h.broker.List(approval.StateDecided); len(d) != 1 || d[0].Decision != "approved" {
		t.Errorf("decided = %+v, want one approved", d)
	}
}

func TestSecurityHeaders(t *testing.T) {
	h := newHarness(t)
	resp, err := h.client(t).Get(h.srv.URL + "/ui/approvals")
	if err != nil {
		t.Fatal(err)
	}
	body(t, resp)
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"object-src 'none'", "frame-ancestors 'none'", "script-src 'self'", "default-src 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	for _, bad := range []string{"unsafe-inline", "unsafe-eval", "http:", "https:", "*"} {
		if strings.Contains(csp, bad) {
			t.Errorf("CSP %q allows %q", csp, bad)
		}
	}
}

func TestEndSessionAndEvents(t *testing.T) {
	h := newHarness(t)
	snap, err := policy.Compile(nil)
	if err != nil {
		t.Fatal(err)
	}
	s, _, err := h.reg.Create(session.CreateOptions{Snapshot: snap, Agent: "claude", Project: "/src/repo"})
	if err != nil {
		t.Fatal(err)
	}
	c := h.client(t)
	h.signIn(t, c)
	csrf := h.csrfOf(t, c)
	resp, err := c.Get(h.srv.URL + "/ui/sessions")
	if err != nil {
		t.Fatal(err)
	}
	if b := body(t, resp); !strings.Contains(b, ">"+s.ID+"<") || !strings.Contains(b, "<svg") || !strings.Contains(b, "claude") || !strings.Contains(b, "/src/repo") {
		t.Fatalf("sessions page lacks the full id %s, the agent, the project or the timeline", s.ID)
	}
	// An open event stream counts as a viewer and names what changed.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.srv.URL+"/ui/events", nil)
	stream, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	for i := 0; !h.c.HasViewer(); i++ {
		if i > 200 {
			t.Fatal("HasViewer stayed false with a stream open")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if code, _ := h.postForm(t, c, "/ui/sessions/"+s.ID+"/end", url.Values{CSRFField: {csrf}}); code != http.StatusSeeOther {
		t.Fatalf("ending the session = %d, want 303", code)
	}
	if _, ok := h.reg.Get(s.ID); ok {
		t.Errorf("the session is still live")
	}
	buf := make([]byte, 4096)
	var got strings.Builder
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(got.String(), "event: sessions") && time.Now().Before(deadline) {
		n, err := stream.Body.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			break
		}
	}
	if !strings.Contains(got.String(), "event: sessions") {
		t.Errorf("the event stream did not announce the session change: %q", got.String())
	}
}

func TestTimelineEscapes(t *testing.T) {
	start := time.Now()
	svg := string(timeline([]audit.Event{{Time: start.Add(time.Second), Event: audit.EventDenied, Tool: "<script>", Operation: "x"}}, start, start.Add(2*time.Second)))
	if strings.Contains(svg, "<script>") || !strings.Contains(svg, `class="dot denied"`) {
		t.Errorf("timeline = %s", svg)
	}
}

// TestEventsBaselineIsThePage: a change between rendering a page and
// opening its event stream is still announced.
func TestEventsBaselineIsThePage(t *testing.T) {
	h := newHarness(t)
	c := h.client(t)
	h.signIn(t, c)
	resp, err := c.Get(h.srv.URL + "/ui/approvals")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(body(t, resp), `data-state="`)
	st, _, _ := strings.Cut(rest, `"`)
	if _, ok := parseState(st); !ok {
		t.Fatalf("page state %q does not parse", st)
	}
	h.hold(t) // after the render, before the stream
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.srv.URL+"/ui/events?state="+url.QueryEscape(st), nil)
	stream, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	var got strings.Builder
	buf := make([]byte, 4096)
	for !strings.Contains(got.String(), "event: approvals") {
		n, err := stream.Body.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			t.Fatalf("the stream ended without announcing the held request: %q (%v)", got.String(), err)
		}
	}
}

// postForm POSTs form to path from the console's own origin, as its pages
// do, and returns the status and body.
func (h *harness) postForm(t *testing.T, c *http.Client, path string, form url.Values) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", h.srv.URL)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body(t, resp)
}

// decide POSTs a decision form as the signed-in page would.
func (h *harness) decide(t *testing.T, c *http.Client, csrf, id string, form url.Values) (int, string) {
	t.Helper()
	form.Set(CSRFField, csrf)
	return h.postForm(t, c, "/ui/approvals/"+id, form)
}

func TestApproveForThisSession(t *testing.T) {
	h := newHarness(t)
	c := h.client(t)
	h.signIn(t, c)
	csrf := h.csrfOf(t, c)
	first, second := h.holdFor(t, "ses_1"), h.holdFor(t, "ses_1")
	if code, b := h.decide(t, c, csrf, first, url.Values{"decision": {"approve"}, "remember": {"session"}}); code != http.StatusSeeOther {
		t.Fatalf("approve for this session = %d %q", code, b)
	}
	for _, p := range h.broker.List(approval.StateDecided) {
		if (p.ID == first || p.ID == second) && p.Decision != "approved" {
			t.Errorf("%s = %s, want approved", p.ID, p.Decision)
		}
	}
	if n := len(h.broker.List(approval.StatePending)); n != 0 {
		t.Errorf("%d requests still pending after approving for the session", n)
	}
}

func TestCLISurfaceIsNotDecidedInTheConsole(t *testing.T) {
	h := newHarness(t)
	snap, err := policy.Compile(nil)
	if err != nil {
		t.Fatal(err)
	}
	s, _, err := h.reg.Create(session.CreateOptions{Snapshot: snap, ApprovalSurface: "cli"})
	if err != nil {
		t.Fatal(err)
	}
	c := h.client(t)
	h.signIn(t, c)
	csrf := h.csrfOf(t, c)
	id := h.holdFor(t, s.ID)
	resp, err := c.Get(h.srv.URL + "/ui/approvals")
	if err != nil {
		t.Fatal(err)
	}
	if b := body(t, resp); !strings.Contains(b, id) || strings.Contains(b, `action="/ui/approvals/`+id+`"`) || !strings.Contains(b, "approvals approve "+id) {
		t.Errorf("the approvals page offers console buttons for a cli-surface session or omits the command")
	}
	if code, b := h.decide(t, c, csrf, id, url.Values{"decision": {"approve"}}); code != http.StatusForbidden || !strings.Contains(b, "aileron-proxy approvals approve") {
		t.Errorf("deciding a cli-surface approval in the console = %d %q, want 403 naming the command", code, b)
	}
	if n := len(h.broker.List(approval.StatePending)); n != 1 {
		t.Errorf("the refused decision settled the approval (%d pending)", n)
	}
}

// fakeSandboxes is a daemon's sandbox list for the console; fail, when
// set, is what Remove returns for a known sandbox.
type fakeSandboxes struct {
	mu      sync.Mutex
	boxes   []Sandbox
	removed []string
	lists   int
	fail    error
}

func (f *fakeSandboxes) List() []Sandbox {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	return slices.Clone(f.boxes)
}

func (f *fakeSandboxes) Remove(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.ContainsFunc(f.boxes, func(b Sandbox) bool { return b.ID == id }) {
		return ErrSandboxNotFound
	}
	if f.fail != nil {
		return f.fail
	}
	f.removed = append(f.removed, id)
	f.boxes = slices.DeleteFunc(f.boxes, func(b Sandbox) bool { return b.ID == id })
	return nil
}

// TestSandboxesOnSessionsPage: a session's long-lived sandbox is shown
// under it and removed from the page with the cookie and CSRF token;
// without the token nothing is removed.
func TestSandboxesOnSessionsPage(t *testing.T) {
	h := newHarness(t)
	snap, err := policy.Compile(nil)
	if err != nil {
		t.Fatal(err)
	}
	s, _, err := h.reg.Create(session.CreateOptions{Snapshot: snap})
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakeSandboxes{boxes: []Sandbox{{ID: "sbx_0123456789abcdef", SessionID: s.ID, Runtime: "docker", Image: "aileron/sandbox-base:x", User: "agent"}}}
	h.c.cfg.Sandboxes = fake
	c := h.client(t)
	h.signIn(t, c)
	csrf := h.csrfOf(t, c)
	resp, err := c.Get(h.srv.URL + "/ui/sessions")
	if err != nil {
		t.Fatal(err)
	}
	if b := body(t, resp); !strings.Contains(b, `data-sandbox-id="sbx_0123456789abcdef"`) || !strings.Contains(b, "Remove sandbox sbx_0123456789abcdef") {
		t.Fatalf("the sessions page does not show the session's sandbox:\n%s", b)
	}
	post := func(form url.Values) int {
		code, _ := h.postForm(t, c, "/ui/sandboxes/sbx_0123456789abcdef/remove", form)
		return code
	}
	if code := post(url.Values{}); code != http.StatusForbidden || len(fake.removed) != 0 {
		t.Errorf("remove without CSRF = %d, removed %q; want 403 and nothing removed", code, fake.removed)
	}
	if code := post(url.Values{CSRFField: {csrf}}); code != http.StatusSeeOther || !slices.Equal(fake.removed, []string{"sbx_0123456789abcdef"}) {
		t.Errorf("remove = %d, removed %q; want 303 and the sandbox removed", code, fake.removed)
	}
	if code := post(url.Values{CSRFField: {csrf}}); code != http.StatusNotFound {
		t.Errorf("removing it again = %d, want 404", code)
	}
}

// TestRemoveSandboxErrors: removing takes not-found from Remove itself,
// without listing every sandbox first; another failure is 409.
func TestRemoveSandboxErrors(t *testing.T) {
	h := newHarness(t)
	fake := &fakeSandboxes{boxes: []Sandbox{{ID: "sbx_stuck"}}, fail: errors.New("runtime said no")}
	h.c.cfg.Sandboxes = fake
	c := h.client(t)
	h.signIn(t, c)
	csrf := h.csrfOf(t, c)
	lists := fake.lists
	for _, tc := range []struct {
		id   string
		want int
	}{
		{"sbx_nope", http.StatusNotFound},
		{"sbx_stuck", http.StatusConflict},
	} {
		if code, _ := h.postForm(t, c, "/ui/sandboxes/"+tc.id+"/remove", url.Values{CSRFField: {csrf}}); code != tc.want {
			t.Errorf("remove %s = %d, want %d", tc.id, code, tc.want)
		}
	}
	if fake.lists != lists {
		t.Errorf("removing listed the sandboxes %d times, want 0", fake.lists-lists)
	}
}

// TestApprovalMultilineFieldIsABlock: a field value that spans lines (a
// multi-line action input the operation audits, such as an email body) is
// shown whole as a block on the approval card, each line kept.
func TestApprovalMultilineFieldIsABlock(t *testing.T) {
	h := newHarness(t)
	c := h.client(t)
	h.signIn(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	msg := "Hello Alice,\n\nthe deploy is done.\n<b>Bob</b>"
	go h.broker.Await(ctx, approval.Request{SessionID: "ses_1", ConnectorFQN: "local://t/c", Tool: "t", Operation: "o", Method: "POST", Host: "h:443", Path: "/p",
		Fields: map[string]string{"body": msg, "to": "alice@example.com"}})
	for range 200 {
		if len(h.broker.List(approval.StatePending)) > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	resp, err := c.Get(h.srv.URL + "/ui/approvals")
	if err != nil {
		t.Fatal(err)
	}
	page := body(t, resp)
	want := `<dt>body</dt><dd><pre class="mono block">Hello Alice,` + "\n\n" + `the deploy is done.` + "\n" + `&lt;b&gt;Bob&lt;/b&gt;</pre></dd>`
	if !strings.Contains(page, want) {
		t.Errorf("approval page does not show the multi-line field as a whole block; want %q in:\n%s", want, page)
	}
	if !strings.Contains(page, `<dt>to</dt><dd class="mono">alice@example.com</dd>`) {
		t.Errorf("single-line field not shown inline")
	}
}

// TestAuditPageReportsTornLines: a torn line in the audit log (a write an
// older version cut short) is skipped and named on the Audit page, and the
// events around it, including one appended right after the fragment, are
// listed.
func TestAuditPageReportsTornLines(t *testing.T) {
	h := newHarness(t)
	a, _ := audit.Marshal(audit.Event{Event: audit.EventProxied, SessionID: "s-before", Decision: "allowed"})
	b, _ := audit.Marshal(audit.Event{Event: audit.EventProxied, SessionID: "s-after", Decision: "allowed"})
	raw := append(append(append([]byte{}, a...), b[:30]...), b...)
	if err := os.WriteFile(h.c.cfg.AuditPath, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	c := h.client(t)
	h.signIn(t, c)
	resp, err := c.Get(h.srv.URL + "/ui/audit")
	if err != nil {
		t.Fatal(err)
	}
	page := body(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /ui/audit = %d", resp.StatusCode)
	}
	for _, want := range []string{"s-before", "s-after", `id="audit-skipped"`, "skipped a torn line at byte " + strconv.Itoa(len(a)) + " (30 bytes"} {
		if !strings.Contains(page, want) {
			t.Errorf("the Audit page lacks %q", want)
		}
	}
}
