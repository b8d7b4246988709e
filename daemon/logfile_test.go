package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRotatingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "logs", "daemon.log")
	r, err := OpenRotatingFile(path, 100, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	line := strings.Repeat("x", 39) + "\n" // 40 bytes: two fit, the third rotates
	for i := 0; i < 7; i++ {
		if _, err := r.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		lines int
	}{{path, 1}, {path + ".1", 2}, {path + ".2", 2}} {
		fi, err := os.Stat(tc.name)
		if err != nil {
			t.Fatalf("stat %s: %v", tc.name, err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode = %v, want 0600", tc.name, fi.Mode().Perm())
		}
		if fi.Size() != int64(tc.lines*len(line)) {
			t.Errorf("%s holds %d bytes, want %d lines (%d bytes)", tc.name, fi.Size(), tc.lines, tc.lines*len(line))
		}
	}
	if _, err := os.Stat(path + ".3"); !os.IsNotExist(err) {
		t.Errorf("a third backup exists (%v); only 2 are kept", err)
	}
	// Reopening an existing, too-open file makes it private again.
	r.Close()
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	r2, err := OpenRotatingFile(path, 100, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("reopened log mode = %v, want 0600", fi.Mode().Perm())
	}
}
