package state

import (
	"context"
	"sync"
)

// watchBuffer is how many changes a subscriber may fall behind before it
// is sent one ChangeResync instead of the changes it missed.
const watchBuffer = 256

// hub fans changes out to this process's subscribers. Publish never
// blocks: a subscriber that falls watchBuffer changes behind loses them and
// gets one ChangeResync when it catches up. Both backends use it (Postgres
// feeds it the notifications of other replicas).
type hub struct {
	mu     sync.Mutex
	subs   map[*subscriber]struct{}
	closed bool
}

type subscriber struct {
	mu      sync.Mutex
	queue   []Change
	overrun bool          // queue was full: the next delivery is a resync
	wake    chan struct{} // capacity 1: something was queued
	done    chan struct{} // closed when the hub closes
}

func newHub() *hub { return &hub{subs: make(map[*subscriber]struct{})} }

// subscribe returns a channel of changes published from now until ctx ends
// or the hub closes; then the channel is closed.
func (h *hub) subscribe(ctx context.Context) (<-chan Change, error) {
	s := &subscriber{wake: make(chan struct{}, 1), done: make(chan struct{})}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, errClosed
	}
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	out := make(chan Change)
	go func() {
		defer close(out)
		defer func() {
			h.mu.Lock()
			delete(h.subs, s)
			h.mu.Unlock()
		}()
		for {
			s.mu.Lock()
			var next []Change
			if s.overrun {
				next = []Change{{Kind: ChangeResync}}
				s.overrun = false
				s.queue = s.queue[:0]
			} else {
				next = s.queue
				s.queue = nil
			}
			s.mu.Unlock()
			for _, c := range next {
				select {
				case out <- c:
				case <-ctx.Done():
					return
				case <-s.done:
					return
				}
			}
			if len(next) > 0 {
				continue
			}
			select {
			case <-s.wake:
			case <-ctx.Done():
				return
			case <-s.done:
				return
			}
		}
	}()
	return out, nil
}

// publish queues c for every subscriber without waiting for any.
func (h *hub) publish(cs ...Change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		s.mu.Lock()
		if !s.overrun {
			if len(s.queue)+len(cs) > watchBuffer {
				s.overrun = true
				s.queue = nil
			} else {
				s.queue = append(s.queue, cs...)
			}
		}
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// close ends every subscription (their channels close).
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	for s := range h.subs {
		close(s.done)
	}
}
