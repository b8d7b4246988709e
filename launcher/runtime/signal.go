package runtime

import (
	"context"
	"os"
	"slices"
)

// SignalExecutor returns an Executor like ExecCommand that also relays
// signals to foreground containers: while a `run` command executes, every
// signal received on sigs is sent to the runtime CLI, which passes it on to
// the container (the docker and podman CLIs proxy signals to an attached
// container). Without --tty the CLI is started in its own process group, so
// a Ctrl-C on the terminal reaches the container once, through this relay,
// not a second time from the terminal; with --tty the CLI stays in the
// terminal's group (it needs the terminal) and the terminal, in raw mode,
// delivers Ctrl-C to the container itself.
//
// Signals that arrive while no container runs stay in sigs until the next
// `run`. A nil sigs makes it ExecCommand.
func SignalExecutor(sigs <-chan os.Signal) Executor {
	return func(ctx context.Context, c Command) error {
		if sigs == nil || len(c.Args) == 0 || c.Args[0] != "run" {
			return ExecCommand(ctx, c)
		}
		cmd := newCmd(ctx, c)
		if !slices.Contains(c.Args, "--tty") {
			ownProcessGroup(cmd)
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		done := make(chan struct{})
		relayed := make(chan struct{})
		go func() {
			defer close(relayed)
			for {
				select {
				case s := <-sigs:
					_ = cmd.Process.Signal(s)
				case <-done:
					return
				}
			}
		}()
		err := cmd.Wait()
		close(done)
		<-relayed
		return exitError(err)
	}
}
