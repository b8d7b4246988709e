// Package sandboxhelper is what runs inside a long-lived sandbox's
// container, as `aileron-proxy internal sandbox exec|fs|hold` from the
// binary mounted read-only there: it runs one command with a timeout and
// capped output, performs one file operation, or holds the container
// open. It speaks a line of JSON in and a status line out (ExecRequest,
// FSRequest, Status); the host side of that protocol is in launcher.
// It knows nothing of devcontainers, runtimes or networks.
package sandboxhelper
