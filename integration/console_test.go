package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// signInLine matches the sign-in link serve logs at start.
var signInLine = regexp.MustCompile(`http://127\.0\.0\.1:\d+/ui/login\?code=[A-Za-z0-9_%-]+`)

// screenshotDir is where the browser tests write one PNG per page
// (gitignored).
const screenshotDir = "screenshots"

// browser starts Debian's chromium headless with a fresh profile and
// returns a chromedp context at 1280x800.
func browser(t *testing.T) context.Context {
	t.Helper()
	exe := testkit.RequireTool(t, "chromium")
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-proxy-server", true),
		chromedp.WindowSize(1280, 800),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// run runs browser steps with a bound.
func run(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(tctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// waitLocation waits until the loaded page's address contains want. A
// form's submit navigates, and a wait begun before the new page is there
// can hold a node of the old one, gone when it is asked about ("No node
// with given id found").
func waitLocation(t *testing.T, ctx context.Context, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		loc, err := chromedp.Run(lctx, chromedp.Evaluate[string](`document.readyState === "complete" ? location.href : ""`))
		cancel()
		if err == nil && strings.Contains(loc, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the browser did not load an address with %q within 20 s (last %q, %v)", want, loc, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// get runs one browser action that returns a value, with a bound.
func get[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(tctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// screenshot writes the viewport as screenshots/NAME.png.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png := get(t, ctx, "screenshot "+name, chromedp.CaptureScreenshot())
	if err := os.MkdirAll(screenshotDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(screenshotDir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// pageHTML returns the document and checks that no secret is in it.
func (e *env) pageHTML(t *testing.T, ctx context.Context) string {
	t.Helper()
	html := get(t, ctx, "reading the page", chromedp.OuterHTML(chromedp.CSS("html")))
	_, secret, _ := strings.Cut(strings.TrimPrefix(e.s.ProxyURL, "http://"), ":")
	secret, _, _ = strings.Cut(secret, "@")
	for name, s := range map[string]string{"the credential": canary, "the session's API token": e.s.APIToken, "the proxy secret": secret, "the admin token": e.d.Admin} {
		if s != "" && strings.Contains(html, s) {
			t.Errorf("the console page shows %s", name)
		}
	}
	return html
}

// heldCurl POSTs to the approval-gated operation through the session's
// proxy and returns the result once curl exits.
func (e *env) heldCurl(t *testing.T) <-chan [2]string {
	ch := make(chan [2]string, 1)
	go func() {
		r := [2]string{"", "-1"}
		defer func() { ch <- r }()
		body, code := e.curl(t, "-X", "POST", "-H", "Content-Type: application/json", "-d", `{"to":"carol@example.test"}`, "https://api.example.test/v1/send")
		r = [2]string{body, fmt.Sprint(code)}
	}()
	return ch
}

func waitCurl(t *testing.T, ch <-chan [2]string) (string, string) {
	t.Helper()
	select {
	case r := <-ch:
		return r[0], r[1]
	case <-time.After(30 * time.Second):
		t.Fatal("the held curl did not finish within 30s of the decision")
	}
	return "", ""
}

// TestConsoleInBrowser drives the web console in headless chromium: sign
// in once, see held requests arrive live, approve one and deny another,
// filter the audit and end a session.
func TestConsoleInBrowser(t *testing.T) {
	testkit.RequireTool(t, "curl")
	e := newEnv(t, "--approval-timeout", "60s")
	ctx := browser(t)

	var login string
	for deadline := time.Now().Add(5 * time.Second); login == ""; time.Sleep(50 * time.Millisecond) {
		login = signInLine.FindString(e.d.stderr.String())
		if time.Now().After(deadline) {
			t.Fatalf("serve logged no sign-in link http://127.0.0.1:PORT/ui/login?code=...:\n%s", e.d.stderr.String())
		}
	}
	base := strings.TrimSuffix(e.d.APIURL, "/")
	if !strings.HasPrefix(login, base+"/ui/login?code=") {
		t.Fatalf("sign-in link %q is not on the API listener %s", login, base)
	}

	t.Run("sign in once", func(t *testing.T) {
		run(t, ctx, "opening the sign-in link", chromedp.Navigate(login), chromedp.WaitVisible(chromedp.CSS("#pending")))
		loc := get(t, ctx, "reading the location", chromedp.Location())
		if loc != base+"/ui/approvals" {
			t.Errorf("after sign-in the browser is at %q, want %s/ui/approvals (the code must leave the address bar)", loc, base)
		}
		resp, err := http.Get(login)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
			t.Errorf("second use of the sign-in link = %d %q, want 401 and no cookie", resp.StatusCode, b)
		}
		cks, err := cookies(ctx)
		if err != nil || len(cks) != 1 || !cks[0].HTTPOnly || cks[0].SameSite != network.CookieSameSiteStrict {
			t.Errorf("console cookies = %+v (%v), want one HttpOnly SameSite=Strict cookie", cks, err)
		}
		out := mustCLI(t, e.home, "", "ui", "--no-open")
		if !signInLine.MatchString(out) || strings.Contains(out, login) {
			t.Errorf("`aileron-proxy ui` printed %q, want a fresh sign-in link", out)
		}
	})

	t.Run("approve a held request live", func(t *testing.T) {
		run(t, ctx, "marking the page", chromedp.Navigate(base+"/ui/approvals"), chromedp.WaitVisible(chromedp.CSS("#live.on")),
			chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				_, err := chromedp.Evaluate[bool](`window.__notReloaded = true`)(ctx, tg)
				return err
			}))
		done := e.heldCurl(t)
		run(t, ctx, "waiting for the held request", chromedp.WaitVisible(chromedp.CSS("article.approval")))
		same := get(t, ctx, "checking the page was not reloaded", chromedp.Evaluate[bool](`window.__notReloaded === true`))
		if !same {
			t.Errorf("the page reloaded to show the held request")
		}
		html := e.pageHTML(t, ctx)
		sum := sha256.Sum256([]byte(`{"to":"carol@example.test"}`))
		previewed := get(t, ctx, "reading the previewed fields", chromedp.Evaluate[string](
			`[...document.querySelectorAll("article.approval section.preview dl.fields.body > *")].map(e => e.tagName + ":" + e.textContent).join("|")`))
		if previewed != "DT:to|DD:carol@example.test" {
			t.Errorf("the card's body fields = %q, want DT:to|DD:carol@example.test as a definition list", previewed)
		}
		for _, want := range []string{"testapi items.send", e.s.ID, "POST api.example.test:443/v1/send", "Approve for this session", "Deny", hex.EncodeToString(sum[:])} {
			if !strings.Contains(html, want) {
				t.Errorf("the held request's card lacks %q", want)
			}
		}
		screenshot(t, ctx, "approvals")
		select {
		case r := <-done:
			t.Fatalf("curl finished before a decision: %v", r)
		default:
		}
		run(t, ctx, "approving", chromedp.Click(chromedp.CSS("article.approval button.approve")),
			chromedp.WaitNotPresent(chromedp.CSS("article.approval")), chromedp.WaitVisible(chromedp.CSS("#history tr.approved")))
		body, code := waitCurl(t, done)
		if code != "200" || !strings.Contains(body, `"sent":true`) {
			t.Errorf("approved curl = %s %q, want 200 with the upstream's answer", code, body)
		}
	})

	t.Run("deny a held request", func(t *testing.T) {
		done := e.heldCurl(t)
		run(t, ctx, "waiting for the held request", chromedp.WaitVisible(chromedp.CSS("article.approval")))
		run(t, ctx, "denying", chromedp.Click(chromedp.CSS("article.approval button.deny")),
			chromedp.WaitNotPresent(chromedp.CSS("article.approval")))
		body, code := waitCurl(t, done)
		if code != "403" || !strings.Contains(body, "approval_denied") {
			t.Errorf("denied curl = %s %q, want 403 approval_denied", code, body)
		}
		if n := len(e.up.requests()); n != 1 {
			t.Errorf("the upstream got %d requests, want only the approved one", n)
		}
	})

	t.Run("filter the audit", func(t *testing.T) {
		waitAudit(t, e.home, map[string]any{"event": "connector.proxy.denied", "operation": "items.send"})
		run(t, ctx, "opening the audit", chromedp.Navigate(base+"/ui/audit"), chromedp.WaitVisible(chromedp.CSS("#audit-rows")))
		run(t, ctx, "filtering denied", chromedp.SetValue(chromedp.CSS(`select[name="decision"]`), "denied"),
			chromedp.Submit(chromedp.CSS("#filters")))
		waitLocation(t, ctx, "decision=denied")
		run(t, ctx, "waiting for the filtered rows", chromedp.WaitVisible(chromedp.CSS("#audit-rows")))
		loc := get(t, ctx, "reading the location", chromedp.Location())
		decisions := get(t, ctx, "reading the rows",
			chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#audit-rows tbody tr.event")).map(r => r.querySelector(".decision").textContent + "|" + r.querySelector(".operation").textContent)`))
		if !strings.Contains(loc, "decision=denied") || len(decisions) == 0 {
			t.Fatalf("audit at %q shows %v, want denied rows", loc, decisions)
		}
		for _, d := range decisions {
			if !strings.HasPrefix(d, "denied|") {
				t.Errorf("filtered audit shows a %q row", d)
			}
		}
		if !strings.Contains(strings.Join(decisions, ","), "items.send") {
			t.Errorf("audit rows %v do not name the operation items.send", decisions)
		}
		e.pageHTML(t, ctx)
		run(t, ctx, "per-session audit", chromedp.Navigate(base+"/ui/audit?session="+e.s.ID), chromedp.WaitVisible(chromedp.CSS("svg.timeline")))
		screenshot(t, ctx, "audit")
	})

	t.Run("refusals", func(t *testing.T) {
		cks, err := cookies(ctx)
		if err != nil || len(cks) == 0 {
			t.Fatalf("no console cookie: %v", err)
		}
		cookie := cks[0].Name + "=" + cks[0].Value
		csrf := get(t, ctx, "reading the CSRF token", chromedp.AttributeValue(chromedp.CSS(`meta[name="csrf-token"]`), "content")).Value
		other := createSession(t, e.home)
		target := base + "/ui/sessions/" + other.ID + "/end"
		origin := base
		post := func(hdr map[string]string, withCSRF bool) int {
			form := url.Values{}
			if withCSRF {
				form.Set("csrf", csrf)
			}
			req, _ := http.NewRequest(http.MethodPost, target, strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			for k, v := range hdr {
				if k == "Host" {
					req.Host = v
					continue
				}
				req.Header.Set(k, v)
			}
			c := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		for _, tc := range []struct {
			name     string
			hdr      map[string]string
			withCSRF bool
		}{
			{"without the cookie", map[string]string{"Origin": origin}, true},
			{"without the CSRF token", map[string]string{"Origin": origin, "Cookie": cookie}, false},
			{"with a rebinding Host", map[string]string{"Origin": "http://evil.example:" + strings.Split(base, ":")[2], "Cookie": cookie, "Host": "evil.example"}, true},
			{"from another origin", map[string]string{"Origin": "http://evil.example", "Cookie": cookie}, true},
			{"with the session's API token", map[string]string{"Origin": origin, "Authorization": "Bearer " + other.APIToken}, true},
		} {
			if got := post(tc.hdr, tc.withCSRF); got < 400 || got >= 500 {
				t.Errorf("ending a session %s = %d, want 401 or 403", tc.name, got)
			}
		}
		out := mustCLI(t, e.home, "", "session", "list", "--json")
		if !strings.Contains(out, other.ID) {
			t.Fatalf("a refused request ended the session: %s", out)
		}
		if got := post(map[string]string{"Origin": origin, "Cookie": cookie}, true); got != http.StatusSeeOther {
			t.Errorf("ending a session with cookie, token and origin = %d, want 303 (the refusals above must be for their reason only)", got)
		}
		// The JSON API keeps refusing browsers.
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/sessions", nil)
		req.Header.Set("Authorization", "Bearer "+e.d.Admin)
		req.Header.Set("Origin", origin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("GET /v1/sessions with an Origin = %d, want 403", resp.StatusCode)
		}
	})

	t.Run("end a session from the page", func(t *testing.T) {
		run(t, ctx, "opening sessions", chromedp.Navigate(base+"/ui/sessions"), chromedp.WaitVisible(chromedp.CSS(`[data-session-id="`+e.s.ID+`"]`)))
		html := e.pageHTML(t, ctx)
		if !strings.Contains(html, ">"+e.s.ID+"<") {
			t.Errorf("the Sessions page does not show the full session id %s", e.s.ID)
		}
		screenshot(t, ctx, "sessions")
		run(t, ctx, "ending the session", chromedp.Click(chromedp.CSS(`[data-session-id="`+e.s.ID+`"] button.end`)),
			chromedp.WaitNotPresent(chromedp.CSS(`[data-session-id="`+e.s.ID+`"]`)))
		var list struct {
			Sessions []struct{ ID string } `json:"sessions"`
		}
		_ = json.Unmarshal([]byte(mustCLI(t, e.home, "", "session", "list", "--json")), &list)
		for _, s := range list.Sessions {
			if s.ID == e.s.ID {
				t.Errorf("the session is still live after End session")
			}
		}
		if _, code := e.curl(t, "https://api.example.test/v1/items"); code == 200 {
			t.Errorf("the ended session's proxy still forwards")
		}
	})
}

// cookies returns the browser's cookies for the console.
func cookies(ctx context.Context) ([]*network.Cookie, error) {
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{})
	return res.Cookies, err
}
