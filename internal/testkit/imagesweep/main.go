// Command imagesweep runs a test command and then removes the container
// images the run built (project, user and feature tiers, whose tags are
// content hashes and so never reused), keeping the shared base image:
//
//	go run ./internal/testkit/imagesweep -- go test ./...
//
// It exits with the command's status.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: imagesweep -- COMMAND [ARG...]")
		os.Exit(2)
	}
	sweep := testkit.SweepImages("aileron", "aileron/sandbox-base")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	sweep()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		os.Exit(exit.ExitCode())
	case err != nil:
		fmt.Fprintln(os.Stderr, "imagesweep:", err)
		os.Exit(1)
	}
}
