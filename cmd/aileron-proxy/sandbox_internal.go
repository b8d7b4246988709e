package main

import (
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/aileron-dev/aileron-proxy/launcher/sandboxhelper"
)

// newInternalSandboxCmd is `aileron-proxy internal sandbox`: what a
// long-lived sandbox's container runs from the mounted static binary.
func newInternalSandboxCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandbox COMMAND",
		Short: "Hold a long-lived sandbox, or run one of its exec or file calls",
		Long: `Run in a long-lived sandbox's container (see "sandbox up"): "hold" is its main
process, "exec" and "fs" serve one call of the exec/files API each, reading a JSON
request line on stdin and printing a JSON status line. See docs/api.md.`,
		Example: `  aileron-proxy internal sandbox hold`,
		Args:    cobra.ArbitraryArgs,
		RunE:    groupRunE,
	}
	hold := &cobra.Command{
		Use:     "hold [flags]",
		Short:   "Reap orphans until SIGTERM",
		Long:    `Block until SIGTERM or SIGINT, reaping orphaned processes: the sandbox's PID 1.`,
		Example: `  aileron-proxy internal sandbox hold`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			sandboxhelper.Hold(ctx)
			return nil
		},
	}
	exec := &cobra.Command{
		Use:     "exec [flags]",
		Short:   "Run one command of the exec API",
		Long:    `Run the command of the JSON request on stdin; stdin's end aborts it.`,
		Example: `  echo '{"command":"id"}' | aileron-proxy internal sandbox exec`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			return helperExit(sandboxhelper.RunExec(a.stdin, a.stdout))
		},
	}
	fs := &cobra.Command{
		Use:     "fs [flags]",
		Short:   "Run one file operation of the files API",
		Long:    `Run the file operation of the JSON request on stdin with Node fs semantics.`,
		Example: `  echo '{"op":"stat","path":"/tmp"}' | aileron-proxy internal sandbox fs`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			return helperExit(sandboxhelper.RunFS(a.stdin, a.stdout))
		},
	}
	cmd.AddCommand(hold, exec, fs)
	return cmd
}

// helperExit turns a helper's exit status into RunE's error.
func helperExit(code int) error {
	if code == 0 {
		return nil
	}
	return withCode(code, nil)
}
