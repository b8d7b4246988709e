package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/internal/contract"
	"github.com/aileron-dev/aileron-proxy/internal/hostport"
)

// Defaults of AuthBackoff.
const (
	// DefaultAuthFailureRate is the failed authentications per second a
	// source may sustain for one session ID.
	DefaultAuthFailureRate = 5
	// DefaultAuthFailureBurst is the failures a source may make at once
	// before it is throttled.
	DefaultAuthFailureBurst = 20
	// maxBackoffKeys bounds the keys tracked; past it, a source's new
	// session IDs share one bucket per source.
	maxBackoffKeys = 4096
)

// AuthBackoff throttles failed authentication: a token bucket per (source
// address, claimed session ID) that each failure drains and that refills at
// a steady rate. While a bucket is empty every attempt with that key is
// refused unchecked (429 with Retry-After), so guessing runs at the refill
// rate. Successful attempts cost nothing, and a key never blocks another
// source or another session's credential. Safe for concurrent use; the
// zero value is not usable, build it with NewAuthBackoff.
type AuthBackoff struct {
	rate  float64 // tokens per second
	burst float64
	now   func() time.Time

	mu      sync.Mutex
	buckets map[backoffKey]*backoffBucket
}

type backoffKey struct{ source, id string }

type backoffBucket struct {
	tokens float64
	last   time.Time
	// reported is set when a throttled burst has been reported, and cleared
	// when the bucket refills completely (the burst is over).
	reported bool
}

// NewAuthBackoff returns a limiter allowing burst failures at once and rate
// failures per second after; zero values take the defaults, now nil means
// time.Now.
func NewAuthBackoff(rate float64, burst int, now func() time.Time) *AuthBackoff {
	if rate <= 0 {
		rate = DefaultAuthFailureRate
	}
	if burst <= 0 {
		burst = DefaultAuthFailureBurst
	}
	if now == nil {
		now = time.Now
	}
	return &AuthBackoff{rate: rate, burst: float64(burst), now: now, buckets: make(map[backoffKey]*backoffBucket)}
}

// SourceOf returns the host part of a request's RemoteAddr, the source an
// AuthBackoff keys on.
func SourceOf(remoteAddr string) string {
	if hp, err := hostport.New(remoteAddr); err == nil {
		return hp.Host
	}
	return remoteAddr
}

// Throttled reports whether attempts from source for id must be refused
// now, and if so how long until the next one is allowed.
func (b *AuthBackoff) Throttled(source, id string) (bool, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	bk := b.lookup(source, id, false)
	if bk == nil {
		return false, 0
	}
	b.refill(bk)
	if bk.tokens >= 1 {
		return false, 0
	}
	return true, time.Duration((1 - bk.tokens) / b.rate * float64(time.Second))
}

// Fail records a failed attempt. It reports whether this failure emptied
// the bucket for the first time in a burst: the caller reports the burst
// (audit) once, then stays quiet until the source stops long enough for
// the bucket to refill.
func (b *AuthBackoff) Fail(source, id string) (burstStarted bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	bk := b.lookup(source, id, true)
	b.refill(bk)
	if bk.tokens >= 1 {
		bk.tokens--
	} else {
		bk.tokens = 0
	}
	if bk.tokens < 1 && !bk.reported {
		bk.reported = true
		return true
	}
	return false
}

func (b *AuthBackoff) refill(bk *backoffBucket) {
	now := b.now()
	if el := now.Sub(bk.last).Seconds(); el > 0 {
		bk.tokens += el * b.rate
		if bk.tokens >= b.burst {
			bk.tokens = b.burst
			bk.reported = false
		}
	}
	bk.last = now
}

// lookup finds the bucket of (source, id), creating it when create is set.
// When the table is full it forgets buckets that have refilled, and if
// that is not enough a source's new IDs share the bucket (source, "*").
func (b *AuthBackoff) lookup(source, id string, create bool) *backoffBucket {
	k := backoffKey{source, id}
	if bk := b.buckets[k]; bk != nil || !create {
		if bk == nil {
			bk = b.buckets[backoffKey{source, "*"}]
		}
		return bk
	}
	if len(b.buckets) >= maxBackoffKeys {
		now := b.now()
		for key, bk := range b.buckets {
			if bk.tokens+now.Sub(bk.last).Seconds()*b.rate >= b.burst {
				delete(b.buckets, key)
			}
		}
		if len(b.buckets) >= maxBackoffKeys {
			k.id = "*"
			if bk := b.buckets[k]; bk != nil {
				return bk
			}
		}
	}
	bk := &backoffBucket{tokens: b.burst, last: b.now()}
	b.buckets[k] = bk
	return bk
}

// authThrottledError is returned by authenticate while the source is
// throttled; wait is the time until the next attempt is allowed.
type authThrottledError struct{ wait time.Duration }

func (e *authThrottledError) Error() string {
	return "too many failed proxy authentications from this source"
}

// authFailed records a wrong proxy credential from source for id; the
// first failure that throttles a burst is audited and logged once.
func (s *Server) authFailed(source, id string) {
	if !s.authBackoff.Fail(source, id) {
		return
	}
	s.cfg.Audit.Record(audit.Event{Event: audit.EventDenied, Decision: contract.DecisionDenied, Reason: contract.CodeAuthThrottled.String(),
		Status: http.StatusTooManyRequests, Source: contract.SourceProxy, Fields: map[string]string{"client": source}})
	s.log.Warn("proxy authentication throttled", zap.String("client", source), zap.Stringer("reason", contract.CodeAuthThrottled))
}

// throttledRefusal explains a refusal for err, when it is an
// authThrottledError; the response is counted but not audited (the burst
// was, once).
func (s *Server) throttledRefusal(err error) (errorDetail, http.Header, bool) {
	var te *authThrottledError
	if !errors.As(err, &te) {
		return errorDetail{}, nil, false
	}
	s.metrics.decision(false, contract.CodeAuthThrottled.String())
	secs := int((te.wait + time.Second - 1) / time.Second)
	secs = max(secs, 1)
	return errorDetail{Code: contract.CodeAuthThrottled,
			Message: fmt.Sprintf("too many failed proxy authentications from this address; retry after %d s with the session's proxy credential", secs)},
		http.Header{"Retry-After": {strconv.Itoa(secs)}}, true
}

// refuseThrottled answers a plain proxy request refused by the backoff; it
// reports whether err was one.
func (s *Server) refuseThrottled(w http.ResponseWriter, err error) bool {
	d, hdr, ok := s.throttledRefusal(err)
	if ok {
		w.Header()["Retry-After"] = hdr["Retry-After"]
		writeError(w, http.StatusTooManyRequests, contract.DecisionDenied, "", d)
	}
	return ok
}

// throttledConnect is refuseThrottled for a CONNECT: nil when err is not a
// throttle.
func (s *Server) throttledConnect(err error) *http.Response {
	d, hdr, ok := s.throttledRefusal(err)
	if !ok {
		return nil
	}
	return connectResponse(http.StatusTooManyRequests, contract.DecisionDenied, "", d, hdr)
}
