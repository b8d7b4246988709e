package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// run calls POST /v1/connector-operations/run with the session's API token.
func (e *env) run(t *testing.T, token string, body string, hdr ...string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.d.APIURL+"/v1/connector-operations/run", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := (&http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if bytes.Contains(raw, []byte(canary)) {
		t.Errorf("run response carries the credential")
	}
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("run response %q is not JSON: %v", redactCanary(string(raw)), err)
	}
	return resp.StatusCode, v
}

func TestRunEndpointThroughProxy(t *testing.T) {
	e := newEnv(t)
	t.Run("GET with query args", func(t *testing.T) {
		code, v := e.run(t, e.s.APIToken, `{"connector_fqn":"local://test/echo","tool":"testapi","operation":"items.list","args":{"q":"a b","limit":1000000,"tag":["x","y"]}}`)
		if code != 200 || v["status"] != "proxied" || fmt.Sprint(v["upstream_status"]) != "200" {
			t.Fatalf("run = %d %v", code, v)
		}
		got := e.up.last(t)
		if q, err := url.ParseQuery(got.RawQuery); err != nil || q.Get("q") != "a b" || q.Get("limit") != "1000000" ||
			strings.Join(q["tag"], ",") != "x,y" || len(q) != 3 {
			t.Errorf("upstream query = %q, want q=a b, limit=1000000, tag=x and tag=y", got.RawQuery)
		}
		if got.Header.Get("Authorization") != "Bearer "+canary {
			t.Errorf("upstream did not get the injected credential")
		}
		if _, ok := v["body"].(map[string]any); !ok {
			t.Errorf("body = %T, want the parsed JSON", v["body"])
		}
		waitAudit(t, e.home, map[string]any{"event": "connector.proxy.proxied", "operation": "items.list", "source": "run_endpoint"})
	})
	t.Run("POST with JSON body and template", func(t *testing.T) {
		code, v := e.run(t, e.s.APIToken, `{"connector_fqn":"local://test/echo","tool":"testapi","operation":"items.create","args":{"name":"n\"q","count":3}}`)
		if code != 200 || fmt.Sprint(v["upstream_status"]) != "201" {
			t.Fatalf("run = %d %v", code, v)
		}
		var body map[string]any
		if err := json.Unmarshal(e.up.last(t).Body, &body); err != nil || body["name"] != `n"q` || fmt.Sprint(body["count"]) != "3" {
			t.Errorf("upstream body = %s (%v)", e.up.last(t).Body, err)
		}
		code, v = e.run(t, e.s.APIToken, `{"connector_fqn":"local://test/echo","tool":"testapi","operation":"items.get","args":{"id":"a b"}}`)
		if code != 200 || e.up.last(t).Path != "/v1/items/a b" {
			t.Errorf("template filled from args = %d %v, upstream path %q", code, v, e.up.last(t).Path)
		}
		// A slash in a template value would change the path's shape: the
		// run endpoint refuses it before anything is sent.
		before := len(e.up.requests())
		code, v = e.run(t, e.s.APIToken, `{"connector_fqn":"local://test/echo","tool":"testapi","operation":"items.get","args":{"id":"a/../b"}}`)
		if ee, _ := v["error"].(map[string]any); code != 400 || ee["code"] != "invalid_args" || len(e.up.requests()) != before {
			t.Errorf("template value with a slash = %d %v, want 400 invalid_args and no upstream request", code, v)
		}
	})
	t.Run("refusals send nothing upstream", func(t *testing.T) {
		before := len(e.up.requests())
		for _, tc := range []struct {
			body string
			code int
			err  string
		}{
			{`{"connector_fqn":"local://test/echo","tool":"testapi","operation":"nope","args":{}}`, 404, "connector_operation_not_found"},
			{`{"connector_fqn":"local://test/echo","tool":"testapi","operation":"items.list","args":{"limit":1.5}}`, 400, "invalid_args"},
			{`{"connector_fqn":"local://test/echo","tool":"testapi","operation":"items.list","args":{"unknown":1}}`, 400, "invalid_args"},
			{`{"connector_fqn":"local://test/echo","tool":"testapi","operation":"items.create","args":{}}`, 400, "invalid_args"},
			{`{not json`, 400, "invalid_body"},
		} {
			code, v := e.run(t, e.s.APIToken, tc.body)
			ee, _ := v["error"].(map[string]any)
			if code != tc.code || ee == nil || ee["code"] != tc.err {
				t.Errorf("run(%s) = %d %v, want %d %s", tc.body, code, v, tc.code, tc.err)
			}
		}
		if n := len(e.up.requests()); n != before {
			t.Errorf("refused runs sent %d requests upstream", n-before)
		}
	})
	t.Run("session isolation", func(t *testing.T) {
		other := createSession(t, e.home)
		code, v := e.run(t, other.APIToken, `{"connector_fqn":"local://test/echo","tool":"testapi","operation":"items.list","args":{}}`,
			"X-Aileron-Session-Id", e.s.ID)
		if code != 403 {
			t.Errorf("a token of one session acting for another = %d %v", code, v)
		}
		code, _ = e.run(t, e.d.Admin, `{"connector_fqn":"local://test/echo","tool":"testapi","operation":"items.list","args":{}}`)
		if code != 401 {
			t.Errorf("the admin token on a sandbox endpoint = %d, want 401", code)
		}
	})
}

func TestApprovalHeldThenDecided(t *testing.T) {
	e := newEnv(t, "--approval-timeout", "3s")
	send := `{"connector_fqn":"local://test/echo","tool":"testapi","operation":"items.send","args":{"to":"bob@example.test"}}`
	type result struct {
		code int
		v    map[string]any
	}
	call := func() chan result {
		ch := make(chan result, 1)
		go func() {
			// e.run may fail the test from this goroutine: the deferred
			// send still reaches the waiting test instead of hanging it.
			r := result{code: -1}
			defer func() { ch <- r }()
			r.code, r.v = e.run(t, e.s.APIToken, send)
		}()
		return ch
	}
	pendingID := func() string {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			out := mustCLI(t, e.home, "", "approvals", "list", "--json")
			var list []map[string]any
			if err := json.Unmarshal([]byte(out), &list); err == nil {
				for _, p := range list {
					if p["state"] == "pending" {
						return fmt.Sprint(p["id"])
					}
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatal("no pending approval appeared")
		return ""
	}

	before := len(e.up.requests())
	ch := call()
	id := pendingID()
	if n := len(e.up.requests()); n != before {
		t.Fatalf("a held request reached the upstream before approval")
	}
	mustCLI(t, e.home, "", "approvals", "approve", id)
	r := <-ch
	if r.code != 200 || fmt.Sprint(r.v["upstream_status"]) != "200" {
		t.Fatalf("approved call = %d %v", r.code, r.v)
	}
	waitAudit(t, e.home, map[string]any{"event": "approval.decided", "decision": "approved"})

	ch = call()
	mustCLI(t, e.home, "", "approvals", "deny", pendingID())
	if r := <-ch; r.code != 403 || !strings.Contains(fmt.Sprint(r.v), "approval_denied") {
		t.Fatalf("denied call = %d %v", r.code, r.v)
	}

	ch = call()
	if r := <-ch; r.code != 403 || !strings.Contains(fmt.Sprint(r.v), "approval_timeout") {
		t.Fatalf("timed-out call = %d %v", r.code, r.v)
	}
	waitAudit(t, e.home, map[string]any{"event": "approval.requested", "operation": "items.send"})
}
