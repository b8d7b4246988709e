// Command aileron-proxy is the host-side data plane for AI-agent sandboxes:
// it installs connector specs, serves the MITM proxy and control API, renders
// shims and launches sandboxes. See the README for usage.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	_ "github.com/aileron-dev/aileron-proxy/internal/xconnect" // HTTP/2 extended CONNECT for WebSockets; see its doc
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd(newApp(os.Stdin, os.Stdout, os.Stderr, os.Getenv)).ExecuteContext(ctx)
	stop()
	os.Exit(exitStatus(err, os.Stderr))
}

// exitStatus returns the exit code for the error of a command run and
// prints the error, if any, as one "error: …" line to w. An *exitError
// sets the code (and a nil err inside it prints nothing); any other error
// exits with exitFailure.
func exitStatus(err error, w io.Writer) int {
	if err == nil {
		return exitOK
	}
	code := exitFailure
	var ee *exitError
	if errors.As(err, &ee) {
		code, err = ee.code, ee.err
	}
	if err != nil {
		fmt.Fprintf(w, "error: %s\n", err)
	}
	return code
}
