//go:build !linux

package sandboxhelper

import (
	"context"
	"fmt"
	"io"
	"os"
)

// RunExec runs only inside a Linux container.
func RunExec(io.Reader, io.Writer) int {
	fmt.Fprintln(os.Stderr, "internal sandbox exec: runs only inside a Linux sandbox container")
	return 2
}

// Hold waits for ctx (the sandbox container is Linux).
func Hold(ctx context.Context) { <-ctx.Done() }
