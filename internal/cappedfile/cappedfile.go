// Package cappedfile reads files a user points at, bounded: only a regular
// file, never through a symbolic link, and never more than a limit.
package cappedfile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// Read returns the contents of the regular file at path, which must hold at
// most limit bytes. A symbolic link as the last element of path is refused
// (O_NOFOLLOW), as is anything that is not a regular file; opening does not
// block (O_NONBLOCK), so a FIFO is refused rather than waited on. A longer
// file is an error naming the limit, after reading no more than limit+1
// bytes.
func Read(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than the %d-byte limit", filepath.Base(path), limit)
	}
	return data, nil
}
