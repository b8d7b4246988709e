package proxy

import (
	"runtime/debug"
	"time"

	"go.uber.org/zap"
)

// burstTunnels is the number of tunnels open at once after which the proxy,
// once most of them have closed again, returns freed memory to the OS.
const burstTunnels = 128

// minMemoryRelease is the least time between two such returns.
const minMemoryRelease = 10 * time.Second

// noteOpenLocked records the open-tunnel high-water mark; s.mu is held.
func (s *Server) noteOpenLocked() {
	if n := len(s.tunnels); n > s.peakTunnels {
		s.peakTunnels = n
	}
}

// burstOverLocked reports whether a burst of at least burstTunnels has
// just fallen to an eighth of its peak, and starts counting the next one
// from here; s.mu is held.
func (s *Server) burstOverLocked() bool {
	n := len(s.tunnels)
	if s.peakTunnels < burstTunnels || n > s.peakTunnels/8 {
		return false
	}
	s.peakTunnels = n
	return true
}

// returnMemory gives the memory a burst of tunnels left behind back to the
// OS. After a burst the live heap falls back to what it was (see
// docs/proxy-limits.md), but the runtime keeps the pages it grew into until
// a periodic GC and its background scavenger release them, minutes later;
// a quiet proxy would hold its peak RSS until then. This runs at most once
// per minMemoryRelease, in its own goroutine: the GC it forces runs
// concurrently with requests, like any other.
func (s *Server) returnMemory() {
	now := s.now()
	last := s.lastRelease.Load()
	if last != 0 && now.Sub(time.Unix(0, last)) < minMemoryRelease {
		return
	}
	if !s.lastRelease.CompareAndSwap(last, now.UnixNano()) {
		return // another burst's end got here first
	}
	start := time.Now()
	debug.FreeOSMemory()
	s.memoryReleases.Add(1)
	s.log.Debug("returned memory to the OS after a burst of tunnels", zap.Int64("duration_ms", time.Since(start).Milliseconds()))
}
