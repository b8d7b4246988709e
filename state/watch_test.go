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
	h.publish(Change{Kind: ChangeSessionEnded, ID: "later"})
	select {
	case c := <-ch:
		if c != (Change{Kind: ChangeSessionEnded, ID: "later"}) {
			t.Errorf("after the resync got %+v, want the later change", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing delivered after the resync")
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
