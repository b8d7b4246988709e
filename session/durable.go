package session

import (
	"container/heap"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"

	"github.com/aileron-dev/aileron-proxy/ca"
	"github.com/aileron-dev/aileron-proxy/internal/hostport"
	"github.com/aileron-dev/aileron-proxy/policy"
	"github.com/aileron-dev/aileron-proxy/state"
)

// Bounds of the Registry's use of its Store.
const (
	// storeTimeout bounds one store call made without a caller's context.
	storeTimeout = 10 * time.Second
	// negativeTTL is how long a lookup that the store could not answer
	// either is answered from memory ("unknown"), so that a client
	// retrying a wrong credential cannot turn each try into a query.
	negativeTTL = time.Second
	// maxNegative bounds the misses remembered; beyond it, further
	// unknown credentials are refused without asking the store until
	// the oldest misses age out.
	maxNegative = 4096
	// pruneEvery is how often Create prunes the store.
	pruneEvery = time.Minute
	// watchRetry is the pause before watching the store again after its
	// change stream ended.
	watchRetry = time.Second
)

// durable is the Registry's side that faces its Store; its zero value (no
// Store) does nothing.
type durable struct {
	store  state.Store
	policy func() *policy.Snapshot
	log    *zap.Logger

	flight singleflight.Group

	negMu sync.Mutex
	neg   map[string]time.Time // lookup key -> until when a miss stands

	pruning   atomic.Bool
	lastPrune atomic.Int64 // unix nanoseconds
}

func newDurable(cfg RegistryConfig) *durable {
	d := &durable{store: cfg.Store, policy: cfg.Policy, log: cfg.Logger, neg: map[string]time.Time{}}
	if d.log == nil {
		d.log = zap.NewNop()
	}
	if d.policy == nil {
		d.policy = func() *policy.Snapshot { return nil }
	}
	return d
}

// storePut records a new session; the session is not created when it fails.
func (r *Registry) storePut(e *entry) error {
	if r.store == nil {
		return nil
	}
	s := e.sess
	key, err := s.CA.KeyDER()
	if err != nil {
		return fmt.Errorf("creating session %s: %w", s.ID, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	err = r.store.PutSession(ctx, state.Session{
		ID:              s.ID,
		ProxyDigest:     e.proxyHash,
		APIDigest:       e.apiHash,
		CACert:          s.CA.CertDER(),
		CAKey:           key,
		Connectors:      s.Connectors,
		Hosts:           s.Hosts,
		Learn:           s.Learn,
		Agent:           s.Agent,
		Project:         s.Project,
		ApprovalSurface: s.ApprovalSurface,
		CreatedAt:       s.CreatedAt,
		ExpiresAt:       s.ExpiresAt,
	})
	if err != nil {
		return fmt.Errorf("creating session %s: recording it in the state store: %w", s.ID, err)
	}
	return nil
}

// storeEnd records that session id ended (or expired) at at. A session the
// store already knows as ended (through another replica) is no error.
func (r *Registry) storeEnd(id string, at time.Time, e Ending) error {
	if r.store == nil || e.Elsewhere {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	err := r.store.EndSession(ctx, id, at, e.Reason.String(), e.ExitCode)
	switch {
	case err == nil, errors.Is(err, state.ErrConflict):
		return nil
	case errors.Is(err, state.ErrNotFound):
		r.log.Warn("ended session is not in the state store", zap.String("session_id", id))
		return nil
	}
	r.log.Error("recording a session's end in the state store failed; other replicas and a restart still see it live",
		zap.String("session_id", id), zap.String("reason", e.Reason.String()), zap.Error(err))
	return fmt.Errorf("recording the end in the state store (it is refused here): %w", err)
}

// storePrune deletes, at most once per pruneEvery and in the background,
// the stored sessions that ended or expired more than RetainEnded ago.
func (r *Registry) storePrune(now time.Time) {
	if r.store == nil || now.UnixNano()-r.lastPrune.Load() < int64(pruneEvery) || !r.pruning.CompareAndSwap(false, true) {
		return
	}
	r.lastPrune.Store(now.UnixNano())
	go func() {
		defer r.pruning.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		defer cancel()
		n, err := r.store.PruneSessions(ctx, now.Add(-r.retainEnded))
		if err != nil {
			r.log.Warn("pruning ended sessions from the state store failed", zap.Error(err))
			return
		}
		if n > 0 {
			r.log.Debug("pruned ended sessions from the state store", zap.Int("sessions", n))
		}
	}()
}

// Restore loads the sessions of the Store that are live or ended within
// RetainEnded, with their CAs (the same roots, so clients that trusted them
// still do) and their scopes rebuilt from the current policy. A session
// whose connectors are no longer installed keeps those that are (possibly
// none), and the dropped ones are logged. It returns how many live sessions
// it restored. Without a Store it does nothing.
func (r *Registry) Restore(ctx context.Context) (int, error) {
	if r.store == nil {
		return 0, nil
	}
	now := r.now()
	recs, err := r.store.Sessions(ctx, now, now.Add(-r.retainEnded))
	if err != nil {
		return 0, fmt.Errorf("restoring sessions: %w", err)
	}
	live := 0
	for _, rec := range recs {
		e, err := r.fromRecord(rec)
		if err != nil {
			r.log.Error("a stored session could not be restored; it is refused as unknown", zap.String("session_id", rec.ID), zap.Error(err))
			continue
		}
		r.mu.Lock()
		if _, ok := r.byID[rec.ID]; !ok {
			r.addRecordLocked(e)
			if !e.ended && !e.sess.IsExpired(now) {
				live++
			}
		}
		r.mu.Unlock()
	}
	return live, nil
}

// fromRecord rebuilds a session from its record with the current policy.
func (r *Registry) fromRecord(rec state.Session) (*entry, error) {
	snap := r.policy()
	if snap == nil {
		return nil, errors.New("no policy snapshot is loaded")
	}
	var fqns, missing []string
	for _, f := range rec.Connectors {
		if _, ok := snap.Connector(f); ok {
			fqns = append(fqns, f)
		} else {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		r.log.Warn("a stored session's connectors are no longer installed; it keeps the others",
			zap.String("session_id", rec.ID), zap.Strings("missing", missing), zap.Strings("connectors", fqns))
	}
	learn, err := hostport.ParseGlobs(rec.Learn, "learn pattern")
	if err != nil {
		return nil, fmt.Errorf("reading its learn patterns: %w", err)
	}
	caHosts, domains := caNames(rec.Hosts, learn)
	authority, err := ca.Restore(ca.Config{Hosts: caHosts, Domains: domains, Now: r.now}, rec.CACert, rec.CAKey)
	if err != nil {
		return nil, err
	}
	s := &Session{
		ID:              rec.ID,
		Scope:           policy.NewScope(fqns),
		Connectors:      fqns,
		Hosts:           rec.Hosts,
		CA:              authority,
		CAPEM:           authority.CertPEM(),
		CreatedAt:       rec.CreatedAt,
		ExpiresAt:       rec.ExpiresAt,
		Agent:           rec.Agent,
		Project:         rec.Project,
		ApprovalSurface: rec.ApprovalSurface,
		Learn:           rec.Learn,
		LearnGlobs:      learn,
	}
	e := &entry{sess: s, proxyHash: rec.ProxyDigest, apiHash: rec.APIDigest}
	switch {
	case rec.EndedAt == nil:
	case rec.EndReason == EndReasonExpired.String():
		// Expired is told by ExpiresAt; its end was notified where noticed.
		e.notified = true
	default:
		e.ended, e.endedAt, e.notified = true, *rec.EndedAt, true
	}
	return e, nil
}

// addRecordLocked adds an entry read from the store, due to be forgotten
// at once when it had already ended or its expiry was noticed.
func (r *Registry) addRecordLocked(e *entry) {
	r.addLocked(e)
	if e.ended || e.notified {
		e.due = r.forgetAt(e)
		heap.Fix(&r.due, e.index)
	}
}

// loadID asks the store for session id after a lookup missed memory and
// reports whether the session is now known here.
func (r *Registry) loadID(id string) bool {
	if r.store == nil || len(id) != len(IDPrefix)+24 || id[:len(IDPrefix)] != IDPrefix {
		return false
	}
	return r.load("id:"+id, false, func(ctx context.Context) (state.Session, error) { return r.store.Session(ctx, id) })
}

// loadAPI is loadID for an API token's digest.
func (r *Registry) loadAPI(d [sha256.Size]byte) bool {
	if r.store == nil {
		return false
	}
	return r.load("api:"+string(d[:]), false, func(ctx context.Context) (state.Session, error) { return r.store.SessionByAPIDigest(ctx, d) })
}

// load runs get once for key (concurrent misses share one query; a recent
// miss is not asked again unless force) and adds the session it returns.
func (r *Registry) load(key string, force bool, get func(context.Context) (state.Session, error)) bool {
	now := r.now()
	if !force && !r.mayAsk(key, now) {
		return false
	}
	v, _, _ := r.flight.Do(key, func() (any, error) {
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		defer cancel()
		rec, err := get(ctx)
		if err != nil {
			if !errors.Is(err, state.ErrNotFound) {
				r.log.Warn("looking a session up in the state store failed", zap.Error(err))
			}
			r.missed(key, now)
			return false, nil
		}
		r.mu.Lock()
		_, known := r.byID[rec.ID]
		r.mu.Unlock()
		if known {
			return true, nil
		}
		e, err := r.fromRecord(rec)
		if err != nil {
			r.log.Error("a stored session could not be loaded; it is refused as unknown", zap.String("session_id", rec.ID), zap.Error(err))
			r.missed(key, now)
			return false, nil
		}
		r.mu.Lock()
		if _, known := r.byID[rec.ID]; !known {
			r.addRecordLocked(e)
		}
		r.mu.Unlock()
		return true, nil
	})
	return v.(bool)
}

// mayAsk reports whether key may be looked up in the store: it did not miss
// within negativeTTL and the miss table has room.
func (r *Registry) mayAsk(key string, now time.Time) bool {
	r.negMu.Lock()
	defer r.negMu.Unlock()
	if until, ok := r.neg[key]; ok {
		if now.Before(until) {
			return false
		}
		delete(r.neg, key)
	}
	if len(r.neg) >= maxNegative {
		for k, until := range r.neg {
			if !now.Before(until) {
				delete(r.neg, k)
			}
		}
	}
	return len(r.neg) < maxNegative
}

// missed remembers that key is unknown to the store too.
func (r *Registry) missed(key string, now time.Time) {
	r.negMu.Lock()
	defer r.negMu.Unlock()
	if len(r.neg) < maxNegative {
		r.neg[key] = now.Add(negativeTTL)
	}
}

// Follow applies the changes other replicas make to the Store until ctx
// ends: a session created elsewhere is loaded, and one ended elsewhere is
// refused here from then on (OnEnd is called for it, with
// Ending.Elsewhere set). Without a Store it returns at once.
func (r *Registry) Follow(ctx context.Context) {
	if r.store == nil {
		return
	}
	for ctx.Err() == nil {
		changes, err := r.store.Watch(ctx)
		if err != nil {
			r.log.Warn("watching the state store for sessions failed; retrying", zap.Error(err))
		} else {
			// What changed before this subscription (since Restore, or
			// while a dropped stream was re-opened) is read once.
			r.resync()
			for c := range changes {
				r.apply(c)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(watchRetry):
		}
	}
}

// apply handles one change of the store.
func (r *Registry) apply(c state.Change) {
	switch c.Kind {
	case state.ChangeSessionCreated:
		r.mu.Lock()
		_, known := r.byID[c.ID]
		r.mu.Unlock()
		if !known {
			r.load("id:"+c.ID, true, func(ctx context.Context) (state.Session, error) { return r.store.Session(ctx, c.ID) })
		}
	case state.ChangeSessionEnded:
		r.endedElsewhere(c.ID)
	case state.ChangeResync:
		r.resync()
	}
}

// resync re-reads the store after the change stream lost changes: every
// session live here that ended elsewhere meanwhile is ended here.
func (r *Registry) resync() {
	now := r.now()
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	recs, err := r.store.Sessions(ctx, now, now.Add(-r.retainEnded))
	cancel()
	if err != nil {
		r.log.Warn("re-reading sessions from the state store failed", zap.Error(err))
		return
	}
	for _, rec := range recs {
		if rec.EndedAt != nil && rec.EndReason != EndReasonExpired.String() {
			r.endRecord(rec)
		}
	}
}

// endedElsewhere ends session id here after another replica ended it.
func (r *Registry) endedElsewhere(id string) {
	r.mu.Lock()
	e, ok := r.byID[id]
	pending := ok && !e.ended
	r.mu.Unlock()
	if !pending {
		return // unknown here (a later lookup loads it ended) or ended here
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	rec, err := r.store.Session(ctx, id)
	cancel()
	if err != nil {
		r.log.Warn("reading a session ended elsewhere failed", zap.String("session_id", id), zap.Error(err))
		return
	}
	if rec.EndedAt == nil || rec.EndReason == EndReasonExpired.String() {
		return // expiry is noticed here at use
	}
	r.endRecord(rec)
}

// endRecord ends here the session rec says ended elsewhere, if it is live
// here.
func (r *Registry) endRecord(rec state.Session) {
	var ends []pendingEnd
	r.mu.Lock()
	e, ok := r.byID[rec.ID]
	if ok && !e.ended {
		e.ended, e.endedAt = true, *rec.EndedAt
		e.due = r.forgetAt(e)
		heap.Fix(&r.due, e.index)
		if !e.notified {
			e.notified = true
			ends = append(ends, pendingEnd{e.sess, Ending{Reason: EndReason(rec.EndReason), ExitCode: rec.ExitCode, Elsewhere: true}})
		}
	}
	r.mu.Unlock()
	r.notify(ends)
}
