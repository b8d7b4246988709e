package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/aileron-dev/aileron-proxy/audit"
	"github.com/aileron-dev/aileron-proxy/daemon"
)

func newAuditCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit COMMAND",
		Short: "Read the audit log",
		Long:  `serve records one JSON object per decision in $AILERON_HOME/audit/audit.jsonl (mode 0600): allowed and denied requests, passthrough tunnels, approvals and session lifecycle. Events hold the connector, tool, operation, method, host, path (never the query), status, decision and reason, and the declared audit fields; never header values, bodies or secrets.`,
		Example: `  aileron-proxy audit tail -f
  aileron-proxy audit tail --session SESSION_ID --json`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRunE,
	}
	cmd.AddCommand(newAuditTailCmd(a))
	return cmd
}

func newAuditTailCmd(a *app) *cobra.Command {
	var (
		opts   audit.TailOptions
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "tail [-f] [--session ID] [--json] [-n N]",
		Short: "Print audit events, optionally following new ones",
		Long: `Print the events of the audit log, oldest first: all of them, or the last N with -n. With -f, keep printing new events as serve records them (waiting for the log to appear) until interrupted.

The default output is one line per event:
  TIME EVENT SESSION DECISION STATUS METHOD HOST PATH CONNECTOR TOOL/OPERATION REASON
with "-" for empty values, and exit=N on session.ended events of launched sandboxes. --json prints each event as one JSON object per line instead.

A line that is not a whole event (a write an older version cut short on a full disk) is skipped with a warning on stderr naming its byte offset; the events around it are printed.`,
		Example: `  aileron-proxy audit tail -n 20
  aileron-proxy audit tail -f --session SESSION_ID
  aileron-proxy audit tail --json | jq 'select(.decision == "denied")'`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Lines < 0 {
				return usageError(fmt.Errorf("-n %d: pass a positive number of events, or omit -n for all", opts.Lines))
			}
			path := a.homePath(daemon.AuditFile)
			opts.OnSkip = func(s audit.Skipped) {
				fmt.Fprintf(a.stderr, "warning: %s: %s\n", path, s)
			}
			err := audit.Tail(cmd.Context(), path, opts, func(e audit.Event) error {
				if asJSON {
					line, err := json.Marshal(e)
					if err != nil {
						return fmt.Errorf("encoding audit event: %w", err)
					}
					_, err = fmt.Fprintf(a.stdout, "%s\n", line)
					return err
				}
				_, err := io.WriteString(a.stdout, auditFormatEvent(e)+"\n")
				return err
			})
			if errors.Is(err, fs.ErrNotExist) {
				fmt.Fprintf(a.stderr, "No audit events yet: %s does not exist (serve creates it when it records the first event).\n", path)
				return nil
			}
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&opts.Follow, "follow", "f", false, "keep printing new events until interrupted")
	f.StringVar(&opts.SessionID, "session", "", "only events of session `ID`")
	f.BoolVar(&asJSON, "json", false, "print raw JSON lines")
	f.IntVarP(&opts.Lines, "lines", "n", 0, "print only the last `N` matching events (default all)")
	return cmd
}

// auditFormatEvent renders one event as a human-readable line.
func auditFormatEvent(e audit.Event) string {
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	status := "-"
	if e.Status != 0 {
		status = strconv.Itoa(e.Status)
	}
	op := ""
	if e.Tool != "" || e.Operation != "" {
		op = e.Tool + "/" + e.Operation
	}
	parts := []string{
		e.Time.UTC().Format(time.RFC3339),
		e.Event,
		dash(e.SessionID),
		dash(e.Decision),
		status,
		dash(e.Method),
		dash(e.Host),
		dash(e.Path),
		dash(e.ConnectorFQN),
		dash(op),
		dash(e.Reason),
	}
	if e.ExitCode != nil {
		parts = append(parts, "exit="+strconv.Itoa(*e.ExitCode))
	}
	return strings.Join(parts, " ")
}
