// Package shims renders what an agent inside a sandbox uses to discover and
// call connector operations: tools.txt, one line per tool, and one POSIX sh
// script per tool (the shim) that posts to the daemon's run endpoint.
//
// Render works in memory and refuses conflicting tool commands (two
// connectors claiming one command, a command equal to the agent's, a
// reserved name or a basic sandbox command) with an actionable message;
// WriteDir then writes the result atomically, so a failure writes nothing.
//
// A shim needs only /bin/sh, wget (BusyBox or GNU), cat, mktemp and rm. Its
// help is baked into the script and works without a daemon. The protocol it
// speaks with the daemon, its exit codes and its limits under BusyBox are
// documented in docs/shims.md.
package shims
