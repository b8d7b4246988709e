package credentials

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSecretReader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(path, []byte("proxy-secret-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := NewSecretReader(Source{Type: SourceFile, Ref: path}, "upstream proxy password", nil)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := r.Read(context.Background()); err != nil || v.Reveal() != "proxy-secret-1" {
		t.Fatalf("Read = %v, %v", v, err)
	}
	// The file is read again for each connection: a rotated password is used.
	if err := os.WriteFile(path, []byte("proxy-secret-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v, _ := r.Read(context.Background()); v.Reveal() != "proxy-secret-2" {
		t.Fatalf("Read after rotation = %q", v.Reveal())
	}
	if _, err := NewSecretReader(Source{Type: SourceStored, Value: NewValue("stored-secret")}, "upstream proxy password", nil); err == nil {
		t.Fatal("a stored source was accepted")
	}
	env, _ := NewSecretReader(Source{Type: SourceEnv, Ref: "PROXY_PW"}, "upstream proxy password", func(string) string { return "" })
	if _, err := env.Read(context.Background()); err == nil || !strings.Contains(err.Error(), "PROXY_PW is not set") {
		t.Fatalf("Read of an unset variable = %v", err)
	}
}
