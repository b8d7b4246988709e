// Package guard is a sandbox's egress guard: the nftables rules that let
// its network namespace reach the allowed endpoints (the session's relays)
// and nothing else (Rules, a pure function tested without containers),
// the in-namespace program that applies and reads them (Apply, Read, run
// as `aileron-proxy internal guard`), and the holder container that owns
// the namespace and runs that program (Start). It knows nothing of
// devcontainers or sessions.
package guard
