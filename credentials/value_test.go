package credentials

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

const canary = "CANARY-s3cr3t-7f1e9a"

func TestValueRedactsEveryFormattingPath(t *testing.T) {
	v := NewValue(canary)
	if v.Reveal() != canary {
		t.Fatalf("Reveal() = %q", v.Reveal())
	}
	cases := []struct {
		name string
		got  string
		want string
	}{
		{"String", v.String(), redacted},
		{"GoString", v.GoString(), redacted},
		{"%v", fmt.Sprintf("%v", v), redacted},
		{"%+v", fmt.Sprintf("%+v", v), redacted},
		{"%#v", fmt.Sprintf("%#v", v), redacted},
		{"%s", fmt.Sprintf("%s", v), redacted},
		{"%q", fmt.Sprintf("%q", v), `"` + redacted + `"`},
		{"%x", fmt.Sprintf("%x", v), redacted},
		{"%X", fmt.Sprintf("%X", v), redacted},
		{"%d", fmt.Sprintf("%d", v), redacted},
		{"%10.3s", fmt.Sprintf("%10.3s", v), redacted},
		{"pointer %v", fmt.Sprintf("%v", &v), redacted},
		{"Sprint", fmt.Sprint(v), redacted},
		{"Sprintln", strings.TrimSpace(fmt.Sprintln(v)), redacted},
	}
	for _, tc := range cases {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.name, tc.got, tc.want)
		}
	}
	j, err := json.Marshal(v)
	if err != nil || string(j) != `"[REDACTED]"` {
		t.Errorf("json.Marshal = %s, %v", j, err)
	}
	txt, err := v.MarshalText()
	if err != nil || string(txt) != redacted {
		t.Errorf("MarshalText = %s, %v", txt, err)
	}
	if lv := v.LogValue(); lv.String() != redacted {
		t.Errorf("LogValue = %q", lv.String())
	}
}

// TestSecretsInStructsNeverPrint prints and encodes every type that holds a
// secret, through every path a careless caller might use.
func TestSecretsInStructsNeverPrint(t *testing.T) {
	b := Binding{FQN: "github://acme/x", Kind: KindBearer, Source: Source{Type: SourceStored, Value: NewValue(canary)}}
	f := &File{}
	f.Set(b)
	f.Set(Binding{FQN: "github://acme/y", Kind: KindOAuth2, OAuth2: &OAuth2{
		TokenURL: "https://auth.example/token", ClientID: "cid",
		ClientSecret: Source{Type: SourceStored, Value: NewValue(canary + "-cs")},
		RefreshToken: Source{Type: SourceStored, Value: NewValue(canary + "-rt")},
	}})
	r, err := NewResolver(ResolverConfig{File: f})
	if err != nil {
		t.Fatal(err)
	}
	inj, _ := r.Lookup("github://acme/x", KindBearer)
	req, _ := http.NewRequest("GET", "https://api.example/x", nil)
	sc, err := inj.Apply(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	type holder struct {
		secret Value // unexported: fmt cannot call methods on it
		Public Value
	}
	things := []any{b, &b, f, *f, r, inj, sc, *sc, holder{NewValue(canary), NewValue(canary)}, b.Source, f.List()}
	var out bytes.Buffer
	for _, x := range things {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x", "%q"} {
			fmt.Fprintf(&out, verb+"\n", x)
		}
		if j, err := json.Marshal(x); err == nil {
			out.Write(j)
		}
	}
	// zap: Any, Object, Reflect, Stringer on a JSON encoder.
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	log := zap.New(zapcore.NewCore(enc, zapcore.AddSync(&out), zap.DebugLevel))
	log.Info("x", zap.Any("v", NewValue(canary)), zap.Object("o", NewValue(canary)), zap.Reflect("b", b),
		zap.Stringer("s", NewValue(canary)), zap.Any("binding", b), zap.Any("inj", inj))
	// slog text and JSON handlers.
	slog.New(slog.NewJSONHandler(&out, nil)).Info("x", "v", NewValue(canary), "b", b)
	slog.New(slog.NewTextHandler(&out, nil)).Info("x", "v", NewValue(canary), "b", b)

	for _, bad := range []string{canary, strings.ToLower(canary), hex.EncodeToString([]byte(canary)), strings.ToUpper(hex.EncodeToString([]byte(canary)))} {
		if strings.Contains(out.String(), bad) {
			t.Fatalf("a secret was printed:\n%s", out.String())
		}
	}
	if !strings.Contains(out.String(), redacted) {
		t.Fatal("expected [REDACTED] in the output")
	}
	if req.Header.Get("Authorization") != "Bearer "+canary {
		t.Fatalf("Apply did not inject: %q", req.Header.Get("Authorization"))
	}
}
