package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"time"
)

// DefaultPollInterval is how often Tail checks for new lines when following.
const DefaultPollInterval = 200 * time.Millisecond

// maxLine bounds one audit line; longer lines are skipped.
const maxLine = 1 << 20

// TailOptions configures Tail.
type TailOptions struct {
	// Follow keeps reading new lines as they are appended (waiting for the
	// file to appear, reopening it when it is replaced or truncated) until
	// ctx is done.
	Follow bool
	// SessionID, when set, selects events of that session only.
	SessionID string
	// Lines limits the existing events shown to the last Lines matching
	// ones; zero or negative means all.
	Lines int
	// PollInterval is the follow poll period; zero means
	// DefaultPollInterval.
	PollInterval time.Duration
	// OnSkip, when set, is told about each line that is not a whole event
	// (skipped either way).
	OnSkip func(Skipped)
}

// Skipped describes a line Tail skipped.
type Skipped struct {
	// Offset is the line's first byte in the file; Length its length
	// without the newline.
	Offset int64
	Length int
	// Torn reports a fragment of an event whose write was cut short (an
	// older writer on a full disk); the event appended after it, when
	// whole, is still delivered.
	Torn bool
	// TooLong reports a line longer than 1 MiB.
	TooLong bool
}

// String describes s for a person.
func (s Skipped) String() string {
	switch {
	case s.Torn:
		return fmt.Sprintf("skipped a torn line at byte %d (%d bytes; a write cut short, e.g. by a full disk)", s.Offset, s.Length)
	case s.TooLong:
		return fmt.Sprintf("skipped a line longer than 1 MiB at byte %d", s.Offset)
	}
	return fmt.Sprintf("skipped a line that is not an audit event at byte %d (%d bytes)", s.Offset, s.Length)
}

// Tail calls fn for the events in the audit log at path that match opts,
// oldest first. Lines that are not valid events are skipped and reported
// to opts.OnSkip; an event written right after a torn fragment, on the
// same line, is found and delivered. With Follow it
// then waits for new events until ctx is done and returns nil; without
// Follow a missing file is an error matching fs.ErrNotExist. An error from
// fn stops Tail and is returned.
func Tail(ctx context.Context, path string, opts TailOptions, fn func(Event) error) error {
	poll := opts.PollInterval
	if poll <= 0 {
		poll = DefaultPollInterval
	}
	t := &tailer{path: path, opts: opts, fn: fn}
	for {
		err := t.open()
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || !opts.Follow {
			return err
		}
		if !sleep(ctx, poll) {
			return nil
		}
	}
	defer func() { t.f.Close() }()

	// Existing content: keep the last Lines matching events in a ring
	// (ring[next] is the oldest once it is full).
	var ring []Event
	next := 0
	err := t.read(func(e Event) error {
		if opts.Lines <= 0 {
			return fn(e)
		}
		if len(ring) < opts.Lines {
			ring = append(ring, e)
			return nil
		}
		ring[next] = e
		next = (next + 1) % len(ring)
		return nil
	})
	if err != nil {
		return err
	}
	for _, e := range slices.Concat(ring[next:], ring[:next]) {
		if err := fn(e); err != nil {
			return err
		}
	}
	if !opts.Follow {
		return ctx.Err()
	}
	for sleep(ctx, poll) {
		if err := t.read(fn); err != nil {
			return err
		}
		if err := t.checkReplaced(); err != nil {
			return err
		}
	}
	return nil
}

// sleep waits d and reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

type tailer struct {
	path    string
	opts    TailOptions
	fn      func(Event) error
	f       *os.File
	info    os.FileInfo
	off     int64
	partial []byte
	// partialAt is the file offset of partial's first byte.
	partialAt int64
	skip      bool // discarding the rest of an over-long line
	buf       []byte
}

func (t *tailer) open() error {
	f, err := os.Open(t.path)
	if err != nil {
		return fmt.Errorf("opening audit log %q: %w (serve creates it when it records the first event)", t.path, err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("reading audit log %q: %w", t.path, err)
	}
	t.f, t.info, t.off, t.partial, t.skip = f, info, 0, nil, false
	return nil
}

// read delivers every complete new line, keeping a trailing partial line
// for the next call.
func (t *tailer) read(emit func(Event) error) error {
	if t.buf == nil {
		t.buf = make([]byte, 64<<10)
	}
	for {
		n, err := t.f.Read(t.buf)
		if n > 0 {
			base := t.off
			t.off += int64(n)
			if err := t.lines(t.buf[:n], base, emit); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) || (n == 0 && err == nil) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading audit log %q: %w", t.path, err)
		}
	}
}

// lines delivers the complete lines of data, which starts at file offset
// base.
func (t *tailer) lines(data []byte, base int64, emit func(Event) error) error {
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			if !t.skip {
				if len(t.partial) == 0 {
					t.partialAt = base
				}
				t.partial = append(t.partial, data...)
				if len(t.partial) > maxLine {
					t.skipped(Skipped{Offset: t.partialAt, Length: len(t.partial), TooLong: true})
					t.partial, t.skip = nil, true
				}
			}
			return nil
		}
		line, at := data[:i], base
		data, base = data[i+1:], base+int64(i+1)
		if t.skip {
			t.skip = false
			continue
		}
		if len(t.partial) > 0 {
			line, at = append(t.partial, line...), t.partialAt
			t.partial = nil
		}
		if err := t.line(line, at, emit); err != nil {
			return err
		}
	}
	return nil
}

// eventStart begins every line Writer writes (Time is the first field).
var eventStart = []byte(`{"time":`)

// line delivers one line at file offset at, if it is an event that
// matches.
func (t *tailer) line(line []byte, at int64, emit func(Event) error) error {
	if len(bytes.TrimSpace(line)) == 0 {
		return nil
	}
	e, ok := parseEvent(line)
	if !ok {
		// A write cut short leaves a fragment without its newline, and the
		// next event is appended right after it: look for that event.
		j := bytes.LastIndex(line, eventStart)
		if j > 0 {
			e, ok = parseEvent(line[j:])
		}
		if !ok {
			t.skipped(Skipped{Offset: at, Length: len(line), Torn: bytes.HasPrefix(line, eventStart)})
			return nil
		}
		t.skipped(Skipped{Offset: at, Length: j, Torn: true})
	}
	if t.opts.SessionID != "" && e.SessionID != t.opts.SessionID {
		return nil
	}
	return emit(e)
}

func parseEvent(line []byte) (Event, bool) {
	var e Event
	if json.Unmarshal(line, &e) != nil || e.Event == "" {
		return Event{}, false
	}
	return e, true
}

func (t *tailer) skipped(s Skipped) {
	if t.opts.OnSkip != nil {
		t.opts.OnSkip(s)
	}
}

// checkReplaced reopens the log when the path now names another file, and
// starts over when the file was truncated.
func (t *tailer) checkReplaced() error {
	info, err := os.Stat(t.path)
	if err != nil {
		return nil // removed: keep the old handle until a new file appears
	}
	if !os.SameFile(info, t.info) {
		old := t.f
		if err := t.open(); err != nil {
			return nil // raced with another replacement; retry next poll
		}
		old.Close()
		return t.read(t.fn)
	}
	if info.Size() < t.off {
		if _, err := t.f.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("rewinding truncated audit log %q: %w", t.path, err)
		}
		t.off, t.partial, t.skip = 0, nil, false
		return t.read(t.fn)
	}
	return nil
}
