package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// names lists dir's entries.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.json")
	for _, tc := range []struct {
		name string
		data string
		perm os.FileMode
	}{
		{name: "create", data: "one\n", perm: 0o600},
		{name: "replace with another mode", data: "two, longer\n", perm: 0o644},
		{name: "replace with less", data: "3", perm: 0o600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := WriteFile(path, []byte(tc.data), tc.perm); err != nil {
				t.Fatalf("WriteFile(%q): %v", path, err)
			}
			got, err := os.ReadFile(path)
			if err != nil || string(got) != tc.data {
				t.Errorf("after WriteFile(%q, %q): file holds %q, %v", path, tc.data, got, err)
			}
			st, err := os.Stat(path)
			if err != nil || st.Mode().Perm() != tc.perm {
				t.Errorf("after WriteFile(%q, %04o): mode %v, %v", path, tc.perm, st.Mode().Perm(), err)
			}
			if n := names(t, dir); len(n) != 1 {
				t.Errorf("after WriteFile: directory holds %q, want only f.json", n)
			}
		})
	}
}

func TestWriteFileNoDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "f")
	if err := WriteFile(path, []byte("x"), 0o600); err == nil {
		t.Fatalf("WriteFile(%q) into a missing directory = nil, want an error", path)
	}
}

// TestWriteFileFailedRename replaces a directory, which rename refuses
// after the temporary file is written: the directory stays and the
// temporary file goes.
func TestWriteFileFailedRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "target")
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "keep"), []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("new"), 0o600); err == nil {
		t.Fatalf("WriteFile(%q) over a directory = nil, want an error", path)
	}
	if got, err := os.ReadFile(filepath.Join(path, "keep")); err != nil || string(got) != "kept" {
		t.Errorf("after a failed WriteFile the directory's file holds %q, %v; want \"kept\"", got, err)
	}
	if n := names(t, dir); len(n) != 1 || n[0] != "target" {
		t.Errorf("after a failed WriteFile the directory holds %q, want only target (no temporary file)", n)
	}
}
