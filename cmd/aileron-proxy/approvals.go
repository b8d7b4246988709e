package main

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/aileron-dev/aileron-proxy/approval"
)

// newApprovalsCmd is `aileron-proxy approvals`: list and decide requests the
// proxy holds for operations marked `approval: required`.
func newApprovalsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "approvals COMMAND",
		Short: "List and decide requests held for a person's approval",
		Long: `List and decide the requests the running daemon holds for operations whose
connector spec says ` + "`approval: required`" + `. A held request proceeds when
approved, gets 403 approval_denied when denied and 403 approval_timeout when
nobody decides in time (serve --approval-timeout, default 120s).`,
		Example: `  aileron-proxy approvals list
  aileron-proxy approvals approve apr_0123456789abcdef01234567 --remember session
  aileron-proxy approvals deny apr_0123456789abcdef01234567`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRunE,
	}
	cmd.AddCommand(newApprovalsListCmd(a), newApprovalsShowCmd(a), newApprovalsDecideCmd(a, approval.DecisionApprove), newApprovalsDecideCmd(a, approval.DecisionDeny))
	return cmd
}

func newApprovalsListCmd(a *app) *cobra.Command {
	var (
		state  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list [--state pending|decided|all] [--json]",
		Short: "List held requests",
		Long: `List the requests awaiting a decision (or, with --state, recently decided
ones), oldest first, with the session, operation, request line and the
operation's audit fields.`,
		Example: `  aileron-proxy approvals list
  aileron-proxy approvals list --state all --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !approval.IsValidState(state) {
				return usageError(fmt.Errorf("--state %q is not valid; use pending, decided or all", state))
			}
			c, err := a.daemonClient()
			if err != nil {
				return err
			}
			list, err := c.ListApprovals(cmd.Context(), state)
			if err != nil {
				return fmt.Errorf("listing approvals: %w", err)
			}
			if asJSON {
				if list == nil {
					list = []approval.Pending{}
				}
				return writeJSON(a.stdout, list)
			}
			if len(list) == 0 {
				fmt.Fprintf(a.stdout, "no %s approvals\n", state)
				return nil
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSESSION\tOPERATION\tREQUEST\tFIELDS\tBODY\tREQUESTED\tSTATE")
			for _, p := range list {
				st := p.State
				if p.Decision != "" {
					st = p.Decision
				}
				fmt.Fprintf(tw, "%s\t%s\t%s %s\t%s %s%s\t%s\t%s\t%s\t%s\n", p.ID, p.SessionID, p.Tool, p.Operation,
					p.Method, p.Host, p.Path, fieldsText(p.Fields), p.BodySummary(), p.RequestedAt.Local().Format(time.RFC3339), st)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&state, "state", approval.StatePending, "which approvals: pending, decided or all")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newApprovalsShowCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID [--json]",
		Short: "Show everything about one held request",
		Long: `Show one approval in full: the request line, its path, query and body fields
(the operation's declared fields first, multi-line values as blocks), the
SHA-256 and size of the exact body that is sent if approved, and what the
preview fetch brought back from the source (or why it failed). A decided
approval keeps only its digest.`,
		Example: `  aileron-proxy approvals show apr_0123456789abcdef01234567
  aileron-proxy approvals show apr_0123456789abcdef01234567 --json`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.daemonClient()
			if err != nil {
				return err
			}
			list, err := c.ListApprovals(cmd.Context(), approval.StateAll)
			if err != nil {
				return fmt.Errorf("showing approval %s: %w", args[0], err)
			}
			for _, p := range list {
				if p.ID != args[0] {
					continue
				}
				if asJSON {
					return writeJSON(a.stdout, p)
				}
				return approval.WriteText(a.stdout, p)
			}
			return fmt.Errorf("no approval %q; `aileron-proxy approvals list --state all` shows the known ones", args[0])
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func fieldsText(f map[string]string) string {
	if len(f) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + f[k]
	}
	return strings.Join(parts, ",")
}

func newApprovalsDecideCmd(a *app, d approval.Decision) *cobra.Command {
	var remember string
	cmd := &cobra.Command{
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			rem, err := approval.ParseRemember(remember)
			if err != nil {
				return usageError(fmt.Errorf("--remember: %w", err))
			}
			c, err := a.daemonClient()
			if err != nil {
				return err
			}
			out, err := c.DecideApproval(cmd.Context(), args[0], d, rem)
			if err != nil {
				return fmt.Errorf("deciding approval %s: %w", args[0], err)
			}
			suffix := ""
			if rem == approval.RememberSession {
				suffix = " (remembered for the rest of the session)"
			}
			fmt.Fprintf(a.stdout, "approval %s %s%s\n", out.ID, out.Decision, suffix)
			return nil
		},
	}
	if d == approval.DecisionApprove {
		cmd.Use = "approve ID [--remember once|session]"
		cmd.Short = "Let a held request proceed"
		cmd.Long = `Approve a held request so it proceeds upstream. With --remember session, later
requests of the same operation in the same session are approved without
asking (and other pending ones of it are approved now).`
		cmd.Example = `  aileron-proxy approvals approve apr_0123456789abcdef01234567
  aileron-proxy approvals approve apr_0123456789abcdef01234567 --remember session`
		cmd.Flags().StringVar(&remember, "remember", string(approval.RememberOnce), "once, or session to approve the operation for the rest of the session")
	} else {
		cmd.Use = "deny ID"
		cmd.Short = "Refuse a held request"
		cmd.Long = `Deny a held request: the client gets 403 approval_denied and nothing is sent
upstream.`
		cmd.Example = `  aileron-proxy approvals deny apr_0123456789abcdef01234567`
	}
	return cmd
}
