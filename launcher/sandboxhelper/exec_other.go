//go:build !linux

package sandboxhelper

import (
	"context"
	"fmt"
	"io"
	"os"
)

// RunSandboxExec runs only inside a Linux container.
func RunSandboxExec(io.Reader, io.Writer) int {
	fmt.Fprintln(os.Stderr, "internal sandbox exec: runs only inside a Linux sandbox container")
	return 2
}

// SandboxHold waits for ctx (the sandbox container is Linux).
func SandboxHold(ctx context.Context) { <-ctx.Done() }
