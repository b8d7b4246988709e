// Package coalesce batches many small writes into few. Callers append to a
// buffer and return at once; what accumulates within a short delay reaches
// the underlying writer in one Write. It takes the write system calls of the
// audit log and the serve log off the request path: at thousands of
// requests a second each line would otherwise cost its own write(2).
//
// Every Write is kept whole and in order. Nothing is written partially or
// twice; a failed underlying write loses the writes of that batch, which are
// counted (Lost) and whose first error is kept (Err).
package coalesce

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned by Write after Close.
var ErrClosed = errors.New("coalesce: write after close")

// Defaults for New's zero arguments.
const (
	// DefaultDelay bounds how long a write waits in the buffer: the most a
	// crash of the process can lose, and the most a reader of the file lags.
	DefaultDelay = 5 * time.Millisecond
	// DefaultMaxBuffered is the buffered size at which the writing caller
	// flushes at once instead of waiting for the delay (backpressure).
	DefaultMaxBuffered = 256 << 10
)

// Writer is an io.Writer that coalesces writes. It is safe for concurrent
// use. Close (or Flush) must be called for the last writes to reach the
// underlying writer.
type Writer struct {
	w     io.Writer
	delay time.Duration
	max   int
	timer *time.Timer

	// wmu orders flushes: a batch is taken and written under it, so batches
	// reach w in the order they were taken.
	wmu sync.Mutex

	mu     sync.Mutex
	buf    []byte // pending writes
	n      uint64 // writes in buf
	spare  []byte // an empty buffer to swap in
	closed bool

	lost atomic.Uint64
	err  atomic.Pointer[error]
}

// New returns a Writer over w that flushes delay after the first write of a
// batch, or at once when maxBuffered bytes are pending. A zero delay or
// maxBuffered selects the default.
func New(w io.Writer, delay time.Duration, maxBuffered int) *Writer {
	if delay <= 0 {
		delay = DefaultDelay
	}
	if maxBuffered <= 0 {
		maxBuffered = DefaultMaxBuffered
	}
	c := &Writer{w: w, delay: delay, max: maxBuffered}
	c.timer = time.AfterFunc(time.Hour, func() { _ = c.flush() })
	c.timer.Stop()
	return c
}

// Write appends p to the batch and returns len(p). It never blocks on the
// underlying writer unless maxBuffered bytes are pending, in which case the
// caller writes the batch itself. Errors of the underlying writer are not
// returned here; see Lost and Err.
func (c *Writer) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, ErrClosed
	}
	first := len(c.buf) == 0
	c.buf = append(c.buf, p...)
	c.n++
	full := len(c.buf) >= c.max
	c.mu.Unlock()
	switch {
	case full:
		_ = c.flush()
	case first:
		c.timer.Reset(c.delay)
	}
	return len(p), nil
}

// Flush writes everything written before the call and returns the
// underlying writer's error for that batch.
func (c *Writer) Flush() error { return c.flush() }

// Sync is Flush, for zapcore.WriteSyncer; it then syncs the underlying
// writer when that has a Sync method.
func (c *Writer) Sync() error {
	if err := c.flush(); err != nil {
		return err
	}
	if s, ok := c.w.(interface{ Sync() error }); ok {
		return s.Sync()
	}
	return nil
}

// Close flushes and makes later Writes fail with ErrClosed. It does not
// close the underlying writer. It returns the first error the underlying
// writer ever returned.
func (c *Writer) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.timer.Stop()
	_ = c.flush()
	return c.Err()
}

// Lost returns how many writes the underlying writer failed to take.
func (c *Writer) Lost() uint64 { return c.lost.Load() }

// Err returns the first error of the underlying writer, or nil.
func (c *Writer) Err() error {
	if p := c.err.Load(); p != nil {
		return *p
	}
	return nil
}

// flush takes the pending batch and writes it.
func (c *Writer) flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	batch, n := c.buf, c.n
	c.buf, c.n, c.spare = c.spare[:0], 0, nil
	c.mu.Unlock()
	if len(batch) == 0 {
		c.keep(batch)
		return nil
	}
	_, err := c.w.Write(batch)
	if err != nil {
		c.lost.Add(n)
		c.err.CompareAndSwap(nil, &err)
	}
	c.keep(batch)
	return err
}

// keep offers b back as the spare buffer unless a burst made it large.
func (c *Writer) keep(b []byte) {
	if cap(b) > 2*c.max {
		return
	}
	c.mu.Lock()
	if c.spare == nil {
		c.spare = b[:0]
	}
	c.mu.Unlock()
}
