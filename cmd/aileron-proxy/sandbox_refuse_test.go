package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSandboxRefusedKeys: plan shows a refused key and exits 1; check,
// build and launch stop with the same message before building or running
// anything.
func TestSandboxRefusedKeys(t *testing.T) {
	dir := t.TempDir()
	dc := filepath.Join(dir, ".devcontainer", "devcontainer.json")
	if err := os.MkdirAll(filepath.Dir(dc), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dc, []byte("{\n  \"image\": \"debian:bookworm-slim\",\n  \"capAdd\": [\"SYS_ADMIN\"]\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := dc + `:3:13: capAdd: refused: capability "SYS_ADMIN" is not granted`
	out, errOut, code := runCLI(t, t.TempDir(), "", nil, "sandbox", "plan", "--project", dir, "--runtime", "docker")
	if code != exitFailure || !strings.Contains(out, "refused:          capAdd (line 3)") || !strings.Contains(errOut, want) {
		t.Errorf("sandbox plan = %d\nstdout %s\nstderr %s\nwant exit %d, the refusal listed and %q", code, out, errOut, exitFailure, want)
	}
	for _, args := range [][]string{
		{"sandbox", "check", "--agent=sh", "--project", dir, "--runtime", "docker"},
		{"sandbox", "build", "--project", dir, "--runtime", "docker"},
		{"launch", "--project", dir, "--sandbox", "docker", "--", "sh"},
	} {
		_, errOut, code := runCLI(t, t.TempDir(), "", nil, args...)
		if code != exitFailure || !strings.Contains(errOut, want) {
			t.Errorf("%v = %d, stderr %q; want %d and %q", args, code, errOut, exitFailure, want)
		}
	}
}
