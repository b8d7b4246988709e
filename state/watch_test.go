package state

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestHubOverrun: a subscriber that does not read while far more than
// watchBuffer changes are published gets a ChangeResync in place of the
// ones it missed, and then hears new changes again; publish never waits.
func TestHubOverrun(t *testing.T) {
	h := newHub()
	defer h.close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := h.subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3*watchBuffer + 7
	start := time.Now()
	for i := range n {
		h.publish(Change{Kind: ChangeSessionCreated, ID: fmt.Sprint(i)})
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("publishing %d changes to a subscriber that does not read took %v", n, d)
	}
	got, resync := 0, false
	for !resync {
		select {
		case c := <-ch:
			if c.Kind == ChangeResync {
				resync = true
			} else {
				got++
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no resync after %d changes", got)
		}
	}
	if got >= n {
		t.Errorf("received all %d changes and a resync", got)
	}
	// Changes published after the resync was queued may follow it (or
	// overrun again: another resync); a change published now arrives, or
	// a resync after it was dropped.
	h.publish(Change{Kind: ChangeSessionEnded, ID: "later"})
	for later := false; !later; {
		select {
		case c := <-ch:
			later = c == (Change{Kind: ChangeSessionEnded, ID: "later"}) || c.Kind == ChangeResync
		case <-time.After(5 * time.Second):
			t.Fatal("the later change was not delivered after the resync")
		}
	}
	// Caught up now: the next change arrives as itself.
	h.publish(Change{Kind: ChangeSessionEnded, ID: "final"})
	for final := false; !final; {
		select {
		case c := <-ch:
			final = c == (Change{Kind: ChangeSessionEnded, ID: "final"})
			if c.Kind == ChangeResync {
				t.Fatal("a resync although the subscriber has caught up")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the final change was not delivered")
		}
	}
	cancel()
	select {
	case _, ok := <-ch:
		if ok {
			// One more change may have been in flight; the next read closes.
			if _, ok := <-ch; ok {
				t.Error("channel still open after ctx ended")
			}
		}
	case <-time.After(5 * time.Second):
		t.Fatal("channel not closed after ctx ended")
	}
}
