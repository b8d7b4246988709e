package audit

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// osFile is the File over the log Open opens.
type osFile struct {
	*os.File
	// noFallocate is set once the filesystem refused fallocate; Allocate
	// then checks the free space instead.
	noFallocate atomic.Bool
}

func (f *osFile) Size() (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// Allocate allocates [off, off+n) ahead and then checks that the
// filesystem has a block left: allocation works in blocks, so a full disk
// would otherwise show only once the log's end crosses into a block it
// lacks. Where fallocate is not supported it checks that n bytes are free.
func (f *osFile) Allocate(off, n int64) error {
	if !f.noFallocate.Load() {
		err := f.control(func(fd int) error { return unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, off, n) })
		if err == nil {
			return f.checkFree(0)
		}
		if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOSYS) {
			return err
		}
		f.noFallocate.Store(true)
	}
	return f.checkFree(n)
}

// checkFree fails with ENOSPC when the filesystem has less than n bytes,
// or less than one block, that this process may use (root may use the
// blocks reserved for it).
func (f *osFile) checkFree(n int64) error {
	var st unix.Statfs_t
	if err := f.control(func(fd int) error { return unix.Fstatfs(fd, &st) }); err != nil || st.Blocks == 0 || st.Bsize <= 0 {
		return nil // nothing to go by (a filesystem that reports no sizes); the next write decides
	}
	avail := st.Bavail
	if os.Geteuid() == 0 {
		avail = st.Bfree
	}
	free := avail * uint64(st.Bsize)
	if need := uint64(max(n, st.Bsize)); free < need {
		return fmt.Errorf("the filesystem has %d bytes free: %w", free, syscall.ENOSPC)
	}
	return nil
}

func (f *osFile) Release(off, n int64) error {
	if f.noFallocate.Load() {
		return nil
	}
	err := f.control(func(fd int) error {
		return unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	})
	if errors.Is(err, unix.EOPNOTSUPP) {
		return nil
	}
	return err
}

// control runs fn on the file's descriptor.
func (f *osFile) control(fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}
