package session

import (
	"container/heap"
	"context"
	"time"
)

// Sweeping: the registry keeps every entry in a min-heap ordered by its next
// due time, so the work of expiry and pruning is proportional to the
// sessions it concerns, never to the sessions held.
//
// An entry's due time is its session's ExpiresAt while it is live; once it
// has ended, or its expiry has been notified, it is the time it may be
// forgotten (RetainEnded later). A sweep pops due entries from the top:
// a live one that has expired is notified (OnEnd) and re-queued to be
// forgotten; a finished one past its retention is forgotten.
const (
	// createSweep bounds the due entries Create handles, so a mass expiry
	// never makes one Create pay for the whole fleet.
	createSweep = 16
	// DefaultSweepInterval is how often Run sweeps.
	DefaultSweepInterval = 250 * time.Millisecond
	// sweepChunk is how many due entries Run handles between two looks at
	// its time budget.
	sweepChunk = 16
)

// dueHeap is a min-heap of entries by due time (container/heap); each
// entry's index is its position, for heap.Fix.
type dueHeap []*entry

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *dueHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}

func (h *dueHeap) Pop() any {
	old := *h
	n := len(old)
	e := old[n-1]
	old[n-1] = nil
	e.index = -1
	*h = old[:n-1]
	return e
}

// sweepLocked handles at most limit entries due at now: it queues the OnEnd
// notification of each expiry not yet observed and forgets the entries
// whose retention has passed. It reports how many it handled.
func (r *Registry) sweepLocked(now time.Time, limit int, ends *[]pendingEnd) int {
	n := 0
	for n < limit && len(r.due) > 0 {
		e := r.due[0]
		if now.Before(e.due) {
			break
		}
		n++
		if !e.ended && !e.notified {
			// Due as a live session: it has expired.
			_ = r.checkLocked(e, now, ends)
		}
		if forget := r.forgetAt(e); now.Before(forget) {
			e.due = forget
			heap.Fix(&r.due, 0)
			continue
		}
		heap.Pop(&r.due)
		delete(r.byID, e.sess.ID)
		delete(r.byAPI, e.apiHash)
	}
	return n
}

// forgetAt is when a finished entry may be forgotten.
func (r *Registry) forgetAt(e *entry) time.Time {
	if e.ended {
		return e.endedAt.Add(r.retainEnded)
	}
	return e.sess.ExpiresAt.Add(r.retainEnded)
}

// Sweep notifies (OnEnd) at most limit expiries due at the registry's now,
// and forgets ended and expired sessions past RetainEnded, outside the
// lock. It reports how many due entries it handled; a result of limit means
// more may be due. Zero or negative limit means no bound.
func (r *Registry) Sweep(limit int) int {
	if limit <= 0 {
		limit = int(^uint(0) >> 1)
	}
	var ends []pendingEnd
	r.mu.Lock()
	n := r.sweepLocked(r.now(), limit, &ends)
	r.mu.Unlock()
	r.notify(ends)
	return n
}

// Run sweeps every interval (DefaultSweepInterval when zero) until ctx
// ends, so that expiries are notified within an interval of happening
// rather than when the session is next used. Each sweep stops once it has
// spent a tenth of the interval (OnEnd included): a mass expiry is spread
// over as many sweeps as it needs and never takes more than a tenth of a
// core from the proxy. Without Run, expiry is still observed at use and by
// Create.
func (r *Registry) Run(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultSweepInterval
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			deadline := time.Now().Add(interval / 10)
			for r.Sweep(sweepChunk) == sweepChunk && time.Now().Before(deadline) && ctx.Err() == nil {
			}
		}
	}
}

// addLocked registers e, due at its session's expiry.
func (r *Registry) addLocked(e *entry) {
	e.internalHash = digest(r.InternalProxySecret(e.sess.ID))
	r.byID[e.sess.ID] = e
	r.byAPI[e.apiHash] = e
	e.due = e.sess.ExpiresAt
	heap.Push(&r.due, e)
}
