package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// diskFile is a File on a simulated filesystem of cap bytes, of which
// other are taken by someone else: writes and allocations past the free
// space fail with ENOSPC, a write partway, as write(2) does.
type diskFile struct {
	mu       sync.Mutex
	data     []byte
	alloc    int64 // allocated up to this offset (KEEP_SIZE)
	cap      int64
	other    int64
	syncErr  error
	released bool
}

func (f *diskFile) used() int64 { return max(int64(len(f.data)), f.alloc) + f.other }

func (f *diskFile) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	room := f.cap - f.used() + max(0, f.alloc-int64(len(f.data)))
	n := min(int64(len(p)), max(room, 0))
	f.data = append(f.data, p[:n]...)
	if n < int64(len(p)) {
		return int(n), syscall.ENOSPC
	}
	return len(p), nil
}

func (f *diskFile) ReadAt(p []byte, off int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if off >= int64(len(f.data)) {
		return 0, io.EOF
	}
	return copy(p, f.data[off:]), nil
}

func (f *diskFile) Sync() error { f.mu.Lock(); defer f.mu.Unlock(); return f.syncErr }

func (f *diskFile) Truncate(size int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.data = f.data[:size]
	f.alloc = min(f.alloc, size) // truncation frees what was allocated past the end
	return nil
}

func (f *diskFile) Size() (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return int64(len(f.data)), nil
}

func (f *diskFile) Allocate(off, n int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	need := off + n - max(int64(len(f.data)), f.alloc)
	if need > 0 && f.cap-f.used() < need {
		return syscall.ENOSPC
	}
	f.alloc = max(f.alloc, off+n)
	return nil
}

func (f *diskFile) Release(off, n int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.alloc, f.released = int64(len(f.data)), true
	return nil
}

func (f *diskFile) Close() error { return nil }

func (f *diskFile) set(fn func(f *diskFile)) { f.mu.Lock(); defer f.mu.Unlock(); fn(f) }

func (f *diskFile) bytes() []byte { f.mu.Lock(); defer f.mu.Unlock(); return bytes.Clone(f.data) }

// fill takes all free space.
func (f *diskFile) fill() { f.set(func(f *diskFile) { f.other += f.cap - f.used() }) }

// checkWholeLines fails unless data is whole lines of valid events.
func checkWholeLines(t *testing.T, data []byte) int {
	t.Helper()
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Fatalf("the log ends in a partial line: %q", data[bytes.LastIndexByte(data, '\n')+1:])
	}
	n := 0
	for line := range bytes.Lines(data) {
		var e Event
		if err := json.Unmarshal(line, &e); err != nil || e.Event == "" {
			t.Fatalf("line %q is not a valid event: %v", line, err)
		}
		n++
	}
	return n
}

type changes struct {
	mu  sync.Mutex
	got []Status
}

func (c *changes) add(s Status) { c.mu.Lock(); defer c.mu.Unlock(); c.got = append(c.got, s) }
func (c *changes) list() []Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Status(nil), c.got...)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWriterReservesAndTurnsUnavailableWhenFull(t *testing.T) {
	f := &diskFile{cap: 64 << 10}
	var ch changes
	w, err := NewWriter("audit.jsonl", f, Options{Reserve: 8 << 10, ProbeInterval: 10 * time.Millisecond, OnChange: ch.add})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if !w.Available() {
		t.Fatalf("a fresh writer with room is unavailable: %v", w.Status().Err)
	}
	w.Record(Event{Event: EventProxied, SessionID: "s1"})
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.fill() // someone else takes every free byte; the reserve stays ours
	w.Record(Event{Event: EventProxied, SessionID: "s1"})
	if err := w.Flush(); err != nil {
		t.Fatalf("the line of a request under way did not fit the reserve: %v", err)
	}
	if w.Available() {
		t.Fatal("the writer is available although its reserve cannot be restored")
	}
	st := w.Status()
	if !errors.Is(st.Err, syscall.ENOSPC) || st.WriteErrors == 0 || st.Lost != 0 {
		t.Fatalf("Status = %+v, want ENOSPC, write errors counted, nothing lost", st)
	}
	// Lines of requests in flight still fit the reserve.
	for range 20 {
		w.Record(Event{Event: EventProxied, SessionID: "in-flight"})
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := checkWholeLines(t, f.bytes()); n != 22 {
		t.Fatalf("%d lines in the log, want 22", n)
	}
	f.set(func(f *diskFile) { f.other = 0 })
	waitFor(t, "the probe to find space again", w.Available)
	got := ch.list()
	if len(got) != 2 || got[0].Available || !got[1].Available {
		t.Fatalf("OnChange calls = %+v, want one unavailable then one available", got)
	}
}

func TestWriterCutsAFailedWriteBack(t *testing.T) {
	f := &diskFile{cap: 4 << 10}
	w, err := NewWriter("audit.jsonl", f, Options{Reserve: -1, ProbeInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Record(Event{Event: EventProxied, SessionID: "first"})
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.set(func(f *diskFile) { f.other = f.cap - int64(len(f.data)) - 100 }) // room for part of a line
	w.Record(Event{Event: EventProxied, SessionID: "torn", Path: "/a/long/path/so/the/line/does/not/fit/in/one/hundred/bytes"})
	if err := w.Flush(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Flush on a full disk = %v, want ENOSPC", err)
	}
	if n := checkWholeLines(t, f.bytes()); n != 1 {
		t.Fatalf("%d lines after the failed write, want the first only", n)
	}
	if w.Available() || w.Errors() != 1 {
		t.Fatalf("Available = %v, Errors = %d after a failed write; want false, 1", w.Available(), w.Errors())
	}
	f.set(func(f *diskFile) { f.other = 0 })
	w.Record(Event{Event: EventProxied, SessionID: "after"})
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := checkWholeLines(t, f.bytes()); n != 2 || !w.Available() {
		t.Fatalf("%d lines, available %v once space returned; want 2, true", n, w.Available())
	}
}

func TestWriterCutsAFailedSyncBack(t *testing.T) {
	f := &diskFile{cap: 1 << 20}
	w, err := NewWriter("audit.jsonl", f, Options{Reserve: 4 << 10, ProbeInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	f.set(func(f *diskFile) { f.syncErr = syscall.EIO })
	w.Record(Event{Event: EventProxied})
	if err := w.Flush(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Flush with a failing fsync = %v, want EIO", err)
	}
	if len(f.bytes()) != 0 || w.Available() {
		t.Fatalf("after a failed fsync the log holds %q, available %v; want it cut back, unavailable", f.bytes(), w.Available())
	}
}

func TestWriterEndsATornLastLine(t *testing.T) {
	f := &diskFile{cap: 1 << 20, data: []byte(`{"time":"2026-01-01T00:00:00Z","event":"connector.proxy.proxied","audit_id":"aud_1","bytes_in":0,"bytes_out":0,"duration_ms":0}` + "\n" + `{"time":"2026-01-01T00:00:01Z","ev`)}
	w, err := NewWriter("audit.jsonl", f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.Record(Event{Event: EventProxied, SessionID: "next"})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(f.bytes(), []byte("\n")), []byte("\n"))
	if len(lines) != 3 || string(lines[1]) != `{"time":"2026-01-01T00:00:01Z","ev` {
		t.Fatalf("lines = %q, want the torn fragment ended on its own line, then the new event", lines)
	}
	if !f.released {
		t.Fatal("Close did not give back the reserve")
	}
}

func TestWriterStartsUnavailableOnAFullDisk(t *testing.T) {
	f := &diskFile{cap: 1 << 10}
	w, err := NewWriter("audit.jsonl", f, Options{Reserve: 4 << 10, ProbeInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("NewWriter on a full disk: %v (want a writer that is unavailable)", err)
	}
	defer w.Close()
	if w.Available() {
		t.Fatal("available with no room for the reserve")
	}
	f.set(func(f *diskFile) { f.cap = 1 << 20 })
	waitFor(t, "recovery", w.Available)
}

// TestWriterOnTmpfs fills a real small filesystem (a tmpfs, mounted when
// the test runs as root).
func TestWriterOnTmpfs(t *testing.T) {
	dir := mountTmpfs(t, "4m")
	path := filepath.Join(dir, "audit.jsonl")
	w, err := OpenWith(path, Options{ProbeInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Record(Event{Event: EventProxied, SessionID: "before"})
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	fillDisk(t, filler)
	w.Record(Event{Event: EventProxied, SessionID: "under-way"})
	if err := w.Flush(); err != nil {
		t.Fatalf("the line of a request under way did not fit the reserve: %v", err)
	}
	if w.Available() || !errors.Is(w.Status().Err, syscall.ENOSPC) {
		t.Fatalf("on a full tmpfs: Available %v, Status %+v; want unavailable with ENOSPC", w.Available(), w.Status())
	}
	raw, _ := os.ReadFile(path)
	if n := checkWholeLines(t, raw); n != 2 {
		t.Fatalf("%d lines, want 2", n)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "recovery once space returned", w.Available)
}

// mountTmpfs mounts a tmpfs of size (e.g. "4m") on a new directory,
// unmounted at cleanup; it skips unless root (never under CI=true).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mounting a tmpfs (CI runs tests as root): %v", err)
		}
		t.Skipf("mounting a tmpfs needs root: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}

// fillDisk writes path until the filesystem is full.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := bytes.Repeat([]byte{'x'}, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the disk: %v", err)
			}
			break
		}
	}
	// Smaller pieces take the last partial block.
	for {
		if _, err := f.Write(buf[:1]); err != nil {
			return
		}
	}
}
