package state

import (
	"context"
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
// arrives within about a second. The writing replica delivers its own
// changes at commit. Each change reaches the hub once, whichever path saw
// it first; the hub fans it out without ever blocking.
const (
	pgPollInterval = 500 * time.Millisecond
	// pgSettle is how long after its transaction started a change row is
	// taken as final: rows with a lower seq can no longer appear, so the
	// poller's floor moves past it. Writes are short transactions.
	pgSettle = 5 * time.Second
	// pgBackoffMin and pgBackoffMax bound the listener's reconnect waits.
	pgBackoffMin = 100 * time.Millisecond
	pgBackoffMax = 5 * time.Second
	// pgListenPing is how long the listener waits quietly before it checks
	// its connection with a ping, answered within pgPingTimeout.
	pgListenPing  = 30 * time.Second
	pgPingTimeout = 5 * time.Second
	// pgChangesKeep is how long change rows are kept for pollers.
	pgChangesKeep    = time.Hour
	pgPollBatch      = 5000
	pgChangesPruneEv = 5 * time.Minute
)

// pgFeed turns the database's changes into the store's hub: the listener,
// the poller, and which changes were delivered.
type pgFeed struct {
	s      *pgStore
	cancel context.CancelFunc
	wg     sync.WaitGroup
	kick   chan struct{} // asks the poller to poll now

	mu        sync.Mutex
	floor     int64              // every change with seq <= floor was handled
	delivered map[int64]struct{} // changes above floor already delivered
}

// Watch delivers every replica's changes until ctx ends or the store
// closes; the channel is closed then.
func (s *pgStore) Watch(ctx context.Context) (<-chan Change, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := s.startFeed(ctx); err != nil {
		return nil, err
	}
	return s.hub.subscribe(ctx)
}

// startFeed starts the listener and the poller on the first Watch.
func (s *pgStore) startFeed(ctx context.Context) error {
	s.feedMu.Lock()
	defer s.feedMu.Unlock()
	if s.closed.Load() {
		return errClosed
	}
	if s.feed != nil {
		return nil
	}
	f := &pgFeed{s: s, kick: make(chan struct{}, 1), delivered: map[int64]struct{}{}}
	// Changes made before the first Watch are not delivered: the floor
	// starts at the last settled change, and the visible ones above it
	// count as delivered.
	rows, err := s.pool.Query(ctx, "SELECT seq, at < now() - $1::interval FROM changes WHERE seq > (SELECT coalesce(max(seq), 0) FROM changes WHERE at < now() - $1::interval) - 1 ORDER BY seq", pgSettle)
	if err != nil {
		return s.errorf("watching %s: %w", s.where, err)
	}
	for rows.Next() {
		var (
			seq     int64
			settled bool
		)
		if err := rows.Scan(&seq, &settled); err != nil {
			rows.Close()
			return s.errorf("watching %s: %w", s.where, err)
		}
		if settled {
			f.floor = seq
		} else {
			f.delivered[seq] = struct{}{}
		}
	}
	if err := rows.Err(); err != nil {
		return s.errorf("watching %s: %w", s.where, err)
	}
	fctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	f.wg.Add(2)
	go f.listen(fctx)
	go f.poll(fctx)
	s.feed = f
	return nil
}

// stop ends the listener and the poller.
func (f *pgFeed) stop() {
	f.cancel()
	f.wg.Wait()
}

// listen keeps a LISTEN connection open, reconnecting with backoff.
func (h *pgFeed) listen(ctx context.Context) {
	defer h.wg.Done()
	backoff := pgBackoffMin
	logged := false // one warning per outage, not one per attempt
	for {
		listened, err := h.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if listened {
			backoff, logged = pgBackoffMin, false
		}
		level := zap.WarnLevel
		if logged {
			level = zap.DebugLevel
		}
		h.s.log.Log(level, "state change listener lost; reconnecting (changes arrive by polling meanwhile)",
			zap.Error(h.s.errorf("%w", err)), zap.Duration("retry_in", backoff))
		logged = true
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
func (h *pgFeed) listenOnce(ctx context.Context) (listened bool, err error) {
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
func (h *pgFeed) poll(ctx context.Context) {
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
		if err == nil && failing {
			// The store was unreachable: whatever was missed is re-read.
			h.s.log.Info("polling state changes works again; watchers resync")
			h.s.hub.publish(Change{Kind: ChangeResync})
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

func (h *pgFeed) pollOnce(ctx context.Context) error {
	h.mu.Lock()
	floor := h.floor
	h.mu.Unlock()
	// At most pgPollBatch at a time: a backlog (after an outage) is read
	// over several polls, and a watcher that falls behind gets a resync.
	rows, err := h.s.pool.Query(ctx, "SELECT seq, kind, id, at < now() - $2::interval FROM changes WHERE seq > $1 ORDER BY seq LIMIT $3", floor, pgSettle, pgPollBatch)
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
	h.mu.Unlock()
	return nil
}

// deliver hands change seq to the hub unless it was delivered.
func (h *pgFeed) deliver(seq int64, c Change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if seq <= h.floor {
		return
	}
	if _, ok := h.delivered[seq]; ok {
		return
	}
	h.delivered[seq] = struct{}{}
	// Under h.mu, so the hub sees each replica's changes in one order.
	h.s.hub.publish(c)
}
