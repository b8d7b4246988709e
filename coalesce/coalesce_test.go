package coalesce

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder records each Write it receives; fail makes Writes fail.
type recorder struct {
	mu     sync.Mutex
	writes [][]byte
	fail   error
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return 0, r.fail
	}
	r.writes = append(r.writes, append([]byte(nil), p...))
	return len(p), nil
}

func (r *recorder) snapshot() (string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return string(bytes.Join(r.writes, nil)), len(r.writes)
}

func TestConcurrentWritesStayWholeAndOrdered(t *testing.T) {
	var rec recorder
	c := New(&rec, 50*time.Millisecond, 0)
	const writers, lines = 8, 500
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range lines {
				line := fmt.Sprintf("writer %d line %d %s\n", g, i, strings.Repeat("x", i%37))
				if n, err := c.Write([]byte(line)); n != len(line) || err != nil {
					t.Errorf("Write = %d, %v; want %d, nil", n, err, len(line))
				}
			}
		})
	}
	wg.Wait()
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	out, calls := rec.snapshot()
	next := make([]int, writers)
	got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(got) != writers*lines {
		t.Fatalf("got %d lines, want %d", len(got), writers*lines)
	}
	for _, l := range got {
		var g, i int
		if _, err := fmt.Sscanf(l, "writer %d line %d", &g, &i); err != nil {
			t.Fatalf("torn line %q: %v", l, err)
		}
		if want := fmt.Sprintf("writer %d line %d %s", g, i, strings.Repeat("x", i%37)); l != want {
			t.Fatalf("line = %q, want %q", l, want)
		}
		if i != next[g] {
			t.Fatalf("writer %d: line %d after line %d", g, i, next[g]-1)
		}
		next[g]++
	}
	if calls > writers*lines/10 {
		t.Errorf("%d underlying writes for %d lines; want them coalesced", calls, writers*lines)
	}
}

func TestWriteReachesWriterAfterDelay(t *testing.T) {
	var rec recorder
	c := New(&rec, time.Millisecond, 0)
	defer c.Close()
	c.Write([]byte("one\n"))
	rec.waitFor(t, "one\n")
	// A second batch after the first was written arms the timer again.
	c.Write([]byte("two\n"))
	rec.waitFor(t, "one\ntwo\n")
}

// waitFor waits up to 5s, without flushing, for the writer to hold want.
func (r *recorder) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, _ := r.snapshot()
		if out == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 5s the writer has %q, want %q without Flush", out, want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestFullBufferFlushesInTheCaller(t *testing.T) {
	var rec recorder
	c := New(&rec, time.Hour, 10)
	defer c.Close()
	c.Write([]byte("12345"))
	if out, _ := rec.snapshot(); out != "" {
		t.Fatalf("written before the buffer filled: %q", out)
	}
	c.Write([]byte("67890ab"))
	if out, calls := rec.snapshot(); out != "1234567890ab" || calls != 1 {
		t.Fatalf("after filling the buffer: %q in %d writes, want %q in 1", out, calls, "1234567890ab")
	}
}

func TestFlushAndNoRetention(t *testing.T) {
	var rec recorder
	c := New(&rec, time.Hour, 0)
	p := []byte("line\n")
	c.Write(p)
	copy(p, "XXXX")
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if out, _ := rec.snapshot(); out != "line\n" {
		t.Fatalf("after Flush: %q, want %q (Write must copy p)", out, "line\n")
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("empty Flush: %v", err)
	}
	if _, calls := rec.snapshot(); calls != 1 {
		t.Errorf("an empty Flush wrote: %d writes", calls)
	}
}

func TestErrorsAreCountedAndKept(t *testing.T) {
	boom := errors.New("disk full")
	rec := recorder{fail: boom}
	c := New(&rec, time.Hour, 0)
	c.Write([]byte("a\n"))
	c.Write([]byte("b\n"))
	if err := c.Flush(); !errors.Is(err, boom) {
		t.Fatalf("Flush = %v, want %v", err, boom)
	}
	if c.Lost() != 2 {
		t.Errorf("Lost = %d, want 2", c.Lost())
	}
	rec.mu.Lock()
	rec.fail = nil
	rec.mu.Unlock()
	c.Write([]byte("c\n"))
	if err := c.Close(); !errors.Is(err, boom) {
		t.Errorf("Close = %v, want the first error %v", err, boom)
	}
	if out, _ := rec.snapshot(); out != "c\n" {
		t.Errorf("after recovery: %q, want %q", out, "c\n")
	}
	if _, err := c.Write([]byte("d\n")); !errors.Is(err, ErrClosed) {
		t.Errorf("Write after Close = %v, want ErrClosed", err)
	}
}

// BenchmarkWrite measures a caller's cost per line; compare with the file
// write it replaces.
func BenchmarkWrite(b *testing.B) {
	var rec recorder
	c := New(&rec, 0, 0)
	line := []byte(`{"time":"2026-11-22T06:00:00Z","event":"connector.proxy.proxied","status":200}` + "\n")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Write(line)
		}
	})
	c.Close()
}
