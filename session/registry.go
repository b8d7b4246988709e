package session

import (
	"cmp"
	"container/heap"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/ca"
	"github.com/aileron-dev/aileron-proxy/internal/hostport"
	"github.com/aileron-dev/aileron-proxy/policy"
	"github.com/aileron-dev/aileron-proxy/state"
)

// DefaultRetainEnded is how long an ended or expired session is remembered
// (so it is refused as ended or expired rather than unknown) before a sweep
// (Run, Sweep or Create) forgets it.
const DefaultRetainEnded = time.Hour

// RegistryConfig configures a Registry. Every field is optional.
type RegistryConfig struct {
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// OnEnd, when set, is called once per session when it is ended or first
	// observed expired, outside the registry's lock (it may call back into
	// the registry). The daemon uses it to audit session.ended and remove the
	// session's files.
	OnEnd func(s *Session, e Ending)
	// RetainEnded is how long ended and expired sessions are kept for
	// precise errors; zero means DefaultRetainEnded.
	RetainEnded time.Duration
	// Store, when set, is where sessions outlive the process: Create, End
	// and expiry write through to it, Restore loads from it, and a lookup
	// that misses memory asks it once (a session created through another
	// replica). Nil keeps sessions in memory only.
	Store state.Store
	// Policy returns the current snapshot, from which a session read from
	// the Store gets its scope. Required with Store.
	Policy func() *policy.Snapshot
	// Logger receives what the store path notices (a restored session
	// whose connectors vanished, a failed write); nil logs nothing.
	Logger *zap.Logger
}

// entry is the registry's record of one session.
type entry struct {
	sess      *Session
	proxyHash [sha256.Size]byte
	// internalHash is the digest of InternalProxySecret(sess.ID), kept so
	// AuthenticateProxy computes no HMAC per request.
	internalHash [sha256.Size]byte
	apiHash      [sha256.Size]byte
	ended        bool
	endedAt      time.Time
	notified     bool      // OnEnd has been called
	due          time.Time // next sweep of this entry (sweep.go)
	index        int       // position in Registry.due
}

// Registry holds the daemon's sessions. It is safe for concurrent use.
type Registry struct {
	now         func() time.Time
	onEnd       func(*Session, Ending)
	retainEnded time.Duration

	// internalKey derives InternalProxySecret; random per process.
	internalKey [32]byte

	mu    sync.Mutex
	byID  map[string]*entry
	byAPI map[[sha256.Size]byte]*entry
	due   dueHeap // every entry, by due time (sweep.go)

	*durable // the Store's side (durable.go); inert without a Store
}

// NewRegistry returns an empty registry.
func NewRegistry(cfg RegistryConfig) *Registry {
	r := &Registry{
		now:         cfg.Now,
		onEnd:       cfg.OnEnd,
		retainEnded: cfg.RetainEnded,
		byID:        map[string]*entry{},
		byAPI:       map[[sha256.Size]byte]*entry{},
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.retainEnded <= 0 {
		r.retainEnded = DefaultRetainEnded
	}
	r.durable = newDurable(cfg)
	_, _ = rand.Read(r.internalKey[:]) // documented never to fail; it crashes the program instead
	return r
}

// InternalProxySecret returns a proxy credential for session id that this
// Registry accepts for as long as the process runs, and no other process
// does. The control API uses it to reach the proxy as a session whose real
// proxy secret it never saw (created before a restart, or through another
// replica); it is never shown to anyone.
func (r *Registry) InternalProxySecret(id string) string {
	m := hmac.New(sha256.New, r.internalKey[:])
	m.Write([]byte(id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// pendingEnd is an OnEnd call to make after the lock is released.
type pendingEnd struct {
	sess *Session
	e    Ending
}

func (r *Registry) notify(ends []pendingEnd) {
	for _, e := range ends {
		if e.e.Reason == EndReasonExpired && r.store != nil {
			// Noticed at use, maybe on a request's path: the write must
			// not delay it.
			go r.storeEnd(e.sess.ID, e.sess.ExpiresAt, e.e)
		}
		if r.onEnd != nil {
			r.onEnd(e.sess, e.e)
		}
	}
}

// checkLocked returns the error that makes e unusable at now, or nil, and
// queues the OnEnd notification of a newly observed expiry.
func (r *Registry) checkLocked(e *entry, now time.Time, ends *[]pendingEnd) error {
	if e.ended {
		return ErrSessionEnded
	}
	if e.sess.IsExpired(now) {
		if !e.notified {
			e.notified = true
			*ends = append(*ends, pendingEnd{e.sess, Ending{Reason: EndReasonExpired}})
		}
		return ErrSessionExpired
	}
	return nil
}

// Create starts a session for opts and returns it with its secrets. The
// secrets are not retrievable later.
func (r *Registry) Create(opts CreateOptions) (*Session, Secrets, error) {
	if opts.Snapshot == nil {
		return nil, Secrets{}, errors.New("creating a session: no policy snapshot is loaded (the daemon has not finished loading connectors)")
	}
	learn, err := hostport.ParseGlobs(opts.Learn, "learn pattern")
	if err != nil {
		return nil, Secrets{}, &optionsError{"creating a session: " + err.Error()}
	}
	ttl := opts.TTL
	switch {
	case ttl == 0 && len(learn) > 0:
		ttl = DefaultLearnTTL
	case ttl == 0:
		ttl = DefaultTTL
	case ttl < 0:
		return nil, Secrets{}, &optionsError{fmt.Sprintf("creating a session: ttl %s is negative; use a positive duration such as 8h", ttl)}
	case ttl > MaxTTL:
		return nil, Secrets{}, &optionsError{fmt.Sprintf("creating a session: ttl %s exceeds the maximum of %s; use a shorter ttl", ttl, MaxTTL)}
	}
	for _, l := range [][2]string{{"agent", opts.Agent}, {"project", opts.Project}} {
		if err := checkLabel(l[0], l[1]); err != nil {
			return nil, Secrets{}, err
		}
	}
	fqns, err := resolveScope(opts.Snapshot, opts.Connectors)
	if err != nil {
		return nil, Secrets{}, err
	}
	scope := policy.NewScope(fqns)
	hosts := opts.Snapshot.Hosts(scope)
	id, err := newID()
	if err != nil {
		return nil, Secrets{}, err
	}
	now := r.now()
	caHosts, domains := caNames(hosts, learn)
	var learnNames []string
	for _, g := range learn {
		learnNames = append(learnNames, g.String())
	}
	authority, err := ca.New(ca.Config{
		Hosts:      caHosts, // ca drops the ports and duplicates
		Domains:    domains,
		Validity:   ttl,
		Now:        r.now,
		CommonName: "aileron-proxy session " + id,
	})
	if err != nil {
		return nil, Secrets{}, fmt.Errorf("creating the CA of session %s: %w", id, err)
	}
	var sec Secrets
	if sec.ProxySecret, err = newSecret(); err != nil {
		return nil, Secrets{}, err
	}
	if sec.APIToken, err = newSecret(); err != nil {
		return nil, Secrets{}, err
	}
	s := &Session{
		ID:              id,
		Scope:           scope,
		Connectors:      fqns,
		Hosts:           hosts,
		CA:              authority,
		CAPEM:           authority.CertPEM(),
		CreatedAt:       now,
		ExpiresAt:       now.Add(ttl),
		Agent:           opts.Agent,
		Project:         opts.Project,
		ApprovalSurface: opts.ApprovalSurface,
		Learn:           learnNames,
		LearnGlobs:      learn,
	}
	e := &entry{sess: s, proxyHash: digest(sec.ProxySecret), apiHash: digest(sec.APIToken)}
	if err := r.storePut(e); err != nil {
		return nil, Secrets{}, err
	}

	var ends []pendingEnd
	r.mu.Lock()
	r.sweepLocked(now, createSweep, &ends)
	r.addLocked(e)
	r.mu.Unlock()
	r.notify(ends)
	r.storePrune(now)
	return s, sec, nil
}

// caNames returns the names a session's CA is made for: its hosts and the
// exact names among its learn patterns, and the domains of its wildcard
// learn patterns.
func caNames(hosts []string, learn []hostport.Glob) (caHosts, domains []string) {
	caHosts = slices.Clip(hosts) // the first append copies; hosts is never written
	for _, g := range learn {
		if name, wildcard := g.Domain(); wildcard {
			domains = append(domains, name)
		} else {
			caHosts = append(caHosts, name)
		}
	}
	return caHosts, domains
}

// AuthenticateProxy returns the live session id whose proxy secret is
// secret. The secret is checked before the session's state, so a caller
// without it learns nothing about the session.
func (r *Registry) AuthenticateProxy(id, secret string) (*Session, error) {
	d := digest(secret)
	find := func() (*entry, error) {
		e, ok := r.byID[id]
		if !ok {
			// Compare anyway so unknown and wrong answers take the same time.
			var zero [sha256.Size]byte
			subtle.ConstantTimeCompare(d[:], zero[:])
			return nil, ErrUnknownSession
		}
		if subtle.ConstantTimeCompare(d[:], e.proxyHash[:]) != 1 {
			if subtle.ConstantTimeCompare(d[:], e.internalHash[:]) != 1 {
				return nil, ErrBadCredential
			}
		}
		return e, nil
	}
	s, err := r.live(find)
	if errors.Is(err, ErrUnknownSession) && r.loadID(id) {
		// Created through another replica: asked once (loadID), then
		// held in memory like a session created here.
		s, err = r.live(find)
	}
	return s, err
}

// AuthenticateAPI returns the live session whose API token is token.
func (r *Registry) AuthenticateAPI(token string) (*Session, error) {
	if token == "" {
		return nil, ErrBadCredential
	}
	d := digest(token)
	missed := false
	find := func() (*entry, error) {
		// The map is keyed by the digest, so lookup time says nothing about
		// the token; the constant-time compare is the authoritative check.
		e, ok := r.byAPI[d]
		if !ok || subtle.ConstantTimeCompare(d[:], e.apiHash[:]) != 1 {
			missed = !ok
			return nil, ErrBadCredential
		}
		return e, nil
	}
	s, err := r.live(find)
	if missed && r.loadAPI(d) {
		s, err = r.live(find)
	}
	return s, err
}

// live runs find under the lock to pick an entry (by ID or credential),
// refuses it when it has ended or expired, and sends any OnEnd notification
// after the lock is released.
func (r *Registry) live(find func() (*entry, error)) (*Session, error) {
	var ends []pendingEnd
	r.mu.Lock()
	e, err := find()
	if err == nil {
		err = r.checkLocked(e, r.now(), &ends)
	}
	r.mu.Unlock()
	r.notify(ends)
	if err != nil {
		return nil, err
	}
	return e.sess, nil
}

// Get returns the live session id; ok is false when it is unknown, ended or
// expired. Lookup reports which.
func (r *Registry) Get(id string) (*Session, bool) {
	s, err := r.Lookup(id)
	return s, err == nil
}

// Lookup returns the live session id, or ErrUnknownSession,
// ErrSessionEnded or ErrSessionExpired.
func (r *Registry) Lookup(id string) (*Session, error) {
	find := func() (*entry, error) {
		e, ok := r.byID[id]
		if !ok {
			return nil, ErrUnknownSession
		}
		return e, nil
	}
	s, err := r.live(find)
	if errors.Is(err, ErrUnknownSession) && r.loadID(id) {
		s, err = r.live(find)
	}
	return s, err
}

// List returns the live sessions, oldest first. The expiries it sees are
// left to Sweep and Create to notify, a bounded number at a time, so that
// listing right after a mass expiry does not notify them all at once.
func (r *Registry) List() []*Session {
	now := r.now()
	r.mu.Lock()
	out := make([]*Session, 0, len(r.byID))
	for _, e := range r.byID {
		if !e.ended && !e.sess.IsExpired(now) {
			out = append(out, e.sess)
		}
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b *Session) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	return out
}

// End ends session id now. Ending an ended session returns ErrSessionEnded;
// an expired one ErrSessionExpired; an unknown one ErrUnknownSession.
func (r *Registry) End(id string) error { return r.end(id, nil) }

// EndWithExitCode is End for a session whose sandbox exited with code; the
// code reaches OnEnd (and so the session.ended audit event).
func (r *Registry) EndWithExitCode(id string, code int) error { return r.end(id, &code) }

func (r *Registry) end(id string, exitCode *int) error {
	if _, err := r.Lookup(id); errors.Is(err, ErrUnknownSession) {
		return fmt.Errorf("ending session %q: %w", id, err)
	}
	var ends []pendingEnd
	now := r.now()
	r.mu.Lock()
	e, ok := r.byID[id]
	err := ErrUnknownSession
	if ok {
		if err = r.checkLocked(e, now, &ends); err == nil {
			e.ended = true
			e.endedAt = now
			e.notified = true
			e.due = r.forgetAt(e)
			heap.Fix(&r.due, e.index)
			ends = append(ends, pendingEnd{e.sess, Ending{Reason: EndReasonEnded, ExitCode: exitCode}})
		}
	}
	r.mu.Unlock()
	// The session is refused here from now on; the store then tells the
	// other replicas (and a later restart).
	if err == nil {
		err = r.storeEnd(id, now, Ending{Reason: EndReasonEnded, ExitCode: exitCode})
	}
	r.notify(ends)
	if err != nil {
		return fmt.Errorf("ending session %q: %w", id, err)
	}
	return nil
}
