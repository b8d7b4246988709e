package testkit

import (
	"sync"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/audit"
)

// waitLimit bounds every wait for an audit event.
const waitLimit = 10 * time.Second

// Recorder is an audit.Recorder for tests: it keeps every event exactly as
// recorded (not normalized, so a test sees what the code under test
// produced) and lets a test wait, bounded, for one.
type Recorder struct {
	mu     sync.Mutex
	events []audit.Event
	next   int
	notify chan struct{}
}

var _ audit.Recorder = (*Recorder)(nil)

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{notify: make(chan struct{}, 1)} }

// Record keeps e and wakes a waiting test.
func (r *Recorder) Record(e audit.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// All returns a copy of the events recorded so far, oldest first.
func (r *Recorder) All() []audit.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]audit.Event(nil), r.events...)
}

// WaitFor returns the first event matching pred, waiting up to 10 s; what
// describes it in the failure.
func (r *Recorder) WaitFor(t testing.TB, what string, pred func(audit.Event) bool) audit.Event {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		for _, e := range r.All() {
			if pred(e) {
				return e
			}
		}
		select {
		case <-r.notify:
		case <-deadline:
			t.Fatalf("no audit event %s within %s; got %+v", what, waitLimit, r.All())
			return audit.Event{}
		}
	}
}

// Next returns the event after the one Next returned last (the first on
// the first call), waiting up to 10 s.
func (r *Recorder) Next(t testing.TB) audit.Event {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		r.mu.Lock()
		if r.next < len(r.events) {
			e := r.events[r.next]
			r.next++
			r.mu.Unlock()
			return e
		}
		r.mu.Unlock()
		select {
		case <-r.notify:
		case <-deadline:
			t.Fatalf("no audit event within %s", waitLimit)
			return audit.Event{}
		}
	}
}
