package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/aileron-dev/aileron-proxy/coalesce"
)

// Exit codes shared by every command; shims and launch document their own.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// exitError carries an exit code to main. A nil err exits silently.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// withCode wraps err so main exits with code.
func withCode(code int, err error) error { return &exitError{code: code, err: err} }

// app holds what every command needs: streams, environment and the state
// directory. Commands get it through their constructor; there are no globals.
type app struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string

	// home is set from --home, $AILERON_HOME or ~/.aileron before any RunE.
	home    string
	verbose bool
}

func newApp(stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) *app {
	return &app{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv}
}

// resolveHome picks the state directory: flag, then $AILERON_HOME, then ~/.aileron.
func (a *app) resolveHome(flag string) error {
	switch {
	case flag != "":
		a.home = flag
	case a.getenv("AILERON_HOME") != "":
		a.home = a.getenv("AILERON_HOME")
	default:
		h, err := os.UserHomeDir()
		if err != nil {
			return fmt.Errorf("finding the home directory: %w (set AILERON_HOME or pass --home)", err)
		}
		a.home = filepath.Join(h, ".aileron")
	}
	abs, err := filepath.Abs(a.home)
	if err != nil {
		return fmt.Errorf("resolving --home %q: %w", a.home, err)
	}
	a.home = abs
	return nil
}

// consoleLogger is the human-readable logger for CLI commands (stderr).
func (a *app) consoleLogger() *zap.Logger {
	level := zapcore.InfoLevel
	if a.verbose {
		level = zapcore.DebugLevel
	}
	enc := zap.NewDevelopmentEncoderConfig()
	enc.TimeKey = ""
	enc.CallerKey = ""
	enc.StacktraceKey = ""
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(a.stderr), level)
	return zap.New(core)
}

// jsonLogger is the structured logger for serve: JSON lines on stderr,
// batched (package coalesce) so a request's decision line costs it no
// system call. stop writes what is pending; call it before returning.
func (a *app) jsonLogger() (log *zap.Logger, stop func()) { return a.jsonLoggerTo(a.stderr) }

// jsonLoggerTo is jsonLogger writing to w.
func (a *app) jsonLoggerTo(w io.Writer) (log *zap.Logger, stop func()) {
	level := zapcore.InfoLevel
	if a.verbose {
		level = zapcore.DebugLevel
	}
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "time"
	enc.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	out := coalesce.New(w, 0, 0)
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), out, level)
	return zap.New(core), func() { _ = out.Close() }
}

func newRootCmd(a *app) *cobra.Command {
	var home string
	root := &cobra.Command{
		Use:           "aileron-proxy",
		Short:         "Mediate an AI agent's API calls from a sandbox",
		Long:          "aileron-proxy is the host-side data plane for AI-agent sandboxes: it installs connector specs, serves a MITM forward proxy that injects credentials and enforces each session's operations, hosts the control API, renders shims and launches sandboxes.\n\nAll state lives in $AILERON_HOME (default ~/.aileron); --home overrides it.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return a.resolveHome(home)
		},
	}
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.PersistentFlags().StringVar(&home, "home", "", "state directory (default $AILERON_HOME or ~/.aileron)")
	root.PersistentFlags().BoolVarP(&a.verbose, "verbose", "v", false, "log debug detail to stderr")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return withCode(exitUsage, err) })

	// Each area registers its command here, one line each.
	root.AddCommand(
		// commands: keep one line per area, sorted
		newActionCmd(a),
		newApprovalsCmd(a),
		newAuditCmd(a),
		newConnectorCmd(a),
		newCredentialCmd(a),
		newInternalCmd(a),
		newLaunchCmd(a),
		newMCPCmd(a),
		newSandboxCmd(a),
		newServeCmd(a),
		newSessionCmd(a),
		newToolsCmd(a),
		newUICmd(a),
	)
	return root
}

// usageError marks err as a usage error (exit 2).
func usageError(err error) error { return withCode(exitUsage, err) }

// usageArgs wraps a positional-args check so a mismatch exits with the
// usage code and shows the command's syntax.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError(fmt.Errorf("%w; usage: %s", err, cmd.UseLine()))
		}
		return nil
	}
}

// groupRunE is the RunE of a command group (with Args cobra.ArbitraryArgs):
// help, or a usage error for an unknown subcommand.
func groupRunE(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError(fmt.Errorf("unknown command %q for %q; run %q for the list", args[0], cmd.CommandPath(), cmd.CommandPath()+" --help"))
	}
	return cmd.Help()
}

// writeJSON prints v to w as indented JSON, the --json output of every
// command.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// homePath returns the path of rel (slash-separated, e.g. daemon.AuditFile)
// under the state directory.
func (a *app) homePath(rel string) string { return filepath.Join(a.home, filepath.FromSlash(rel)) }
