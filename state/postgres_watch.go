package state

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
)

// How the Postgres store's Watch works: every write records its change in
// the changes table and sends a notification in the same transaction. One
// dedicated connection per Store LISTENs (reconnecting with backoff), and
// a poller reads the changes table every pgPollInterval, so a change whose
// notification was lost (a dropped connection, a restarted server) still
// arrives within about a second. Each change is delivered once per
// subscriber, whichever path saw it first.
const (
	pgPollInterval = 500 * time.Millisecond
	// pgSettle is how long after its transaction started a change row is
	// taken as final: rows with a lower seq can no longer appear, so the
	// poller's floor moves past it. Writes are short transactions.
	pgSettle = 5 * time.Second
	// pgSubBuffer is each subscriber's buffer; a subscriber that falls
	// further behind gets one pgChangeResync instead of what it missed.
	pgSubBuffer = 256
	// pgBackoffMin and pgBackoffMax bound the listener's reconnect waits.
	pgBackoffMin = 100 * time.Millisecond
	pgBackoffMax = 5 * time.Second
	// pgListenPing is how long the listener waits quietly before it checks
	// its connection with a ping, answered within pgPingTimeout.
	pgListenPing  = 30 * time.Second
	pgPingTimeout = 5 * time.Second
	// pgChangesKeep is how long change rows are kept for pollers.
	pgChangesKeep    = time.Hour
	pgChangesPruneEv = 5 * time.Minute
)

// pgChangeResync tells a subscriber it missed changes: re-read everything.
const pgChangeResync ChangeKind = "resync"

// pgHub fans the changes of one Store out to its Watch subscribers.
type pgHub struct {
	s      *pgStore
	cancel context.CancelFunc
	done   chan struct{} // closed when the hub stopped
	wg     sync.WaitGroup
	kick   chan struct{} // asks the poller to poll now

	mu        sync.Mutex
	subs      map[*pgSub]struct{}
	floor     int64              // every change with seq <= floor was handled
	delivered map[int64]struct{} // changes above floor already delivered
}

type pgSub struct {
	ch       chan Change
	overflow bool // changes were dropped: owes a resync
}

// Watch delivers every replica's changes until ctx ends or the store
// closes; the channel is closed then.
func (s *pgStore) Watch(ctx context.Context) (<-chan Change, error) {
	h, err := s.startHub(ctx)
	if err != nil {
		return nil, err
	}
	sub := &pgSub{ch: make(chan Change, pgSubBuffer)}
	h.mu.Lock()
	if h.subs == nil { // stopped
		h.mu.Unlock()
		return nil, fmt.Errorf("watching %s: the store is closed", s.where)
	}
	h.subs[sub] = struct{}{}
	h.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-h.done:
		}
		h.mu.Lock()
		if _, ok := h.subs[sub]; ok {
			delete(h.subs, sub)
			close(sub.ch)
		}
		h.mu.Unlock()
	}()
	return sub.ch, nil
}

// startHub starts the listener and the poller on the first Watch.
func (s *pgStore) startHub(ctx context.Context) (*pgHub, error) {
	s.hubMu.Lock()
	defer s.hubMu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("watching %s: the store is closed", s.where)
	}
	if s.hub != nil {
		return s.hub, nil
	}
	h := &pgHub{
		s: s, done: make(chan struct{}), kick: make(chan struct{}, 1),
		subs: map[*pgSub]struct{}{}, delivered: map[int64]struct{}{},
	}
	// Changes made before the first Watch are not delivered: the floor
	// starts at the last settled change, and the visible ones above it
	// count as delivered.
	rows, err := s.pool.Query(ctx, "SELECT seq, at < now() - $1::interval FROM changes WHERE seq > (SELECT coalesce(max(seq), 0) FROM changes WHERE at < now() - $1::interval) - 1 ORDER BY seq", pgSettle)
	if err != nil {
		return nil, s.errorf("watching %s: %w", s.where, err)
	}
	for rows.Next() {
		var (
			seq     int64
			settled bool
		)
		if err := rows.Scan(&seq, &settled); err != nil {
			rows.Close()
			return nil, s.errorf("watching %s: %w", s.where, err)
		}
		if settled {
			h.floor = seq
		} else {
			h.delivered[seq] = struct{}{}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, s.errorf("watching %s: %w", s.where, err)
	}
	hctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.wg.Add(2)
	go h.listen(hctx)
	go h.poll(hctx)
	s.hub = h
	return h, nil
}

// stop ends the listener and the poller and closes every subscriber.
func (h *pgHub) stop() {
	h.cancel()
	h.wg.Wait()
	h.mu.Lock()
	for sub := range h.subs {
		close(sub.ch)
	}
	h.subs = nil
	h.mu.Unlock()
	close(h.done)
}

// listen keeps a LISTEN connection open, reconnecting with backoff.
func (h *pgHub) listen(ctx context.Context) {
	defer h.wg.Done()
	backoff := pgBackoffMin
	for {
		listened, err := h.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if listened {
			backoff = pgBackoffMin
		}
		h.s.log.Warn("state change listener lost; reconnecting (changes arrive by polling meanwhile)",
			zap.Error(h.s.errorf("%w", err)), zap.Duration("retry_in", backoff))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, pgBackoffMax)
	}
}

// listenOnce connects, LISTENs and delivers notifications until the
// connection fails; listened reports whether LISTEN succeeded.
func (h *pgHub) listenOnce(ctx context.Context) (listened bool, err error) {
	cfg := h.s.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = "aileron-proxy state listener"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgChannel); err != nil {
		return false, err
	}
	// Whatever was sent while no one listened: poll now.
	select {
	case h.kick <- struct{}{}:
	default:
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, h.s.listenPing)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil && ctx.Err() == nil && wctx.Err() != nil && !conn.IsClosed() {
			// Quiet for a while: make sure the connection still works (a
			// dropped one may otherwise go unnoticed for hours).
			pctx, cancel := context.WithTimeout(ctx, pgPingTimeout)
			err = conn.Ping(pctx)
			cancel()
			if err != nil {
				return true, err
			}
			continue
		}
		if err != nil {
			return true, err
		}
		seq, c, ok := parsePgNotification(n.Payload)
		if !ok {
			h.s.log.Warn("ignoring a malformed state change notification", zap.Int("payload_bytes", len(n.Payload)))
			continue
		}
		h.deliver(seq, c)
	}
}

// parsePgNotification reads "<seq>:<kind>:<id>".
func parsePgNotification(p string) (int64, Change, bool) {
	seqS, rest, ok := strings.Cut(p, ":")
	if !ok {
		return 0, Change{}, false
	}
	kind, id, ok := strings.Cut(rest, ":")
	seq, err := strconv.ParseInt(seqS, 10, 64)
	if !ok || err != nil || seq <= 0 || kind == "" {
		return 0, Change{}, false
	}
	return seq, Change{Kind: ChangeKind(kind), ID: id}, true
}

// poll reads the changes table every pgPollInterval (and when kicked),
// delivering what the listener missed.
func (h *pgHub) poll(ctx context.Context) {
	defer h.wg.Done()
	tick := time.NewTicker(pgPollInterval)
	defer tick.Stop()
	lastPrune := time.Now()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-h.kick:
		}
		err := h.pollOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil && !failing {
			h.s.log.Warn("polling state changes failed; retrying", zap.Error(h.s.errorf("%w", err)))
		}
		failing = err != nil
		if time.Since(lastPrune) > pgChangesPruneEv {
			lastPrune = time.Now()
			if _, err := h.s.pool.Exec(ctx, "DELETE FROM changes WHERE at < now() - $1::interval", pgChangesKeep); err != nil {
				h.s.log.Debug("pruning old state changes failed", zap.Error(h.s.errorf("%w", err)))
			}
		}
	}
}

func (h *pgHub) pollOnce(ctx context.Context) error {
	h.mu.Lock()
	floor := h.floor
	h.mu.Unlock()
	rows, err := h.s.pool.Query(ctx, "SELECT seq, kind, id, at < now() - $2::interval FROM changes WHERE seq > $1 ORDER BY seq", floor, pgSettle)
	if err != nil {
		return err
	}
	newFloor := floor
	type row struct {
		seq int64
		c   Change
	}
	var got []row
	for rows.Next() {
		var (
			r       row
			kind    string
			settled bool
		)
		if err := rows.Scan(&r.seq, &kind, &r.c.ID, &settled); err != nil {
			rows.Close()
			return err
		}
		r.c.Kind = ChangeKind(kind)
		got = append(got, r)
		if settled {
			newFloor = r.seq
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, r := range got {
		h.deliver(r.seq, r.c)
	}
	h.mu.Lock()
	if newFloor > h.floor {
		h.floor = newFloor
		for seq := range h.delivered {
			if seq <= newFloor {
				delete(h.delivered, seq)
			}
		}
	}
	for sub := range h.subs {
		sub.flush()
	}
	h.mu.Unlock()
	return nil
}

// deliver sends change seq to every subscriber unless it was delivered.
// It never blocks: a full subscriber owes a resync instead.
func (h *pgHub) deliver(seq int64, c Change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if seq <= h.floor {
		return
	}
	if _, ok := h.delivered[seq]; ok {
		return
	}
	h.delivered[seq] = struct{}{}
	for sub := range h.subs {
		if !sub.flush() {
			continue
		}
		select {
		case sub.ch <- c:
		default:
			sub.overflow = true
		}
	}
}

// flush sends a resync a subscriber owes, and reports whether it owes
// none now. Called with the hub's lock held.
func (sub *pgSub) flush() bool {
	if !sub.overflow {
		return true
	}
	select {
	case sub.ch <- Change{Kind: pgChangeResync}:
		sub.overflow = false
		return true
	default:
		return false
	}
}
