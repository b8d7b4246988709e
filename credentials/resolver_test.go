package credentials

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

func resolverFor(t *testing.T, cfg ResolverConfig, bs ...Binding) *Resolver {
	t.Helper()
	f := &File{}
	for _, b := range bs {
		if err := b.Validate(); err != nil {
			t.Fatalf("Validate(%s): %v", b.FQN, err)
		}
		f.Set(b)
	}
	cfg.File = f
	r, err := NewResolver(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustLookup(t *testing.T, r *Resolver, fqn string, k Kind) *Injector {
	t.Helper()
	i, ok := r.Lookup(fqn, k)
	if !ok {
		t.Fatalf("Lookup(%q, %q) found nothing", fqn, k)
	}
	return i
}

// echoServer reflects the request's Authorization, custom headers and query
// in response headers and body, as a careless upstream might.
func echoServer(t *testing.T) *httptest.Server {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, vs := range r.Header {
			for _, v := range vs {
				w.Header().Add("X-Echo-"+k, v)
				_, _ = io.WriteString(w, k+": "+v+"\n")
			}
		}
		w.Header().Set("X-Echo-Query", r.URL.RawQuery)
		_, _ = io.WriteString(w, "query: "+r.URL.RawQuery+"\n")
		_, _ = io.WriteString(w, "b64: "+base64.StdEncoding.EncodeToString([]byte(r.Header.Get("Authorization")))+"\n")
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestApplyPlacements(t *testing.T) {
	const fqn = "github://acme/x"
	secret := "tok_" + canary + "/+="
	srv := echoServer(t)
	cases := []struct {
		name       string
		b          Binding
		header     string // header that must carry want
		want       string
		wantQuery  url.Values
		clientAuth bool // Authorization must be replaced
	}{
		{"default bearer", Binding{Kind: KindBearer}, "Authorization", "Bearer " + secret, nil, true},
		{"format", Binding{Kind: KindBearer, Placement: Placement{Format: "token {secret}"}}, "Authorization", "token " + secret, nil, true},
		{"api key header", Binding{Kind: KindAPIKey, Placement: Placement{Header: "x-api-key"}}, "X-Api-Key", secret, nil, false},
		{"header format", Binding{Kind: KindAPIKey, Placement: Placement{Header: "X-Auth", Format: "Key={secret}; v=1"}}, "X-Auth", "Key=" + secret + "; v=1", nil, false},
		{"query", Binding{Kind: KindAPIKey, Placement: Placement{Query: "key"}}, "", "", url.Values{"key": {secret}, "q": {"a b"}, "z": {"1"}}, false},
		{"basic", Binding{Kind: KindBasic, Username: "alice"}, "Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:"+secret)), nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.b
			b.FQN = fqn
			b.Source = stored(secret)
			inj := mustLookup(t, resolverFor(t, ResolverConfig{}, b), fqn, b.Kind)
			req, err := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/v1/x?q=a+b&key=client-supplied&z=1", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer client-token")
			req.Header.Set(b.Placement.Header+"-Ignored", "x")
			sc, err := inj.Apply(t.Context(), req)
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if tc.header != "" {
				if got := req.Header.Values(tc.header); len(got) != 1 || got[0] != tc.want {
					t.Fatalf("%s = %q, want [%q]", tc.header, got, tc.want)
				}
			}
			if tc.clientAuth && strings.Contains(strings.Join(req.Header.Values("Authorization"), ","), "client-token") {
				t.Fatal("client Authorization was not removed")
			}
			if tc.wantQuery != nil {
				if got := req.URL.Query(); got.Encode() != tc.wantQuery.Encode() {
					t.Fatalf("query = %v, want %v", got, tc.wantQuery)
				}
				if !strings.HasPrefix(req.URL.RawQuery, "q=a+b&z=1&") {
					t.Fatalf("other parameters were rewritten: %q", req.URL.RawQuery)
				}
			}
			// Send it to a real TLS upstream that echoes everything back,
			// then scrub the response as the proxy would.
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			sc.Header(resp.Header)
			body, err := io.ReadAll(sc.Reader(resp.Body))
			if err != nil {
				t.Fatal(err)
			}
			all := string(body) + headerDump(resp.Header)
			for _, f := range append(testkit.SecretForms(secret), testkit.SecretForms(tc.want)...) {
				if f != "" && strings.Contains(all, f) {
					t.Fatalf("response still carries %q:\n%s", f, all)
				}
			}
			if !strings.Contains(all, "*****") {
				t.Fatalf("expected masked echoes in:\n%s", all)
			}
		})
	}
}

func headerDump(h http.Header) string {
	var b strings.Builder
	_ = h.Write(&b)
	return b.String()
}

func TestApplyErrorsNeverContainSecrets(t *testing.T) {
	const fqn = "github://acme/x"
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	env := map[string]string{"SHORT": "abc", "NL": "ab\ncd" + canary, "CTL": "ab\x01cd" + canary}
	canaryFile := write("canary", canary)
	cases := []struct {
		name string
		src  Source
		want string
	}{
		{"env unset", Source{Type: SourceEnv, Ref: "MISSING_TOKEN"}, "environment variable MISSING_TOKEN is not set"},
		{"env short", Source{Type: SourceEnv, Ref: "SHORT"}, "shorter than 4 bytes"},
		{"env newline", Source{Type: SourceEnv, Ref: "NL"}, "line break"},
		{"env control character", Source{Type: SourceEnv, Ref: "CTL"}, "not allowed in a header value"},
		{"file missing", Source{Type: SourceFile, Ref: filepath.Join(dir, "nope")}, "no such file"},
		{"file multi-line", Source{Type: SourceFile, Ref: write("ml", canary+"\n"+canary+"\n")}, "line break"},
		{"exec fails", Source{Type: SourceExec, Ref: "cat '" + canaryFile + "'; cat '" + canaryFile + "' >&2; exit 3"}, "exited 3"},
		{"exec silent", Source{Type: SourceExec, Ref: "true"}, "printed nothing"},
		{"exec huge", Source{Type: SourceExec, Ref: "head -c 200000 /dev/zero"}, "more than 65536 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := Binding{FQN: fqn, Kind: KindBearer, Source: tc.src}
			inj := mustLookup(t, resolverFor(t, ResolverConfig{Getenv: func(k string) string { return env[k] }}, b), fqn, KindBearer)
			req := httptest.NewRequest("GET", "https://api.example/x", nil)
			req.Header.Set("Authorization", "Bearer client")
			sc, err := inj.Apply(t.Context(), req)
			if err == nil {
				t.Fatalf("Apply succeeded, want error containing %q", tc.want)
			}
			if sc != nil {
				t.Fatal("Apply returned a scrubber with its error")
			}
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("errors.Is(%v, ErrUnavailable) = false", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) || !strings.Contains(msg, fqn) {
				t.Fatalf("error %q, want it to name %s and contain %q", msg, fqn, tc.want)
			}
			if strings.Contains(msg, canary) {
				t.Fatalf("error %q contains the secret", msg)
			}
		})
	}
}

func TestApplyTrimsAndReadsSources(t *testing.T) {
	const fqn = "github://acme/x"
	p := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(p, []byte("file-token-1\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]Source{
		"file": {Type: SourceFile, Ref: p},
		"exec": {Type: SourceExec, Ref: "printf 'file-token-1\\n'"},
		"env":  {Type: SourceEnv, Ref: "TOK"},
	} {
		t.Run(name, func(t *testing.T) {
			r := resolverFor(t, ResolverConfig{Getenv: func(string) string { return "file-token-1\n" }}, Binding{FQN: fqn, Kind: KindBearer, Source: src})
			req := httptest.NewRequest("GET", "https://api.example/x", nil)
			if _, err := mustLookup(t, r, fqn, KindBearer).Apply(t.Context(), req); err != nil {
				t.Fatal(err)
			}
			if got := req.Header.Get("Authorization"); got != "Bearer file-token-1" {
				t.Fatalf("Authorization = %q", got)
			}
		})
	}
}

func TestExecSourceCachesAndTimesOut(t *testing.T) {
	const fqn = "github://acme/x"
	dir := t.TempDir()
	counter := filepath.Join(dir, "runs")
	cmd := "echo run >> '" + counter + "'; sleep 0.3; echo exec-token-42"
	runs := func() int {
		data, _ := os.ReadFile(counter)
		return strings.Count(string(data), "run")
	}
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r := resolverFor(t, ResolverConfig{Now: clock, ExecCacheTTL: time.Minute}, Binding{FQN: fqn, Kind: KindBearer, Source: Source{Type: SourceExec, Ref: cmd}})
	inj := mustLookup(t, r, fqn, KindBearer)

	// Concurrent first requests run the command once.
	var wg sync.WaitGroup
	var failures atomic.Int32
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := httptest.NewRequest("GET", "https://api.example/x", nil)
			if _, err := inj.Apply(t.Context(), req); err != nil || req.Header.Get("Authorization") != "Bearer exec-token-42" {
				failures.Add(1)
			}
		}()
	}
	wg.Wait()
	if failures.Load() != 0 || runs() != 1 {
		t.Fatalf("20 concurrent Applies: %d failures, %d runs; want 0 and 1", failures.Load(), runs())
	}
	apply := func() {
		t.Helper()
		if _, err := inj.Apply(t.Context(), httptest.NewRequest("GET", "https://api.example/x", nil)); err != nil {
			t.Fatal(err)
		}
	}
	apply()
	if runs() != 1 {
		t.Fatalf("cached output not reused: %d runs", runs())
	}
	mu.Lock()
	now = now.Add(61 * time.Second)
	mu.Unlock()
	apply()
	if runs() != 2 {
		t.Fatalf("after the TTL: %d runs, want 2", runs())
	}

	// Timeout: the whole process group is killed and the error says so.
	slow := resolverFor(t, ResolverConfig{ExecTimeout: 200 * time.Millisecond}, Binding{FQN: fqn, Kind: KindBearer, Source: Source{Type: SourceExec, Ref: "sleep 30 | cat; echo late"}})
	start := time.Now()
	_, err := mustLookup(t, slow, fqn, KindBearer).Apply(t.Context(), httptest.NewRequest("GET", "https://api.example/x", nil))
	if err == nil || !strings.Contains(err.Error(), "timed out after 200ms") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Apply = %v, want a timeout matching context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("timeout took %s", d)
	}

	// A cancelled request stops waiting at once.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	blocked := resolverFor(t, ResolverConfig{}, Binding{FQN: fqn, Kind: KindBearer, Source: Source{Type: SourceExec, Ref: "sleep 1; echo tok-abcd"}})
	if _, err := mustLookup(t, blocked, fqn, KindBearer).Apply(ctx, httptest.NewRequest("GET", "https://api.example/x", nil)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply(cancelled) = %v, want context.Canceled", err)
	}
}

func TestResolverLookupAndPrevious(t *testing.T) {
	a := Binding{FQN: "github://acme/a", Kind: KindBearer, Source: stored("token-a-1234")}
	b := Binding{FQN: "github://acme/b", Kind: KindAPIKey, Source: stored("token-b-1234"), Placement: Placement{Query: "k"}}
	r1 := resolverFor(t, ResolverConfig{}, a, b)
	if r1.Len() != 2 {
		t.Fatalf("Len() = %d", r1.Len())
	}
	if _, ok := r1.Lookup("github://acme/a", KindAPIKey); ok {
		t.Fatal("Lookup matched the wrong kind")
	}
	if _, ok := r1.Lookup("github://acme/c", KindBearer); ok {
		t.Fatal("Lookup matched an unknown connector")
	}
	var nilR *Resolver
	if _, ok := nilR.Lookup("github://acme/a", KindBearer); ok {
		t.Fatal("nil resolver found something")
	}
	b2 := b
	b2.Source = stored("token-b-5678")
	r2 := resolverFor(t, ResolverConfig{Previous: r1}, a, b2)
	if mustLookup(t, r2, a.FQN, a.Kind) != mustLookup(t, r1, a.FQN, a.Kind) {
		t.Error("unchanged binding was not carried over")
	}
	if mustLookup(t, r2, b.FQN, b.Kind) == mustLookup(t, r1, b.FQN, b.Kind) {
		t.Error("changed binding was carried over")
	}
	r3 := resolverFor(t, ResolverConfig{Previous: r2, ExecTimeout: time.Second}, a)
	if mustLookup(t, r3, a.FQN, a.Kind) == mustLookup(t, r2, a.FQN, a.Kind) {
		t.Error("binding carried over across different settings")
	}
	if _, err := NewResolver(ResolverConfig{}); err == nil {
		t.Error("NewResolver without File succeeded")
	}
	// The resolver is a snapshot: later edits of the File do not reach it.
	f := &File{}
	f.Set(a)
	r4, err := NewResolver(ResolverConfig{File: f})
	if err != nil {
		t.Fatal(err)
	}
	f.Remove(a.FQN, a.Kind)
	if _, ok := r4.Lookup(a.FQN, a.Kind); !ok {
		t.Error("editing the File changed the resolver")
	}
}

func TestResolverHeaders(t *testing.T) {
	a := Binding{FQN: "github://acme/a", Kind: KindBearer, Source: stored("token-a-1234")}
	b := Binding{FQN: "github://acme/b", Kind: KindAPIKey, Source: stored("token-b-1234"), Placement: Placement{Header: "x-api-key"}}
	c := Binding{FQN: "github://acme/c", Kind: KindAPIKey, Source: stored("token-c-1234"), Placement: Placement{Query: "k"}}
	r := resolverFor(t, ResolverConfig{}, a, b, c)
	if got := strings.Join(r.Headers(), ","); got != "Authorization,X-Api-Key" {
		t.Errorf("Headers() = %q, want Authorization,X-Api-Key", got)
	}
	var nilR *Resolver
	if nilR.Headers() != nil {
		t.Error("nil resolver has headers")
	}
}
