package credentials

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func stored(s string) Source { return Source{Type: SourceStored, Value: NewValue(s)} }

func TestBindingValidate(t *testing.T) {
	const fqn = "github://acme/x"
	oauth := func(mod func(*OAuth2)) *OAuth2 {
		o := &OAuth2{TokenURL: "https://auth.example/token", ClientID: "cid", RefreshToken: Source{Type: SourceEnv, Ref: "RT"}}
		if mod != nil {
			mod(o)
		}
		return o
	}
	cases := []struct {
		name    string
		b       Binding
		wantErr string // empty: valid
	}{
		{"bearer env", Binding{FQN: fqn, Kind: KindBearer, Source: Source{Type: SourceEnv, Ref: "GH_TOKEN"}}, ""},
		{"api key header", Binding{FQN: fqn, Kind: KindAPIKey, Source: Source{Type: SourceFile, Ref: "/run/key"}, Placement: Placement{Header: "X-Api-Key"}}, ""},
		{"format", Binding{FQN: fqn, Kind: KindBearer, Source: Source{Type: SourceExec, Ref: "gh auth token"}, Placement: Placement{Format: "token {secret}"}}, ""},
		{"query", Binding{FQN: fqn, Kind: KindAPIKey, Source: stored("k3y-value"), Placement: Placement{Query: "key"}}, ""},
		{"basic", Binding{FQN: fqn, Kind: KindBasic, Source: stored("pa55word"), Username: "alice"}, ""},
		{"oauth2 refresh", Binding{FQN: fqn, Kind: KindOAuth2, OAuth2: oauth(nil)}, ""},
		{"oauth2 direct", Binding{FQN: fqn, Kind: KindOAuth2, Source: Source{Type: SourceExec, Ref: "gcloud auth print-access-token"}}, ""},
		{"oauth2 loopback http", Binding{FQN: fqn, Kind: KindOAuth2, OAuth2: oauth(func(o *OAuth2) { o.TokenURL = "http://127.0.0.1:9/t" })}, ""},

		{"bad fqn", Binding{FQN: "acme/x", Kind: KindBearer, Source: stored("abcd")}, "not a connector FQN"},
		{"bad kind", Binding{FQN: fqn, Kind: "token", Source: stored("abcd")}, "kind \"token\" is not valid"},
		{"zero kind", Binding{FQN: fqn, Source: stored("abcd")}, "is not valid"},
		{"no source", Binding{FQN: fqn, Kind: KindBearer}, "no secret source"},
		{"short stored", Binding{FQN: fqn, Kind: KindBearer, Source: stored("abc")}, "shorter than 4 bytes"},
		{"newline stored", Binding{FQN: fqn, Kind: KindBearer, Source: stored("abc\ndef")}, "line break"},
		{"bad env name", Binding{FQN: fqn, Kind: KindBearer, Source: Source{Type: SourceEnv, Ref: "1X"}}, "not valid"},
		{"relative file", Binding{FQN: fqn, Kind: KindBearer, Source: Source{Type: SourceFile, Ref: "key.txt"}}, "must be absolute"},
		{"empty exec", Binding{FQN: fqn, Kind: KindBearer, Source: Source{Type: SourceExec, Ref: " "}}, "command is empty"},
		{"nul exec", Binding{FQN: fqn, Kind: KindBearer, Source: Source{Type: SourceExec, Ref: "gh\x00auth"}}, "NUL byte"},
		{"bad source type", Binding{FQN: fqn, Kind: KindBearer, Source: Source{Type: "vault", Ref: "x"}}, "source type \"vault\""},
		{"basic no user", Binding{FQN: fqn, Kind: KindBasic, Source: stored("pa55word")}, "needs a username"},
		{"basic colon user", Binding{FQN: fqn, Kind: KindBasic, Source: stored("pa55word"), Username: "a:b"}, "must not contain ':'"},
		{"basic header", Binding{FQN: fqn, Kind: KindBasic, Source: stored("pa55word"), Username: "a", Placement: Placement{Header: "X-Key"}}, "always uses the Authorization"},
		{"user without basic", Binding{FQN: fqn, Kind: KindBearer, Source: stored("abcd"), Username: "a"}, "only used with kind basic"},
		{"query and header", Binding{FQN: fqn, Kind: KindAPIKey, Source: stored("abcd"), Placement: Placement{Query: "k", Header: "X-K"}}, "pick one"},
		{"format without placeholder", Binding{FQN: fqn, Kind: KindBearer, Source: stored("abcd"), Placement: Placement{Format: "token"}}, "exactly once"},
		{"format twice", Binding{FQN: fqn, Kind: KindBearer, Source: stored("abcd"), Placement: Placement{Format: "{secret}{secret}"}}, "exactly once"},
		{"bad header name", Binding{FQN: fqn, Kind: KindAPIKey, Source: stored("abcd"), Placement: Placement{Header: "X Key"}}, "not a valid header name"},
		{"host header", Binding{FQN: fqn, Kind: KindAPIKey, Source: stored("abcd"), Placement: Placement{Header: "host"}}, "managed by the proxy"},
		{"proxy header", Binding{FQN: fqn, Kind: KindAPIKey, Source: stored("abcd"), Placement: Placement{Header: "Proxy-Authorization"}}, "managed by the proxy"},
		{"oauth2 on bearer", Binding{FQN: fqn, Kind: KindBearer, OAuth2: oauth(nil)}, "needs kind oauth2"},
		{"oauth2 and source", Binding{FQN: fqn, Kind: KindOAuth2, OAuth2: oauth(nil), Source: stored("abcd")}, "not both"},
		{"oauth2 relative url", Binding{FQN: fqn, Kind: KindOAuth2, OAuth2: oauth(func(o *OAuth2) { o.TokenURL = "/token?client_secret=" + canary })}, "not an absolute URL"},
		{"oauth2 unparsable url", Binding{FQN: fqn, Kind: KindOAuth2, OAuth2: oauth(func(o *OAuth2) { o.TokenURL = "https://u:" + canary + "%zz@auth.example/t" })}, "does not parse"},
		{"oauth2 http", Binding{FQN: fqn, Kind: KindOAuth2, OAuth2: oauth(func(o *OAuth2) { o.TokenURL = "http://auth.example/t" })}, "must use https"},
		{"oauth2 no client", Binding{FQN: fqn, Kind: KindOAuth2, OAuth2: oauth(func(o *OAuth2) { o.ClientID = "" })}, "client id"},
		{"oauth2 no refresh", Binding{FQN: fqn, Kind: KindOAuth2, OAuth2: oauth(func(o *OAuth2) { o.RefreshToken = Source{} })}, "refresh token source"},
		{"oauth2 bad scope", Binding{FQN: fqn, Kind: KindOAuth2, OAuth2: oauth(func(o *OAuth2) { o.Scopes = []string{"a b"} })}, "one non-empty word"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.b.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("Validate() = nil, want error containing %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("Validate() = %q, want it to contain %q", err, tc.wantErr)
			}
			if err != nil && tc.b.Source.Type == SourceStored && strings.Contains(err.Error(), tc.b.Source.Value.Reveal()) {
				t.Fatalf("error %q contains the secret", err)
			}
			if err != nil && strings.Contains(err.Error(), canary) {
				t.Fatalf("error %q contains the secret", err)
			}
		})
	}
}

func TestParseKind(t *testing.T) {
	for _, k := range []string{"oauth2", "api_key", "bearer", "basic"} {
		if got, err := ParseKind(k); err != nil || string(got) != k {
			t.Errorf("ParseKind(%q) = %q, %v", k, got, err)
		}
	}
	for _, k := range []string{"", "none", "Bearer", "apikey"} {
		if _, err := ParseKind(k); err == nil {
			t.Errorf("ParseKind(%q) succeeded, want error", k)
		}
	}
}

func TestFileSaveLoadRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "home")
	path := filepath.Join(dir, "credentials.json")
	f, err := LoadFile(path)
	if err != nil || f.Len() != 0 {
		t.Fatalf("LoadFile(missing) = %v, %v; want empty", f, err)
	}
	in := []Binding{
		{FQN: "github://acme/b", Kind: KindBearer, Source: Source{Type: SourceEnv, Ref: "GH_TOKEN"}, Placement: Placement{Format: "token {secret}"}},
		{FQN: "github://acme/a", Kind: KindBasic, Source: stored(canary), Username: "alice"},
		{FQN: "github://acme/a", Kind: KindAPIKey, Source: Source{Type: SourceExec, Ref: "pass show api"}, Placement: Placement{Query: "key"}},
		{FQN: "google://g/x", Kind: KindOAuth2, OAuth2: &OAuth2{TokenURL: "https://oauth2.example/token", ClientID: "cid",
			ClientSecret: Source{Type: SourceFile, Ref: "/etc/cs"}, RefreshToken: stored(canary + "rt"), Scopes: []string{"a", "b"}}},
	}
	for _, b := range in {
		if err := b.Validate(); err != nil {
			t.Fatal(err)
		}
		f.Set(b)
	}
	f.Set(in[0]) // replacing keeps one binding
	if f.Len() != len(in) {
		t.Fatalf("Len() = %d, want %d", f.Len(), len(in))
	}
	if err := f.Save(path); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{path: 0o600, dir: 0o700} {
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm() != want {
			t.Fatalf("mode of %s = %v, %v; want %04o", p, st.Mode().Perm(), err, want)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only credentials.json (no temp files)", len(entries))
	}
	got, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range in {
		g, ok := got.Get(b.FQN, b.Kind)
		if !ok || !bindingEqual(g, b) {
			t.Errorf("binding %s %s did not round-trip: %+v", b.FQN, b.Kind, g)
		}
	}
	list := got.List()
	if len(list) != 4 || list[0].FQN != "github://acme/a" || list[0].Kind != KindAPIKey || list[3].Source != "oauth2" {
		t.Fatalf("List() not sorted or wrong: %+v", list)
	}
	if list[3].OAuth2 == nil || list[3].OAuth2.RefreshToken != "stored" || list[3].OAuth2.ClientSecret != "file /etc/cs" {
		t.Fatalf("oauth2 info = %+v", list[3].OAuth2)
	}
	if !got.Remove("github://acme/a", KindBasic) || got.Remove("github://acme/a", KindBasic) {
		t.Fatal("Remove did not report existence correctly")
	}
	if _, ok := got.Get("github://acme/a", KindBasic); ok {
		t.Fatal("binding still present after Remove")
	}
}

func TestLoadFileRefuses(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	valid := `{"version":1,"bindings":[{"connector":"github://a/b","kind":"bearer","source":{"type":"stored","value":"` + canary + `"}}]}`
	cases := []struct {
		name, data string
		mode       os.FileMode
		want       string
	}{
		{"world readable", valid, 0o644, "chmod 600"},
		{"syntax", `{"version":1,"bindings":[{"connector":"` + canary, 0o600, "invalid JSON"},
		{"unknown field", `{"version":1,"bindings":[],"extra":"` + canary + `"}`, 0o600, `unknown field "extra"`},
		{"version", `{"version":2,"bindings":[]}`, 0o600, "version 2 is not supported"},
		{"wrong type", `{"version":1,"bindings":[{"connector":"github://a/b","kind":"bearer","source":{"type":"stored","value":12345}}]}`, 0o600, "wrong JSON type"},
		{"short", `{"version":1,"bindings":[{"connector":"github://a/b","kind":"bearer","source":{"type":"stored","value":"abc"}}]}`, 0o600, "bindings[0]"},
		{"duplicate", `{"version":1,"bindings":[{"connector":"github://a/b","kind":"bearer","source":{"type":"env","ref":"A"}},{"connector":"github://a/b","kind":"bearer","source":{"type":"env","ref":"B"}}]}`, 0o600, "two bearer credentials"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := write(filepath.Base(t.Name())+string(rune('a'+i)), tc.data, tc.mode)
			_, err := LoadFile(p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadFile = %v, want error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), canary) {
				t.Fatalf("error %q contains the secret", err)
			}
		})
	}
	if _, err := LoadFile(write("ok.json", valid, 0o600)); err != nil {
		t.Fatalf("LoadFile(valid) = %v", err)
	}
}

// FuzzParseFile: no panic; whatever parses re-encodes and parses to the
// same bindings.
func FuzzParseFile(f *testing.F) {
	f.Add([]byte(`{"version":1,"bindings":[{"connector":"github://a/b","kind":"bearer","source":{"type":"env","ref":"T"}}]}`))
	f.Add([]byte(`{"version":1,"bindings":[{"connector":"github://a/b","kind":"basic","username":"u","source":{"type":"stored","value":"pa55word"}},` +
		`{"connector":"github://a/c","kind":"oauth2","oauth2":{"token_url":"https://t/x","client_id":"c","refresh_token":{"type":"file","ref":"/r"},"scopes":["s"]}}]}`))
	f.Add([]byte(`{"version":1,"bindings":[{"connector":"github://a/b","kind":"api_key","query":"k","source":{"type":"exec","ref":"x"}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := parseFile(data)
		if err != nil {
			return
		}
		out, err := file.marshal()
		if err != nil {
			t.Fatalf("parsed file does not re-encode: %v", err)
		}
		again, err := parseFile(out)
		if err != nil {
			t.Fatalf("re-encoded file does not parse: %v\n%s", err, out)
		}
		if again.Len() != file.Len() {
			t.Fatalf("round trip changed the number of bindings")
		}
		for _, b := range file.bindings {
			g, ok := again.Get(b.FQN, b.Kind)
			if !ok || !bindingEqual(g, b) {
				t.Fatalf("binding %s %s changed in the round trip", b.FQN, b.Kind)
			}
		}
	})
}
