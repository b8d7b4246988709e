package main

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/aileron-dev/aileron-proxy/actions"
	"github.com/aileron-dev/aileron-proxy/policy"
)

// newActionCmd is `aileron-proxy action`: validate, install, list and
// remove action manifests in the store ($AILERON_HOME/store/actions).
func newActionCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "action COMMAND",
		Short: "Manage the action manifests in the store",
		Long: `Manage the action manifests (action.md) installed in the content-addressed
store under $AILERON_HOME/store/actions.

An action names one operation of an installed connector, the inputs a caller
may pass and fixed arguments ([execute.args]); the sandbox runs it with
POST /v1/actions/<name>/run or its shim. When several versions of one action
are installed the highest is active; an action whose connector or operation
is no longer installed is broken until the connector is installed again.

See docs/actions.md for the format.`,
		Example: `  aileron-proxy action validate ./actions/send-email/action.md
  aileron-proxy action install ./aileron-connector-google
  aileron-proxy action list`,
		Args:                  cobra.ArbitraryArgs,
		DisableFlagsInUseLine: true,
		RunE:                  groupRunE,
	}
	cmd.AddCommand(
		newActionInstallCmd(a),
		newActionListCmd(a),
		newActionRemoveCmd(a),
		newActionValidateCmd(a),
	)
	return cmd
}

// actionConnectors returns the active connectors of the store, which
// actions are checked against.
func actionConnectors(a *app) ([]policy.Connector, error) {
	st, err := policy.OpenStore(a.home)
	if err != nil {
		return nil, err
	}
	res, err := st.Load()
	if err != nil {
		return nil, err
	}
	return res.Active, nil
}

// actionStore opens the action store and loads the active connectors its
// actions are checked against.
func actionStore(a *app) (*actions.Store, []policy.Connector, error) {
	conns, err := actionConnectors(a)
	if err != nil {
		return nil, nil, err
	}
	st, err := actions.OpenStore(a.home)
	return st, conns, err
}

// actionInvalid prints the problems of err (one FileError per manifest) to
// w and returns the command's error.
func actionInvalid(w io.Writer, path string, err error, tail string) error {
	var fe *actions.FileError
	if !errors.As(err, &fe) {
		return err
	}
	fmt.Fprintln(w, err.Error())
	n := 0
	for _, e := range unjoin(err) {
		if errors.As(e, &fe) {
			n += fe.Errors()
		}
	}
	return fmt.Errorf("%s holds invalid action manifests (%s)%s", path, connPlural(n, "error"), tail)
}

// unjoin returns the errors errors.Join joined into err, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// actionWarnings prints the warnings of accepted manifests to w.
func actionWarnings(w io.Writer, warnings []actions.Warning) {
	for _, wr := range warnings {
		fmt.Fprintln(w, wr.String())
	}
}

func newActionValidateCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "validate PATH",
		Short: "Check action manifests against the installed connectors",
		Long: `Check action manifests without installing them. PATH is an action.md or a
directory holding actions/*/action.md (a connector package).

Every problem of a manifest is printed in one pass to stdout, one per line,
sorted by line, as "<file>:<line>: <message>" (the opening "+++" is line 1);
warnings read "<file>:<line>: warning: <message>" and do not make a manifest
invalid. Operations and [[requires.connectors]] hashes are checked against the
connectors installed in the store. Exit status: 0 valid (warnings or not), 1
invalid or unreadable, 2 usage error.`,
		Example: `  aileron-proxy action validate ./actions/send-email/action.md
  aileron-proxy action validate ./aileron-connector-google`,
		Args:                  usageArgs(cobra.ExactArgs(1)),
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			conns, err := actionConnectors(a)
			if err != nil {
				return err
			}
			valid, warnings, err := actions.Validate(args[0], conns)
			if err != nil {
				return actionInvalid(a.stdout, args[0], err, "")
			}
			actionWarnings(a.stdout, warnings)
			for _, act := range valid {
				fmt.Fprintf(a.stdout, "valid: %s %s: %s %s\n", act.Name, connVersionLabel(act.Version), act.Execute.Connector, act.Execute.Op)
			}
			return nil
		},
	}
}

func newActionInstallCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "install PATH",
		Short: "Validate action manifests and add them to the store",
		Long: `Validate action manifests and add them to the store. PATH is an action.md or
a directory holding actions/*/action.md (a connector package): all of them are
installed, or none when any is invalid (every problem is printed to stderr).

Each manifest is stored under sha256/<hex>, named by the hash of its content,
so installing the same content again changes nothing; a higher version of an
action supersedes the installed one. A running serve picks the change up
within its reload interval.

Prints "installed <name> <version> sha256:<hex>" per action, and each warning
to stderr as "<file>:<line>: warning: <message>". Exit status: 0 installed, 1
invalid manifest or I/O error, 2 usage error.`,
		Example: `  aileron-proxy action install ./actions/send-email/action.md
  aileron-proxy action install ./aileron-connector-google`,
		Args:                  usageArgs(cobra.ExactArgs(1)),
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, conns, err := actionStore(a)
			if err != nil {
				return err
			}
			installed, warnings, err := st.Install(args[0], conns)
			if err != nil {
				return actionInvalid(a.stderr, args[0], err, "; nothing was installed")
			}
			actionWarnings(a.stderr, warnings)
			for _, e := range installed {
				fmt.Fprintf(a.stdout, "installed %s %s %s\n", e.Action.Name, connVersionLabel(e.Action.Version), e.Hash)
				if !e.IsActive() {
					fmt.Fprintf(a.stderr, "warning: %s is not active: %s\n", e.Action.Name, e.Status)
				}
			}
			return nil
		},
	}
}

func newActionListCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--json]",
		Short: "List the installed actions and their status",
		Long: `List every action in the store with its name, version, hash, status and the
operation it runs. The status is one of:

  ok                 active: the daemon runs it
  superseded         a higher version of the same action is installed
  broken: <reason>   its connector or operation is not installed (any more)
  invalid: <reason>  unreadable or damaged; remove it and install it again`,
		Example: `  aileron-proxy action list
  aileron-proxy action list --json`,
		Args:                  usageArgs(cobra.NoArgs),
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, conns, err := actionStore(a)
			if err != nil {
				return err
			}
			entries, err := st.List(conns)
			if err != nil {
				return err
			}
			if asJSON {
				return actionWriteJSON(a.stdout, entries)
			}
			if len(entries) == 0 {
				fmt.Fprintln(a.stderr, "no actions installed; install one with: aileron-proxy action install PATH")
				return nil
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tVERSION\tHASH\tSTATUS\tCONNECTOR\tOPERATION")
			for _, e := range entries {
				hash := e.Hash[:len("sha256:")+12]
				if e.Action == nil {
					fmt.Fprintf(tw, "-\t-\t%s\t%s\t-\t-\n", hash, e.Status)
					continue
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Action.Name, connVersionLabel(e.Action.Version), hash, e.Status, e.Action.Execute.Connector, e.Action.Execute.Op)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// actionListEntry is one entry of `action list --json`.
type actionListEntry struct {
	Name      string `json:"name,omitempty"`
	Version   string `json:"version,omitempty"`
	Hash      string `json:"hash"`
	Dir       string `json:"dir"`
	Status    string `json:"status"`
	Active    bool   `json:"active"`
	Connector string `json:"connector,omitempty"`
	Tool      string `json:"tool,omitempty"`
	Operation string `json:"operation,omitempty"`
	Approval  bool   `json:"approval_required"`
}

func actionWriteJSON(w io.Writer, entries []actions.Installed) error {
	out := make([]actionListEntry, 0, len(entries))
	for _, e := range entries {
		j := actionListEntry{Hash: e.Hash, Dir: e.Dir, Status: e.Status, Active: e.IsActive(), Tool: e.Target.Tool}
		if e.Action != nil {
			j.Name, j.Version, j.Approval = e.Action.Name, e.Action.Version, e.Action.ApprovalRequired
			j.Connector, j.Operation = e.Action.Execute.Connector, e.Action.Execute.Op
		}
		out = append(out, j)
	}
	return writeJSON(w, out)
}

func newActionRemoveCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove every installed version of an action",
		Long: `Remove every installed version of the action named NAME from the store.

Prints "removed <name> <version> sha256:<hex>" per manifest. Exit status: 0
removed, 1 no such action or I/O error, 2 usage error.`,
		Example:               `  aileron-proxy action remove send-email`,
		Args:                  usageArgs(cobra.ExactArgs(1)),
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := actions.OpenStore(a.home)
			if err != nil {
				return err
			}
			removed, err := st.Remove(args[0])
			for _, e := range removed {
				fmt.Fprintf(a.stdout, "removed %s %s %s\n", e.Action.Name, connVersionLabel(e.Action.Version), e.Hash)
			}
			return err
		},
	}
}

// loadActions lists the installed actions checked against conns: those on
// other connectors are broken and render nothing.
func (a *app) loadActions(conns []policy.Connector) ([]actions.Installed, error) {
	st, err := actions.OpenStore(a.home)
	if err != nil {
		return nil, err
	}
	entries, err := st.List(conns)
	if err != nil {
		return nil, fmt.Errorf("loading the installed actions: %w", err)
	}
	return entries, nil
}
