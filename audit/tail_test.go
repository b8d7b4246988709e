package audit

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func collect(t *testing.T, path string, opts TailOptions) []Event {
	t.Helper()
	var got []Event
	if err := Tail(t.Context(), path, opts, func(e Event) error { got = append(got, e); return nil }); err != nil {
		t.Fatalf("Tail: %v", err)
	}
	return got
}

func TestTailFiltersAndLimits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit", "audit.jsonl")
	w, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		sid := "a"
		if i%2 == 1 {
			sid = "b"
		}
		w.Record(Event{Event: EventProxied, SessionID: sid, Path: "/" + strconv.Itoa(i)})
	}
	w.Close()
	// Garbage and a partial last line are skipped.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	_, _ = f.WriteString("not json\n{}\n{\"event\":\"connector.proxy.denied\",\"path\":\"/part")
	f.Close()

	if got := collect(t, path, TailOptions{}); len(got) != 10 || got[0].Path != "/0" || got[9].Path != "/9" {
		t.Fatalf("all: %d events %+v", len(got), got)
	}
	got := collect(t, path, TailOptions{SessionID: "b", Lines: 2})
	if len(got) != 2 || got[0].Path != "/7" || got[1].Path != "/9" {
		t.Fatalf("session b, last 2: %+v", got)
	}
	if got := collect(t, path, TailOptions{Lines: 100}); len(got) != 10 {
		t.Fatalf("Lines beyond the count: %d events", len(got))
	}
	stop := errors.New("stop")
	n := 0
	err = Tail(t.Context(), path, TailOptions{}, func(Event) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("Tail with failing fn = %v after %d calls", err, n)
	}
	err = Tail(t.Context(), filepath.Join(t.TempDir(), "none.jsonl"), TailOptions{}, func(Event) error { return nil })
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Tail(missing) = %v, want fs.ErrNotExist", err)
	}
}

func TestTailFollow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit", "audit.jsonl")
	ctx, cancel := context.WithCancel(t.Context())
	events := make(chan Event, 100)
	done := make(chan error, 1)
	go func() {
		done <- Tail(ctx, path, TailOptions{Follow: true, SessionID: "s1", PollInterval: 20 * time.Millisecond},
			func(e Event) error { events <- e; return nil })
	}()
	next := func(want string) {
		t.Helper()
		select {
		case e := <-events:
			if e.Path != want {
				t.Fatalf("got event %q, want %q", e.Path, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no event %q within 5s", want)
		}
	}

	// The file does not exist yet.
	w, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	w.Record(Event{Event: EventProxied, SessionID: "s2", Path: "/other"})
	w.Record(Event{Event: EventProxied, SessionID: "s1", Path: "/one"})
	next("/one")

	// A line written in two pieces arrives once, whole. (The pause only
	// makes it likely that a poll sees the first piece alone.)
	line, _ := Marshal(Event{Event: EventDenied, SessionID: "s1", Path: "/split"})
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.Write(line[:10])
	time.Sleep(60 * time.Millisecond)
	_, _ = f.Write(line[10:])
	f.Close()
	next("/split")

	// A replaced file (rotation by rename) is reopened and read from the start.
	w.Close()
	rotated, _ := Marshal(Event{Event: EventProxied, SessionID: "s1", Path: "/rotated"})
	if err := os.WriteFile(path+".new", rotated, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	next("/rotated")

	// A truncated file is read again from the start.
	w2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	for range 20 {
		w2.Record(Event{Event: EventProxied, SessionID: "s2", Path: "/filler"})
	}
	w2.Record(Event{Event: EventProxied, SessionID: "s1", Path: "/before-truncate"})
	next("/before-truncate")
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	w2.Record(Event{Event: EventProxied, SessionID: "s1", Path: "/after-truncate"})
	next("/after-truncate")

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Tail returned %v after cancel, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Tail did not stop after cancel")
	}
	select {
	case e := <-events:
		t.Fatalf("unexpected extra event %+v", e)
	default:
	}
}

func TestTailerJoinsSplitLines(t *testing.T) {
	line, _ := Marshal(Event{Event: EventDenied, Path: "/x"})
	for split := 0; split <= len(line); split++ {
		tl := &tailer{}
		var got []Event
		emit := func(e Event) error { got = append(got, e); return nil }
		if err := tl.lines(line[:split], emit); err != nil {
			t.Fatal(err)
		}
		if err := tl.lines(line[split:], emit); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Path != "/x" {
			t.Fatalf("split %d: %+v", split, got)
		}
	}
}
