//go:build !race

package proxy

// raceEnabled reports whether the race detector is on; it multiplies
// memory use, so heap bounds are checked only without it.
const raceEnabled = false
