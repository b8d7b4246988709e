// Command aileron-proxy is the host-side data plane for AI-agent sandboxes:
// it installs connector specs, serves the MITM proxy and control API, renders
// shims and launches sandboxes. See the README for usage.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCmd(newApp(os.Stdin, os.Stdout, os.Stderr, os.Getenv))
	err := root.ExecuteContext(ctx)
	if err == nil {
		return
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintf(os.Stderr, "error: %s\n", ee.err)
		}
		os.Exit(ee.code)
	}
	fmt.Fprintf(os.Stderr, "error: %s\n", err)
	os.Exit(exitFailure)
}
