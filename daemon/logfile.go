package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// Log file defaults for a daemon that does not own a terminal (the one
// `launch` starts in-process).
const (
	// LogFile is the daemon log under $AILERON_HOME.
	LogFile = "logs/daemon.log"
	// DefaultLogMaxBytes is the size at which the log is rotated.
	DefaultLogMaxBytes = 10 << 20
	// DefaultLogBackups is how many rotated files (daemon.log.1 ...) are
	// kept.
	DefaultLogBackups = 3
)

// RotatingFile is an append-only 0600 log file that is renamed to
// PATH.1 (shifting older ones up to PATH.N) when a write would take it past
// its size limit. It is safe for concurrent use.
type RotatingFile struct {
	path     string
	maxBytes int64
	backups  int

	mu   sync.Mutex
	f    *os.File
	size int64
}

// OpenRotatingFile opens (creating it and its directory, 0700) the log at
// path; maxBytes and backups of zero or less take the defaults.
func OpenRotatingFile(path string, maxBytes int64, backups int) (*RotatingFile, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultLogMaxBytes
	}
	if backups <= 0 {
		backups = DefaultLogBackups
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating the log directory %s: %w", filepath.Dir(path), err)
	}
	r := &RotatingFile{path: path, maxBytes: maxBytes, backups: backups}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *RotatingFile) open() error {
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("opening the log file %s: %w", r.path, err)
	}
	// An existing file keeps its mode; the log must stay private.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("making the log file %s private: %w", r.path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("reading the log file %s: %w", r.path, err)
	}
	r.f, r.size = f, fi.Size()
	return nil
}

// Path is the log file's path.
func (r *RotatingFile) Path() string { return r.path }

// Write appends p, rotating first when p would take the file past its
// limit (a write is never split across files).
func (r *RotatingFile) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return 0, os.ErrClosed
	}
	if r.size > 0 && r.size+int64(len(p)) > r.maxBytes {
		if err := r.rotateLocked(); err != nil {
			return 0, err
		}
	}
	n, err := r.f.Write(p)
	r.size += int64(n)
	return n, err
}

// rotateLocked shifts PATH.i to PATH.i+1 (dropping the oldest), PATH to
// PATH.1, and opens a fresh PATH.
func (r *RotatingFile) rotateLocked() error {
	if err := r.f.Close(); err != nil {
		return fmt.Errorf("closing the log file %s: %w", r.path, err)
	}
	r.f = nil
	_ = os.Remove(r.path + "." + strconv.Itoa(r.backups))
	for i := r.backups - 1; i >= 1; i-- {
		_ = os.Rename(r.path+"."+strconv.Itoa(i), r.path+"."+strconv.Itoa(i+1))
	}
	if err := os.Rename(r.path, r.path+".1"); err != nil {
		return fmt.Errorf("rotating the log file %s: %w", r.path, err)
	}
	return r.open()
}

// Sync flushes the file to disk.
func (r *RotatingFile) Sync() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	return r.f.Sync()
}

// Close closes the file.
func (r *RotatingFile) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}
