package state

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestKeySealOpen(t *testing.T) {
	k, err := NewKey(bytes.Repeat([]byte{9}, KeySize))
	if err != nil {
		t.Fatal(err)
	}
	plain := []byte("-----PRIVATE KEY BYTES-----")
	a, err := k.Seal("s1", plain)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := k.Seal("s1", plain)
	if bytes.Equal(a, b) {
		t.Error("two seals of the same value are equal: the nonce is not random")
	}
	if bytes.Contains(a, plain) {
		t.Error("the sealed value holds the plaintext")
	}
	if got, err := k.Open("s1", a); err != nil || !bytes.Equal(got, plain) {
		t.Errorf("Open(s1) = %q, %v", got, err)
	}
	if _, err := k.Open("s2", a); !errors.Is(err, ErrWrongKey) {
		t.Errorf("Open under another record ID = %v, want ErrWrongKey", err)
	}
	other, _ := NewKey(bytes.Repeat([]byte{8}, KeySize))
	if _, err := other.Open("s1", a); !errors.Is(err, ErrWrongKey) {
		t.Errorf("Open with another key = %v, want ErrWrongKey", err)
	}
	tampered := bytes.Clone(a)
	tampered[len(tampered)-1] ^= 1
	if _, err := k.Open("s1", tampered); !errors.Is(err, ErrWrongKey) {
		t.Errorf("Open of a tampered value = %v, want ErrWrongKey", err)
	}
	for _, bad := range [][]byte{nil, {1}, {2, 3, 4}, a[:10]} {
		if _, err := k.Open("s1", bad); err == nil {
			t.Errorf("Open(%x) succeeded", bad)
		}
	}
	if s := fmt.Sprintf("%v %+v %#v %s", k, k, k, k); strings.Contains(s, "\x09") || !strings.Contains(s, "REDACTED") {
		t.Errorf("a Key prints as %q", s)
	}
}

func TestReadKeyFile(t *testing.T) {
	dir := t.TempDir()
	raw := bytes.Repeat([]byte{0xab}, KeySize)
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ref, _ := NewKey(raw)
	sealed, _ := ref.Seal("x", []byte("v"))
	for _, tc := range []struct{ name, path string }{
		{"raw", write("raw", raw)},
		{"base64", write("b64", []byte(base64.StdEncoding.EncodeToString(raw)+"\n"))},
	} {
		k, err := ReadKeyFile(tc.path)
		if err != nil {
			t.Fatalf("ReadKeyFile(%s) = %v", tc.name, err)
		}
		if _, err := k.Open("x", sealed); err != nil {
			t.Errorf("the %s key is not the same key: %v", tc.name, err)
		}
	}
	for _, tc := range []struct{ name, path, want string }{
		{"missing", filepath.Join(dir, "nope"), "does not exist; create one with `openssl rand -base64 32"},
		{"short", write("short", []byte("0123456789")), "neither 32 raw bytes nor their base64"},
		{"long", write("long", bytes.Repeat([]byte{1}, 64)), "neither 32 raw bytes nor their base64"},
		{"short base64", write("s64", []byte(base64.StdEncoding.EncodeToString(raw[:16]))), "neither 32 raw bytes"},
		{"empty", write("empty", nil), "neither 32 raw bytes"},
	} {
		_, err := ReadKeyFile(tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ReadKeyFile(%s) = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// TestKeyFileOption: a given KeyFile is used and never created; a
// generated key reaches no log line and no error.
func TestKeyFileOption(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	missing := filepath.Join(t.TempDir(), "state.key")
	if _, err := Open(ctx, Config{Home: home, KeyFile: missing}); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Open with a missing KeyFile = %v, want it refused", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Error("Open created the KeyFile it was given")
	}
	if _, err := os.Stat(filepath.Join(home, "state.key")); !errors.Is(err, os.ErrNotExist) {
		t.Error("Open with a KeyFile created Home/state.key")
	}

	core, logs := observer.New(zap.DebugLevel)
	st, err := Open(ctx, Config{Home: home, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutSession(ctx, testSession("s1")); err != nil {
		t.Fatal(err)
	}
	st.Close()
	key, err := os.ReadFile(filepath.Join(home, "state.key"))
	if err != nil {
		t.Fatal(err)
	}
	if len(key) != KeySize {
		t.Fatalf("state.key is %d bytes", len(key))
	}
	if logs.FilterMessage("created the state key").Len() != 1 {
		t.Errorf("no log line says the key was created: %v", logs.All())
	}
	for _, e := range logs.All() {
		line := fmt.Sprint(e.Message, e.ContextMap())
		for _, enc := range []string{string(key), base64.StdEncoding.EncodeToString(key), fmt.Sprintf("%x", key)} {
			if strings.Contains(line, enc) {
				t.Errorf("a log line holds the state key: %q", e.Message)
			}
		}
	}
	// The generated key also opens the store given as KeyFile; a key file
	// others may read is used with a warning.
	if logs.FilterMessageSnippet("readable by others").Len() != 0 {
		t.Errorf("a warning about a 0600 key: %v", logs.All())
	}
	if err := os.Chmod(filepath.Join(home, "state.key"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err = Open(ctx, Config{Home: home, KeyFile: filepath.Join(home, "state.key"), Logger: zap.New(core)})
	if err != nil {
		t.Fatalf("Open with KeyFile = the generated key: %v", err)
	}
	st.Close()
	if logs.FilterMessageSnippet("readable by others").Len() != 1 {
		t.Errorf("no warning about a 0644 key file: %v", logs.All())
	}
}
