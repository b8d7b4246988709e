package audit

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
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
		if err := tl.lines(line[:split], 0, emit); err != nil {
			t.Fatal(err)
		}
		if err := tl.lines(line[split:], int64(split), emit); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Path != "/x" {
			t.Fatalf("split %d: %+v", split, got)
		}
	}
}

// TestTailSkipsAndReportsTornLines: a log an older writer left with torn
// lines (a write cut short mid-line, the next event appended right after
// it, and a fragment ending the file then given its own line) is read
// without failing: every whole event is delivered and each torn fragment
// is reported with its offset.
func TestTailSkipsAndReportsTornLines(t *testing.T) {
	a, _ := Marshal(Event{Event: EventProxied, Path: "/a"})
	b, _ := Marshal(Event{Event: EventProxied, Path: "/b"})
	c, _ := Marshal(Event{Event: EventProxied, Path: "/c"})
	d, _ := Marshal(Event{Event: EventProxied, Path: "/d"})
	torn := b[:len(b)/2]
	var log []byte
	log = append(log, a...)
	log = append(log, torn...) // cut short; c follows on the same line
	log = append(log, c...)
	log = append(log, torn...) // a fragment later ended by a newline
	log = append(log, '\n')
	log = append(log, "not json\n"...)
	log = append(log, d...)
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	if err := os.WriteFile(path, log, 0o600); err != nil {
		t.Fatal(err)
	}
	var got []string
	var skips []Skipped
	err := Tail(context.Background(), path, TailOptions{OnSkip: func(s Skipped) { skips = append(skips, s) }}, func(e Event) error {
		got = append(got, e.Path)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "/a,/c,/d" {
		t.Fatalf("events %v, want /a,/c,/d", got)
	}
	first := int64(len(a))
	second := first + int64(len(torn)+len(c))
	want := []Skipped{
		{Offset: first, Length: len(torn), Torn: true},
		{Offset: second, Length: len(torn), Torn: true},
		{Offset: second + int64(len(torn)) + 1, Length: len("not json")},
	}
	if !reflect.DeepEqual(skips, want) {
		t.Fatalf("skipped %+v, want %+v", skips, want)
	}
	if s := skips[0].String(); !strings.Contains(s, "torn line at byte") {
		t.Errorf("Skipped.String() = %q", s)
	}
}
