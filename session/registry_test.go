package session

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/testkit/specs"
)

const specA = `{
  "schema_version": "aileron.connector.v1",
  "connector": {"fqn": "github://acme/conn-a"},
  "tools": [{"name": "a", "operations": [
    {"name": "get", "method": "GET", "path": "/x", "hosts": ["api.a.example", "api.a.example:8443"]},
    {"name": "ip", "method": "GET", "path": "/y", "hosts": ["127.0.0.1:9443"]}
  ]}]
}`

const specB = `{
  "schema_version": "aileron.connector.v1",
  "connector": {"fqn": "github://acme/conn-b"},
  "tools": [{"name": "b", "operations": [
    {"name": "get", "method": "GET", "path": "/x", "hosts": ["api.b.example"]}
  ]}]
}`

// clock is a manual clock safe for concurrent use.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type endLog struct {
	mu   sync.Mutex
	ends []string
}

func (l *endLog) onEnd(s *Session, e Ending) {
	r := e.Reason
	l.mu.Lock()
	l.ends = append(l.ends, s.ID+" "+r.String())
	l.mu.Unlock()
}

func (l *endLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ends)
}

var idPattern = regexp.MustCompile(`^ses_[0-9a-f]{24}$`)

func TestCreateDefaultsToAllConnectors(t *testing.T) {
	clk := &clock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	r := NewRegistry(RegistryConfig{Now: clk.Now})
	s, sec, err := r.Create(CreateOptions{Snapshot: specs.Compile(t, specA, specB)})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if !idPattern.MatchString(s.ID) {
		t.Errorf("ID = %q, want ses_ + 24 hex", s.ID)
	}
	if want := []string{"github://acme/conn-a", "github://acme/conn-b"}; !slices.Equal(s.Connectors, want) {
		t.Errorf("Connectors = %v, want %v", s.Connectors, want)
	}
	if got := s.Scope.FQNs(); !slices.Equal(got, s.Connectors) {
		t.Errorf("Scope.FQNs() = %v, want %v", got, s.Connectors)
	}
	wantHosts := []string{"127.0.0.1:9443", "api.a.example:443", "api.a.example:8443", "api.b.example:443"}
	if !slices.Equal(s.Hosts, wantHosts) {
		t.Errorf("Hosts = %v, want %v", s.Hosts, wantHosts)
	}
	if got, want := s.ExpiresAt, clk.Now().Add(DefaultTTL); !got.Equal(want) {
		t.Errorf("ExpiresAt = %v, want %v", got, want)
	}
	for _, secret := range []string{sec.ProxySecret, sec.APIToken} {
		b, err := base64.RawURLEncoding.DecodeString(secret)
		if err != nil || len(b) != 32 {
			t.Errorf("secret %q: decoded %d bytes (err %v), want 32 base64url bytes", secret, len(b), err)
		}
	}
	if sec.ProxySecret == sec.APIToken {
		t.Error("proxy secret equals API token")
	}
	cert := s.CA.Certificate()
	if !slices.Equal(cert.PermittedDNSDomains, []string{"api.a.example", "api.b.example"}) {
		t.Errorf("CA PermittedDNSDomains = %v", cert.PermittedDNSDomains)
	}
	if len(cert.PermittedIPRanges) != 1 || !cert.PermittedIPRanges[0].IP.Equal([]byte{127, 0, 0, 1}) {
		t.Errorf("CA PermittedIPRanges = %v, want 127.0.0.1", cert.PermittedIPRanges)
	}
	if !strings.Contains(string(s.CAPEM), "BEGIN CERTIFICATE") {
		t.Errorf("CAPEM is not PEM: %q", s.CAPEM)
	}
	if cert.NotAfter.Before(s.ExpiresAt) {
		t.Errorf("CA NotAfter %v is before the session's expiry %v", cert.NotAfter, s.ExpiresAt)
	}
	if _, err := s.CA.Leaf("api.b.example"); err != nil {
		t.Errorf("Leaf(api.b.example): %v", err)
	}
}

func TestCreateOptions(t *testing.T) {
	snap := specs.Compile(t, specA, specB)
	tests := []struct {
		name       string
		opts       CreateOptions
		wantErr    string // substring; empty means success
		wantFQNs   []string
		wantTTL    time.Duration
		wantOption bool
	}{
		{name: "subset", opts: CreateOptions{Connectors: []string{"github://acme/conn-b"}, Snapshot: snap},
			wantFQNs: []string{"github://acme/conn-b"}, wantTTL: DefaultTTL},
		{name: "duplicates collapse", opts: CreateOptions{Connectors: []string{"github://acme/conn-b", "github://acme/conn-b"}, TTL: time.Hour, Snapshot: snap},
			wantFQNs: []string{"github://acme/conn-b"}, wantTTL: time.Hour},
		{name: "max ttl", opts: CreateOptions{TTL: MaxTTL, Snapshot: snap},
			wantFQNs: []string{"github://acme/conn-a", "github://acme/conn-b"}, wantTTL: MaxTTL},
		{name: "unknown fqn lists available", opts: CreateOptions{Connectors: []string{"github://acme/nope", "github://acme/conn-a"}, Snapshot: snap},
			wantErr: `unknown connector "github://acme/nope" (installed: github://acme/conn-a, github://acme/conn-b)`, wantOption: true},
		{name: "ttl too long", opts: CreateOptions{TTL: MaxTTL + time.Second, Snapshot: snap}, wantErr: "exceeds the maximum", wantOption: true},
		{name: "negative ttl", opts: CreateOptions{TTL: -time.Second, Snapshot: snap}, wantErr: "negative", wantOption: true},
		{name: "no snapshot", opts: CreateOptions{}, wantErr: "no policy snapshot"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := &clock{t: time.Unix(1e9, 0)}
			r := NewRegistry(RegistryConfig{Now: clk.Now})
			s, _, err := r.Create(tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Create error = %v, want one containing %q", err, tc.wantErr)
				}
				if got := errors.Is(err, ErrInvalidOptions); got != tc.wantOption {
					t.Errorf("errors.Is(err, ErrInvalidOptions) = %v, want %v", got, tc.wantOption)
				}
				if len(r.List()) != 0 {
					t.Error("a failed Create left a session behind")
				}
				return
			}
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			if !slices.Equal(s.Connectors, tc.wantFQNs) {
				t.Errorf("Connectors = %v, want %v", s.Connectors, tc.wantFQNs)
			}
			if got := s.ExpiresAt.Sub(s.CreatedAt); got != tc.wantTTL {
				t.Errorf("lifetime = %v, want %v", got, tc.wantTTL)
			}
		})
	}
}

func TestUnknownConnectorsError(t *testing.T) {
	r := NewRegistry(RegistryConfig{})
	_, _, err := r.Create(CreateOptions{Connectors: []string{"github://x/y"}, Snapshot: specs.Compile(t, specA)})
	var uce *UnknownConnectorsError
	if !errors.As(err, &uce) {
		t.Fatalf("error %v is not an *UnknownConnectorsError", err)
	}
	if !slices.Equal(uce.Unknown, []string{"github://x/y"}) || !slices.Equal(uce.Available, []string{"github://acme/conn-a"}) {
		t.Errorf("Unknown = %v, Available = %v", uce.Unknown, uce.Available)
	}
}

func TestCreateWithNoConnectorsInstalled(t *testing.T) {
	r := NewRegistry(RegistryConfig{})
	s, _, err := r.Create(CreateOptions{Snapshot: specs.Compile(t)})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if len(s.Connectors) != 0 || len(s.Hosts) != 0 {
		t.Errorf("Connectors = %v, Hosts = %v, want none", s.Connectors, s.Hosts)
	}
	if _, err := s.CA.Leaf("api.a.example"); err == nil {
		t.Error("an empty session's CA issued a leaf")
	}
}

func TestAuthenticate(t *testing.T) {
	r := NewRegistry(RegistryConfig{})
	snap := specs.Compile(t, specA)
	s1, sec1, err := r.Create(CreateOptions{Snapshot: snap})
	if err != nil {
		t.Fatal(err)
	}
	s2, sec2, err := r.Create(CreateOptions{Snapshot: snap})
	if err != nil {
		t.Fatal(err)
	}
	if s1.ID == s2.ID || sec1.ProxySecret == sec2.ProxySecret || sec1.APIToken == sec2.APIToken {
		t.Fatal("two sessions share an ID or a secret")
	}

	proxyTests := []struct {
		name, id, secret string
		want             *Session
		wantErr          error
	}{
		{"own secret", s1.ID, sec1.ProxySecret, s1, nil},
		{"second session", s2.ID, sec2.ProxySecret, s2, nil},
		{"other session's secret", s1.ID, sec2.ProxySecret, nil, ErrBadCredential},
		{"api token is not the proxy secret", s1.ID, sec1.APIToken, nil, ErrBadCredential},
		{"empty secret", s1.ID, "", nil, ErrBadCredential},
		{"unknown id", "ses_000000000000000000000000", sec1.ProxySecret, nil, ErrUnknownSession},
	}
	for _, tc := range proxyTests {
		t.Run("proxy/"+tc.name, func(t *testing.T) {
			got, err := r.AuthenticateProxy(tc.id, tc.secret)
			if !errors.Is(err, tc.wantErr) || got != tc.want {
				t.Errorf("AuthenticateProxy(%q) = %v, %v; want %v, %v", tc.name, got, err, tc.want, tc.wantErr)
			}
		})
	}
	apiTests := []struct {
		name, token string
		want        *Session
		wantErr     error
	}{
		{"token 1", sec1.APIToken, s1, nil},
		{"token 2", sec2.APIToken, s2, nil},
		{"proxy secret is not a token", sec1.ProxySecret, nil, ErrBadCredential},
		{"empty", "", nil, ErrBadCredential},
		{"garbage", "nope", nil, ErrBadCredential},
	}
	for _, tc := range apiTests {
		t.Run("api/"+tc.name, func(t *testing.T) {
			got, err := r.AuthenticateAPI(tc.token)
			if !errors.Is(err, tc.wantErr) || got != tc.want {
				t.Errorf("AuthenticateAPI(%q) = %v, %v; want %v, %v", tc.name, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestExpiry(t *testing.T) {
	clk := &clock{t: time.Unix(2e9, 0)}
	log := &endLog{}
	r := NewRegistry(RegistryConfig{Now: clk.Now, OnEnd: log.onEnd, RetainEnded: time.Hour})
	snap := specs.Compile(t, specA)
	s, sec, err := r.Create(CreateOptions{Snapshot: snap, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Minute - time.Nanosecond)
	if _, err := r.AuthenticateProxy(s.ID, sec.ProxySecret); err != nil {
		t.Fatalf("just before expiry: AuthenticateProxy: %v", err)
	}
	clk.Add(time.Nanosecond)
	if _, err := r.AuthenticateProxy(s.ID, sec.ProxySecret); !errors.Is(err, ErrSessionExpired) {
		t.Errorf("AuthenticateProxy after expiry: %v, want ErrSessionExpired", err)
	}
	if _, err := r.AuthenticateProxy(s.ID, "wrong"); !errors.Is(err, ErrBadCredential) {
		t.Errorf("AuthenticateProxy with a wrong secret after expiry: %v, want ErrBadCredential (state is not revealed)", err)
	}
	if _, err := r.AuthenticateAPI(sec.APIToken); !errors.Is(err, ErrSessionExpired) {
		t.Errorf("AuthenticateAPI after expiry: %v, want ErrSessionExpired", err)
	}
	if _, ok := r.Get(s.ID); ok {
		t.Error("Get returned an expired session")
	}
	if _, err := r.Lookup(s.ID); !errors.Is(err, ErrSessionExpired) {
		t.Errorf("Lookup: %v, want ErrSessionExpired", err)
	}
	if got := r.List(); len(got) != 0 {
		t.Errorf("List = %v, want none", got)
	}
	if err := r.End(s.ID); !errors.Is(err, ErrSessionExpired) {
		t.Errorf("End of an expired session: %v, want ErrSessionExpired", err)
	}
	if got, want := log.get(), []string{s.ID + " expired"}; !slices.Equal(got, want) {
		t.Errorf("OnEnd calls = %v, want %v (exactly once)", got, want)
	}

	// After RetainEnded, the next Create prunes it.
	clk.Add(time.Hour)
	if _, _, err := r.Create(CreateOptions{Snapshot: snap}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Lookup(s.ID); !errors.Is(err, ErrUnknownSession) {
		t.Errorf("Lookup after pruning: %v, want ErrUnknownSession", err)
	}
}

func TestExpiryNotifiedByPrune(t *testing.T) {
	clk := &clock{t: time.Unix(2e9, 0)}
	log := &endLog{}
	r := NewRegistry(RegistryConfig{Now: clk.Now, OnEnd: log.onEnd})
	snap := specs.Compile(t, specA)
	s, _, err := r.Create(CreateOptions{Snapshot: snap, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(2 * time.Minute)
	if _, _, err := r.Create(CreateOptions{Snapshot: snap}); err != nil {
		t.Fatal(err)
	}
	if got, want := log.get(), []string{s.ID + " expired"}; !slices.Equal(got, want) {
		t.Errorf("OnEnd calls = %v, want %v", got, want)
	}
}

func TestEnd(t *testing.T) {
	log := &endLog{}
	var r *Registry
	// OnEnd may call back into the registry: it runs without the lock.
	r = NewRegistry(RegistryConfig{OnEnd: func(s *Session, e Ending) {
		log.onEnd(s, e)
		_ = r.List()
	}})
	snap := specs.Compile(t, specA)
	s, sec, err := r.Create(CreateOptions{Snapshot: snap})
	if err != nil {
		t.Fatal(err)
	}
	other, otherSec, err := r.Create(CreateOptions{Snapshot: snap})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.End(s.ID); err != nil {
		t.Fatalf("End: %v", err)
	}
	if _, err := r.AuthenticateProxy(s.ID, sec.ProxySecret); !errors.Is(err, ErrSessionEnded) {
		t.Errorf("AuthenticateProxy after End: %v, want ErrSessionEnded", err)
	}
	if _, err := r.AuthenticateAPI(sec.APIToken); !errors.Is(err, ErrSessionEnded) {
		t.Errorf("AuthenticateAPI after End: %v, want ErrSessionEnded", err)
	}
	if err := r.End(s.ID); !errors.Is(err, ErrSessionEnded) {
		t.Errorf("second End: %v, want ErrSessionEnded", err)
	}
	if err := r.End("ses_nope"); !errors.Is(err, ErrUnknownSession) {
		t.Errorf("End(unknown): %v, want ErrUnknownSession", err)
	}
	if got, err := r.AuthenticateProxy(other.ID, otherSec.ProxySecret); err != nil || got != other {
		t.Errorf("the other session was affected: %v, %v", got, err)
	}
	if got := r.List(); len(got) != 1 || got[0] != other {
		t.Errorf("List = %v, want only %s", got, other.ID)
	}
	if got, want := log.get(), []string{s.ID + " ended"}; !slices.Equal(got, want) {
		t.Errorf("OnEnd calls = %v, want %v", got, want)
	}
}

func TestSecretsNeverPrint(t *testing.T) {
	r := NewRegistry(RegistryConfig{})
	_, sec, err := r.Create(CreateOptions{Snapshot: specs.Compile(t, specA)})
	if err != nil {
		t.Fatal(err)
	}
	leaks := func(out string) bool {
		return strings.Contains(out, sec.ProxySecret) || strings.Contains(out, sec.APIToken)
	}
	for _, format := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d", "%t", "%10.3s"} {
		for _, arg := range []any{sec, &sec} {
			if out := fmt.Sprintf(format, arg); leaks(out) {
				t.Errorf("Sprintf(%q, %T) = %q leaks a secret", format, arg, out)
			}
		}
	}
	if out, err := json.Marshal(map[string]any{"secrets": sec}); err != nil || leaks(string(out)) {
		t.Errorf("json.Marshal(secrets) = %s, %v; want it redacted", out, err)
	}
	if out := fmt.Sprint(fmt.Errorf("creating: %v", sec)); leaks(out) {
		t.Errorf("an error wrapping the secrets leaks one: %q", out)
	}
}

func TestListOrder(t *testing.T) {
	clk := &clock{t: time.Unix(2e9, 0)}
	r := NewRegistry(RegistryConfig{Now: clk.Now})
	snap := specs.Compile(t, specA)
	var want []string
	for range 4 {
		s, _, err := r.Create(CreateOptions{Snapshot: snap})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, s.ID)
		clk.Add(time.Second)
	}
	var got []string
	for _, s := range r.List() {
		got = append(got, s.ID)
	}
	if !slices.Equal(got, want) {
		t.Errorf("List order = %v, want creation order %v", got, want)
	}
}

func TestConcurrentUse(t *testing.T) {
	r := NewRegistry(RegistryConfig{OnEnd: func(*Session, Ending) {}})
	snap := specs.Compile(t, specA)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 8 {
		wg.Go(func() {
			for range 4 {
				s, sec, err := r.Create(CreateOptions{Snapshot: snap})
				if err != nil {
					errs <- err
					return
				}
				if got, err := r.AuthenticateProxy(s.ID, sec.ProxySecret); err != nil || got != s {
					errs <- fmt.Errorf("AuthenticateProxy: %v, %v", got, err)
				}
				if got, err := r.AuthenticateAPI(sec.APIToken); err != nil || got != s {
					errs <- fmt.Errorf("AuthenticateAPI: %v, %v", got, err)
				}
				_ = r.List()
				if err := r.End(s.ID); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := r.List(); len(got) != 0 {
		t.Errorf("List after ending all = %d sessions", len(got))
	}
}

func TestEndWithExitCodeReachesOnEnd(t *testing.T) {
	var got []Ending
	r := NewRegistry(RegistryConfig{OnEnd: func(_ *Session, e Ending) { got = append(got, e) }})
	snap := specs.Compile(t)
	s, _, err := r.Create(CreateOptions{Snapshot: snap})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.EndWithExitCode(s.ID, 3); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Reason != EndReasonEnded || got[0].ExitCode == nil || *got[0].ExitCode != 3 {
		t.Fatalf("OnEnd got %+v, want one ended with exit code 3", got)
	}
	if err := r.EndWithExitCode(s.ID, 4); !errors.Is(err, ErrSessionEnded) {
		t.Errorf("second end = %v, want ErrSessionEnded", err)
	}
}

func TestCreateLabels(t *testing.T) {
	r := NewRegistry(RegistryConfig{})
	snap := specs.Compile(t, specB)
	s, _, err := r.Create(CreateOptions{Snapshot: snap, Agent: "claude", Project: "/home/me/repo"})
	if err != nil || s.Agent != "claude" || s.Project != "/home/me/repo" {
		t.Fatalf("Create with labels = %+v, %v", s, err)
	}
	for _, bad := range []CreateOptions{
		{Snapshot: snap, Agent: strings.Repeat("a", MaxLabelBytes+1)},
		{Snapshot: snap, Project: "repo\x1b[2J"},
		{Snapshot: snap, Agent: "\xff"},
	} {
		if _, _, err := r.Create(bad); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("Create(agent %q, project %q) = %v, want ErrInvalidOptions", bad.Agent, bad.Project, err)
		}
	}
}
