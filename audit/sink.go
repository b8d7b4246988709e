package audit

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Options' zero fields.
const (
	// DefaultReserve is how much space past its end the log keeps
	// allocated: the lines of requests already forwarded when the
	// filesystem fills go there (about 2,000 lines).
	DefaultReserve = 1 << 20
	// DefaultProbeInterval is how often an unavailable log tries again to
	// reserve space, so recovery needs no restart and no request.
	DefaultProbeInterval = 250 * time.Millisecond
)

// File is what a Writer appends to. Open wraps an *os.File; NewWriter
// takes any File, e.g. one that fails as a full disk does.
type File interface {
	io.Writer
	io.ReaderAt
	// Sync makes what was written durable (fsync).
	Sync() error
	// Truncate cuts the file to size bytes.
	Truncate(size int64) error
	// Size returns the file's size in bytes.
	Size() (int64, error)
	// Allocate makes sure n bytes from off can be written without the
	// filesystem running out of space, leaving the size unchanged
	// (fallocate with FALLOC_FL_KEEP_SIZE; where the filesystem cannot
	// allocate ahead, a check that n bytes are free).
	Allocate(off, n int64) error
	// Release gives back the space Allocate took from off for n bytes.
	Release(off, n int64) error
	Close() error
}

// Options tunes a Writer. The zero value takes the defaults.
type Options struct {
	// Reserve is how many bytes past its end the log keeps allocated;
	// zero means DefaultReserve, negative none (then a full disk is only
	// found by a failed write, whose lines are lost).
	Reserve int64
	// ProbeInterval is how often an unavailable log retries; zero means
	// DefaultProbeInterval.
	ProbeInterval time.Duration
	// OnChange, when set, is called when the log becomes unavailable and
	// when it is available again: once per episode each. It runs on the
	// writer's goroutine and must not block.
	OnChange func(Status)
	// Replica is written as every event's Replica (unless the event sets
	// one); empty writes none.
	Replica string
}

// Status is the health of a Writer.
type Status struct {
	// Available reports whether the last write, sync and space
	// reservation succeeded: whether an event recorded now reaches the
	// disk.
	Available bool
	// Since is when the current state began (the episode's start while
	// unavailable).
	Since time.Time
	// Err is why the log is unavailable; nil while available.
	Err error
	// WriteErrors counts failed writes, syncs and space reservations.
	WriteErrors uint64
	// Lost counts events that never reached the file.
	Lost uint64
}

// Health is implemented by a Recorder that knows whether it can write
// durably (Writer does). The proxy and the control API refuse work that
// needs an audit line while Available is false.
type Health interface {
	// Available reports whether an event recorded now reaches the disk.
	// It is one atomic load.
	Available() bool
	// Status describes the current state.
	Status() Status
}

// sink is the io.Writer behind the Writer's group commit: each batch is
// written and synced whole, or cut back off the file, so the log holds
// only whole lines. After each batch it keeps Reserve bytes allocated past
// the end; when that fails the log is unavailable, yet the lines of
// requests in flight still fit.
type sink struct {
	f        File
	reserve  int64
	interval time.Duration
	onChange func(Status)
	lost     func() uint64

	mu sync.Mutex
	// end is the size of the whole, synced lines at the file's start.
	end int64
	// torn reports that the file may hold bytes past end (a failed write
	// or sync) to cut before the next write.
	torn bool
	// needNL reports that the file ended in a line some earlier writer
	// left torn; a newline ends it before the next write so the next
	// line stays whole (readers skip and report the fragment).
	needNL  bool
	probing bool
	closed  bool
	done    chan struct{}

	down      atomic.Bool
	state     atomic.Pointer[episode]
	writeErrs atomic.Uint64
}

// episode is the current state's start and, while unavailable, its cause.
type episode struct {
	since time.Time
	err   error
}

// Write writes b (a batch of whole lines) and syncs it. On failure nothing
// of b stays in the file and the error is returned (coalesce counts the
// batch's events as lost).
func (s *sink) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.prepare(); err != nil {
		s.failed(err)
		return 0, err
	}
	n, err := s.f.Write(b)
	switch {
	case err != nil:
		err = fmt.Errorf("writing audit log: %w", err)
	case n < len(b):
		err = fmt.Errorf("writing audit log: %w", io.ErrShortWrite)
	default:
		if serr := s.f.Sync(); serr != nil {
			err = fmt.Errorf("syncing audit log: %w", serr)
		}
	}
	if err != nil {
		s.torn = true
		_ = s.prepare() // cut at once so readers never see the partial line; retried before the next write
		s.failed(err)
		return 0, err
	}
	s.end += int64(n)
	if err := s.topUp(); err != nil {
		s.failed(err)
		return n, nil
	}
	s.recovered()
	return n, nil
}

// prepare makes the file end at a line boundary: it cuts what a failed
// write left and ends a line an earlier writer left torn.
func (s *sink) prepare() error {
	if s.torn {
		if err := s.f.Truncate(s.end); err != nil {
			return fmt.Errorf("cutting audit log back to its last whole line (%d bytes): %w", s.end, err)
		}
		s.torn = false
	}
	if s.needNL {
		n, err := s.f.Write([]byte{'\n'})
		if err == nil {
			err = s.f.Sync()
		}
		if err != nil {
			s.torn = n > 0 || s.torn
			return fmt.Errorf("ending the torn last line of the audit log: %w", err)
		}
		s.end++
		s.needNL = false
	}
	return nil
}

// topUp keeps reserve bytes allocated past the end.
func (s *sink) topUp() error {
	if s.reserve <= 0 {
		return nil
	}
	if err := s.f.Allocate(s.end, s.reserve); err != nil {
		return fmt.Errorf("reserving %d KiB past the end of the audit log: %w", s.reserve>>10, err)
	}
	return nil
}

// failed counts a failure and, on the first of an episode, marks the log
// unavailable, reports it and starts probing. Called with mu held.
func (s *sink) failed(err error) {
	s.writeErrs.Add(1)
	if s.down.Load() {
		return
	}
	s.state.Store(&episode{since: time.Now(), err: err})
	s.down.Store(true)
	if !s.probing && !s.closed {
		s.probing = true
		go s.probe()
	}
	s.notify()
}

// recovered marks the log available again. Called with mu held.
func (s *sink) recovered() {
	if !s.down.Load() {
		return
	}
	s.state.Store(&episode{since: time.Now()})
	s.down.Store(false)
	s.notify()
}

func (s *sink) notify() {
	if s.onChange != nil {
		s.onChange(s.status())
	}
}

// probe retries, every interval while the log is unavailable, what the
// next write needs: a file ending at a line boundary and the reserve.
func (s *sink) probe() {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		s.mu.Lock()
		if s.closed || !s.down.Load() {
			s.probing = false
			s.mu.Unlock()
			return
		}
		err := s.prepare()
		if err == nil {
			err = s.topUp()
		}
		if err == nil {
			s.probing = false
			s.recovered()
			s.mu.Unlock()
			return
		}
		if ep := s.state.Load(); ep != nil && ep.err != nil && err.Error() != ep.err.Error() {
			s.state.Store(&episode{since: ep.since, err: err})
		}
		s.mu.Unlock()
	}
}

// close stops probing and gives back the reserve.
func (s *sink) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	close(s.done)
	if err := s.prepare(); err != nil {
		return err
	}
	if s.reserve > 0 {
		if err := s.f.Release(s.end, s.reserve); err != nil {
			return fmt.Errorf("releasing the audit log's reserved space: %w", err)
		}
	}
	return nil
}

func (s *sink) status() Status {
	st := Status{Available: !s.down.Load(), WriteErrors: s.writeErrs.Load()}
	if s.lost != nil {
		st.Lost = s.lost()
	}
	if ep := s.state.Load(); ep != nil {
		st.Since = ep.since
		if !st.Available {
			st.Err = ep.err
			if st.Err == nil {
				st.Err = errors.New("audit log unavailable")
			}
		}
	}
	return st
}
