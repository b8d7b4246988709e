package credentials

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"
)

const (
	refreshCanary = "RT-" + canary
	clientCanary  = "CS-" + canary
)

// tokenServer is a real TLS OAuth2 token endpoint. It checks the client
// credentials and the refresh token, rotates the refresh token on the first
// refresh, and issues numbered access tokens.
type tokenServer struct {
	*httptest.Server
	refreshes atomic.Int32
	expiresIn atomic.Int32
	failWith  atomic.Value // string: a canned error body, or ""

	mu        sync.Mutex
	wantRT    string
	gotScopes []string
}

func newTokenServer(t *testing.T) *tokenServer {
	ts := &tokenServer{wantRT: refreshCanary}
	ts.expiresIn.Store(3600)
	ts.failWith.Store("")
	ts.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if fail := ts.failWith.Load().(string); fail != "" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = fmt.Fprint(w, fail)
			return
		}
		if err := r.ParseForm(); err != nil {
			http.Error(w, "bad form", 400)
			return
		}
		id, secret, ok := r.BasicAuth()
		if !ok {
			id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
		}
		ts.mu.Lock()
		defer ts.mu.Unlock()
		if r.PostForm.Get("grant_type") != "refresh_token" || id != "cid" || secret != clientCanary || r.PostForm.Get("refresh_token") != ts.wantRT {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = fmt.Fprintf(w, `{"error":"invalid_grant","error_description":"refresh token %s is not valid"}`, r.PostForm.Get("refresh_token"))
			return
		}
		n := ts.refreshes.Add(1)
		ts.gotScopes = strings.Fields(r.PostForm.Get("scope"))
		resp := map[string]any{
			"access_token": fmt.Sprintf("at-%d-%s", n, canary),
			"token_type":   "Bearer",
			"expires_in":   ts.expiresIn.Load(),
		}
		if n == 1 {
			resp["refresh_token"] = "rotated-" + refreshCanary
			ts.wantRT = "rotated-" + refreshCanary
		}
		_ = json.NewEncoder(w).Encode(resp)
	}))
	t.Cleanup(ts.Close)
	return ts
}

func oauthBinding(tokenURL string) Binding {
	return Binding{FQN: "google://acme/gmail", Kind: KindOAuth2, OAuth2: &OAuth2{
		TokenURL:     tokenURL,
		ClientID:     "cid",
		ClientSecret: stored(clientCanary),
		RefreshToken: stored(refreshCanary),
		Scopes:       []string{"mail.read", "mail.send"},
	}}
}

func applyOAuth(t *testing.T, inj *Injector) (string, *Scrubber, error) {
	t.Helper()
	req := httptest.NewRequest("GET", "https://gmail.example/v1/x", nil)
	req.Header.Set("Authorization", "Bearer sandbox-token")
	sc, err := inj.Apply(t.Context(), req)
	return req.Header.Get("Authorization"), sc, err
}

func TestOAuth2RefreshCachesAndRotates(t *testing.T) {
	ts := newTokenServer(t)
	r := resolverFor(t, ResolverConfig{HTTPClient: ts.Client()}, oauthBinding(ts.URL+"/token"))
	inj := mustLookup(t, r, "google://acme/gmail", KindOAuth2)

	// Concurrent first requests share one refresh.
	var wg sync.WaitGroup
	var bad atomic.Int32
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if h, _, err := applyOAuth(t, inj); err != nil || h != "Bearer at-1-"+canary {
				bad.Add(1)
			}
		}()
	}
	wg.Wait()
	if bad.Load() != 0 || ts.refreshes.Load() != 1 {
		t.Fatalf("%d bad applies, %d refreshes; want 0 and 1", bad.Load(), ts.refreshes.Load())
	}
	ts.mu.Lock()
	scopes := strings.Join(ts.gotScopes, " ")
	ts.mu.Unlock()
	if scopes != "mail.read mail.send" {
		t.Fatalf("scopes sent = %q", scopes)
	}
	h, sc, err := applyOAuth(t, inj)
	if err != nil || h != "Bearer at-1-"+canary || ts.refreshes.Load() != 1 {
		t.Fatalf("cached token: %q, %v, %d refreshes", h, err, ts.refreshes.Load())
	}
	if got := string(sc.Bytes([]byte("echo at-1-" + canary))); strings.Contains(got, canary) {
		t.Fatalf("scrubber does not know the access token: %q", got)
	}
}

func TestOAuth2RefreshesNearExpiry(t *testing.T) {
	ts := newTokenServer(t)
	// A 2s token is used for half its life (1s), then refreshed with the
	// rotated refresh token.
	ts.expiresIn.Store(2)
	r := resolverFor(t, ResolverConfig{HTTPClient: ts.Client()}, oauthBinding(ts.URL+"/token"))
	inj := mustLookup(t, r, "google://acme/gmail", KindOAuth2)
	start := time.Now()
	h, _, err := applyOAuth(t, inj)
	if err != nil || h != "Bearer at-1-"+canary {
		t.Fatalf("first Apply = %q, %v", h, err)
	}
	h, _, err = applyOAuth(t, inj)
	if time.Since(start) < 900*time.Millisecond && (err != nil || h != "Bearer at-1-"+canary || ts.refreshes.Load() != 1) {
		t.Fatalf("token not reused before expiry: %q, %v, %d refreshes", h, err, ts.refreshes.Load())
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, sc, err := applyOAuth(t, inj)
		if err != nil {
			t.Fatalf("Apply: %v", err)
		}
		if h == "Bearer at-2-"+canary {
			if d := time.Since(start); d < 900*time.Millisecond {
				t.Fatalf("refreshed after %s, want about 1s", d)
			}
			if got := string(sc.Bytes([]byte("at-2-" + canary))); strings.Contains(got, canary) {
				t.Fatal("scrubber does not know the refreshed token")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no refresh within 10s; last header %q", h)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := ts.refreshes.Load(); n != 2 {
		t.Fatalf("%d refreshes, want 2", n)
	}
}

func TestOAuth2ErrorsNeverContainSecrets(t *testing.T) {
	ts := newTokenServer(t)
	cases := []struct {
		name  string
		setup func(b *Binding, cfg *ResolverConfig)
		fail  string
		want  []string
	}{
		{"invalid grant", func(b *Binding, _ *ResolverConfig) { b.OAuth2.RefreshToken = stored("wrong-" + refreshCanary) }, "",
			[]string{"answered 400", `error "invalid_grant"`, "credential set google://acme/gmail"}},
		{"echoing body", func(*Binding, *ResolverConfig) {}, `{"error":"server_error","error_description":"` + refreshCanary + " " + clientCanary + `"}`,
			[]string{"answered 400", `"server_error"`}},
		{"non-json body", func(*Binding, *ResolverConfig) {}, "<html>" + refreshCanary + "</html>", []string{"answered 400"}},
		{"untrusted TLS", func(_ *Binding, cfg *ResolverConfig) { cfg.HTTPClient = &http.Client{Timeout: 5 * time.Second} }, "",
			[]string{"reaching https://127.0.0.1", "certificate"}},
		{"missing refresh env", func(b *Binding, _ *ResolverConfig) {
			b.OAuth2.RefreshToken = Source{Type: SourceEnv, Ref: "NO_SUCH_RT"}
		}, "",
			[]string{"NO_SUCH_RT is not set"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts.failWith.Store(tc.fail)
			defer ts.failWith.Store("")
			b := oauthBinding(ts.URL + "/token?tenant=x")
			cfg := ResolverConfig{HTTPClient: ts.Client(), Getenv: func(string) string { return "" }}
			tc.setup(&b, &cfg)
			inj := mustLookup(t, resolverFor(t, cfg, b), b.FQN, b.Kind)
			h, sc, err := applyOAuth(t, inj)
			if err == nil || sc != nil {
				t.Fatalf("Apply = %q, %v, %v; want an error", h, sc, err)
			}
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("error %v does not match ErrUnavailable", err)
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			for _, bad := range []string{canary, "tenant=x"} {
				if strings.Contains(msg, bad) {
					t.Fatalf("error %q contains %q", msg, bad)
				}
			}
		})
	}
}

// countingTS is an oauth2.TokenSource returning a fixed token.
type countingTS struct {
	calls  atomic.Int32
	expiry time.Time
}

func (c *countingTS) Token() (*oauth2.Token, error) {
	c.calls.Add(1)
	return &oauth2.Token{AccessToken: "at-" + canary, Expiry: c.expiry}, nil
}

func TestOAuth2FreshTokenFastPath(t *testing.T) {
	src := &countingTS{expiry: time.Now().Add(time.Hour)}
	o := &oauthSource{ts: oauth2.ReuseTokenSourceWithExpiry(nil, src, TokenExpiryDelta)}
	if v, err := o.token(t.Context()); err != nil || v.Reveal() != "at-"+canary {
		t.Fatalf("first token: %v", err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := o.token(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 || src.calls.Load() != 1 {
		t.Errorf("cached token: %.0f allocs per call, %d source calls; want 0 and 1 (no goroutine, no refresh)", allocs, src.calls.Load())
	}

	// Within TokenExpiryDelta of expiry the slow path runs again.
	src.expiry = time.Now().Add(TokenExpiryDelta / 2)
	o = &oauthSource{ts: oauth2.ReuseTokenSourceWithExpiry(nil, src, TokenExpiryDelta)}
	for range 3 {
		if _, err := o.token(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if n := src.calls.Load(); n != 4 {
		t.Errorf("a token near expiry was served from the cache: %d source calls, want 4", n)
	}
}
