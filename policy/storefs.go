package policy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/aileron-dev/aileron-proxy/internal/atomicfile"
)

// The file-system steps of a content-addressed store, shared by the
// connector store here and the action store (package actions).

// LockDir takes the exclusive writer lock of the store at root (flock on
// root/.lock, created if needed); the returned func releases it. The
// kernel drops it if the process dies. what names the store in errors.
func LockDir(root, what string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(root, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking the %s: %w", what, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking the %s: %w", what, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// DiscardDir moves the entry dir (a child of parent) into a new directory
// under tmpDir, named with prefix, with one rename, so readers never see it
// half deleted; then it syncs parent and deletes the moved entry.
func DiscardDir(dir, parent, tmpDir, prefix string) error {
	if err := os.MkdirAll(tmpDir, 0o700); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(tmpDir, prefix)
	if err != nil {
		return err
	}
	if err := os.Rename(dir, filepath.Join(tmp, "pkg")); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := atomicfile.SyncDir(parent); err != nil {
		return err
	}
	return os.RemoveAll(tmp)
}

// CompareVersions orders versions as the stores do: an empty (unversioned)
// version below every other, the rest by semantic-version precedence. It
// returns -1, 0 or +1.
func CompareVersions(a, b string) int { return compareVersions(a, b) }
