package cappedfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	exact := write("exact", "12345")
	over := write("over", "123456")
	link := filepath.Join(dir, "link")
	if err := os.Symlink(exact, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		want       string
		wantErr    string
	}{
		{name: "at the limit", path: exact, want: "12345"},
		{name: "over the limit", path: over, wantErr: "over is larger than the 5-byte limit"},
		{name: "symbolic link", path: link, wantErr: "too many levels of symbolic links"},
		{name: "directory", path: dir, wantErr: "is not a regular file"},
		{name: "fifo", path: fifo, wantErr: "is not a regular file"},
		{name: "missing", path: filepath.Join(dir, "nope"), wantErr: "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Read(tc.path, 5)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Read(%q, 5) = %q, %v; want an error containing %q", tc.path, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("Read(%q, 5) = %q, %v; want %q", tc.path, got, err, tc.want)
			}
		})
	}
	if _, err := Read(filepath.Join(dir, "nope"), 5); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read(missing) = %v, want an error matching fs.ErrNotExist", err)
	}
}
