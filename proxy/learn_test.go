package proxy

import (
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/credentials"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/internal/testkit"
	"github.com/aileron-dev/aileron-proxy/learn"
	"github.com/aileron-dev/aileron-proxy/session"
)

const (
	// learnHost is the learn session's only learned host; it has no
	// operation of the test connector.
	learnHost = "learn.example.test"
	// vendorKeyHeader is the header of a credential binding of another
	// connector: a learned request must not carry it either.
	vendorKeyHeader = "X-Vendor-Key"
	vendorFQN       = "github://acme/aileron-connector-vendor"
)

// learnEnv is an env whose session learns learnHost, with a real learn
// store and one credential binding: an api_key of another connector placed
// in vendorKeyHeader. No binding is placed in Authorization, so the strip of
// the client's Authorization is the learn path's own, not a binding's.
func learnEnv(t *testing.T, more ...func(*Config)) (*env, *learn.Store) {
	t.Helper()
	store, err := learn.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	file := &credentials.File{}
	file.Set(credentials.Binding{FQN: vendorFQN, Kind: credentials.Kind("api_key"),
		Source:    credentials.Source{Type: credentials.SourceStored, Value: credentials.NewValue("vendor-" + testToken)},
		Placement: credentials.Placement{Header: vendorKeyHeader}})
	resolver, err := credentials.NewResolver(credentials.ResolverConfig{File: file})
	if err != nil {
		t.Fatalf("NewResolver: %v", err)
	}
	if got := resolver.Headers(); len(got) != 1 || got[0] != vendorKeyHeader {
		t.Fatalf("resolver headers = %v, want only %s", got, vendorKeyHeader)
	}
	e := newEnv(t, func(c *Config) {
		c.Learn = store
		c.Credentials = func() CredentialSource { return resolver }
		c.Resolve[learnHost+":443"] = c.Resolve[apiHost+":443"]
		for _, f := range more {
			f(c)
		}
	})
	sess, secrets, err := e.sessions.Create(session.CreateOptions{Snapshot: e.srv.cfg.Policy(), TTL: time.Hour, Learn: []string{learnHost}})
	if err != nil {
		t.Fatalf("creating the learn session: %v", err)
	}
	if err := store.Start(learn.Header{SessionID: sess.ID, Hosts: sess.Learn, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close(sess.ID) })
	e.sess, e.secret = sess, secrets.ProxySecret
	e.caPool = x509.NewCertPool()
	e.caPool.AppendCertsFromPEM(sess.CAPEM)
	e.caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(e.caFile, sess.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return e, store
}

// learnedLines returns the requests of the session's learn record.
func learnedLines(t *testing.T, e *env, store *learn.Store) []learn.Request {
	t.Helper()
	rec, err := store.Read(e.sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	return rec.Requests
}

// A learn session learns only the hosts its patterns name. A request that
// no operation matches on a connector host outside the patterns (a host the
// session intercepts, so the session CA issues its leaf and the request
// reaches the handler) is refused like in any session: not forwarded, not
// recorded, not audited as learned.
func TestLearnSessionRefusesUnmatchedRequestOutsideLearnHosts(t *testing.T) {
	e, store := learnEnv(t)
	c := e.client(false)

	req, _ := http.NewRequest(http.MethodGet, "https://"+apiHost+"/not-an-operation/17?state=open", nil)
	resp, err := c.Do(req)
	wantRefusal(t, resp, err, http.StatusForbidden, contract.CodeOperationNotAllowed.String())
	e.expectNothingSeen(t)
	if got := learnedLines(t, e, store); len(got) != 0 {
		t.Fatalf("the learn record holds %d requests for %s, which the session does not learn: %+v", len(got), apiHost, got)
	}
	ev := e.audit.WaitFor(t, "the refusal", func(ev audit.Event) bool { return ev.Host == apiHost+":443" && ev.Path != "" })
	if ev.Event == audit.EventLearned || ev.Decision != contract.DecisionDenied {
		t.Fatalf("audit event = %s %s, want a denial", ev.Event, ev.Decision)
	}

	// The same session does learn its own host, so the refusal above is
	// the host check and not a learn mode that is off.
	resp, err = c.Get("https://" + learnHost + "/not-an-operation/17")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("learned GET = %d, want 200", resp.StatusCode)
	}
	if s := e.expectSeen(t); s.RequestURI != "/not-an-operation/17" {
		t.Fatalf("upstream saw %s, want /not-an-operation/17", s.RequestURI)
	}

	// A request inside the learned host's tunnel that names the connector
	// host is refused too, not learned.
	conn, br := e.rawTunnel(t, learnHost+":443")
	defer conn.Close()
	resp, _ = rawRequest(t, conn, br, "GET /not-an-operation HTTP/1.1\r\nHost: "+apiHost+"\r\n\r\n")
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("a request naming %s in the tunnel of %s = %d, want 421", apiHost, learnHost, resp.StatusCode)
	}
	e.expectNothingSeen(t)
	if got := learnedLines(t, e, store); len(got) != 1 {
		t.Fatalf("the learn record holds %d requests, want only the learned host's one: %+v", len(got), got)
	}
}

// A learned request is forwarded without any credential: the client's
// Authorization and Proxy-Authorization and the header of every credential
// binding are removed, other headers pass, and the record notes only the
// kind of credential the client sent.
func TestLearnedRequestStripsCredentialHeaders(t *testing.T) {
	e, store := learnEnv(t)
	c := e.client(false)

	req, _ := http.NewRequest(http.MethodGet, "https://"+learnHost+"/v1/items/17?state=open", nil)
	req.Header.Set("Authorization", clientAuth)
	req.Header.Set("Proxy-Authorization", "Basic Y2xpZW50OnByb3h5")
	req.Header.Set(vendorKeyHeader, "client-vendor-key")
	req.Header.Set("X-Kept", "kept")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("learned GET = %d, want 200", resp.StatusCode)
	}
	s := e.expectSeen(t)
	for _, h := range []string{"Authorization", "Proxy-Authorization", vendorKeyHeader} {
		if v, ok := s.Header[http.CanonicalHeaderKey(h)]; ok {
			t.Errorf("the upstream of a learned request received %s: %q", h, v)
		}
	}
	if got := s.Header.Get("X-Kept"); got != "kept" {
		t.Errorf("X-Kept = %q, want it forwarded", got)
	}
	ev := e.audit.WaitFor(t, "the learned event", func(ev audit.Event) bool { return ev.Event == audit.EventLearned })
	if ev.Path != "/v1/items/{number}" {
		t.Errorf("learned event path = %q, want the masked /v1/items/{number}", ev.Path)
	}
	got := learnedLines(t, e, store)
	if len(got) != 1 || got[0].Path != "/v1/items/17" || got[0].Auth.Kind != "bearer" {
		t.Fatalf("learn record = %+v, want one GET /v1/items/17 noting a bearer credential", got)
	}
}

// TestLearnedRequestNeedsTheAuditLog: a learned request is forwarded only
// when its audit line can be written, like every forwarded request; while
// the log is unavailable it is refused with 503 audit_unavailable and
// neither forwarded nor recorded.
func TestLearnedRequestNeedsTheAuditLog(t *testing.T) {
	fa := &failingAudit{Recorder: testkit.NewRecorder()}
	e, store := learnEnv(t, func(c *Config) { c.Audit = fa })
	fa.down.Store(true)
	resp, err := e.client(false).Get("https://" + learnHost + "/v1/items/17")
	wantRefusal(t, resp, err, http.StatusServiceUnavailable, contract.CodeAuditUnavailable.String())
	e.expectNothingSeen(t)
	if got := learnedLines(t, e, store); len(got) != 0 {
		t.Errorf("learn record = %+v, want nothing while the audit log is unavailable", got)
	}
	fa.down.Store(false)
	resp, err = e.client(false).Get("https://" + learnHost + "/v1/items/17")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("learned GET after the log recovered = %d, want 200", resp.StatusCode)
	}
}
