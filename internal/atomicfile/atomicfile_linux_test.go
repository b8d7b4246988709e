package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestWriteFileFailedWrite makes the data write itself fail (EFBIG, under a
// file size limit; Go ignores SIGXFSZ): the old file keeps its contents and
// no temporary file is left.
func TestWriteFileFailedWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	var orig syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &orig); err != nil {
		t.Fatalf("reading RLIMIT_FSIZE: %v", err)
	}
	lim := orig
	lim.Cur = 1024
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatalf("lowering RLIMIT_FSIZE: %v", err)
	}
	err := WriteFile(path, make([]byte, 4096), 0o600)
	if rerr := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &orig); rerr != nil {
		t.Fatalf("restoring RLIMIT_FSIZE: %v", rerr)
	}
	if !errors.Is(err, syscall.EFBIG) {
		t.Fatalf("WriteFile(%q, 4096 bytes) under a 1024-byte limit = %v, want EFBIG", path, err)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != "old" {
		t.Errorf("after a failed WriteFile the file holds %q, %v; want \"old\"", got, err)
	}
	if n := names(t, dir); len(n) != 1 || n[0] != "f" {
		t.Errorf("after a failed WriteFile the directory holds %q, want only f (no temporary file)", n)
	}
}
