package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/aileron-dev/aileron-proxy/policy"
)

// newConnectorCmd is `aileron-proxy connector`: install, list, validate and
// remove connector specs in the store ($AILERON_HOME/store/connectors).
func newConnectorCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "connector COMMAND",
		Short: "Manage the connector specs in the store",
		Long: `Manage the connector specs (aileron.connector.v1.json) installed in the
content-addressed store under $AILERON_HOME/store/connectors.

A connector spec declares the tools and operations an agent may call and the
upstream hosts, methods and paths each operation uses. The daemon loads every
valid installed spec: when several versions of one connector are installed the
highest is active and the others are superseded; connectors whose tool commands
collide are both inactive until one is removed.

See docs/connector-spec.md for the format and docs/store.md for the store.`,
		Example: `  aileron-proxy connector validate ./aileron.connector.v1.json
  aileron-proxy connector install configs/connectors/demo.aileron.connector.v1.json
  aileron-proxy connector list`,
		Args:                  cobra.ArbitraryArgs,
		DisableFlagsInUseLine: true,
		RunE:                  groupRunE,
	}
	cmd.AddCommand(
		newConnectorDraftCmd(a),
		newConnectorImportCmd(a),
		newConnectorInstallCmd(a),
		newConnectorListCmd(a),
		newConnectorRemoveCmd(a),
		newConnectorValidateCmd(a),
	)
	return cmd
}

func newConnectorInstallCmd(a *app) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "install [--force] PATH",
		Short: "Validate a connector spec or package and add it to the store",
		Long: `Validate a connector spec and add it to the store. PATH is a spec file or a
package directory that holds aileron.connector.v1.json at its root (all its
regular files are installed; symbolic links are refused).

The package is stored under sha256/<hex>, named by the hash of its content, so
installing the same content again changes nothing. An invalid spec installs
nothing: every problem is printed to stderr, one per line. A package whose tool
commands another installed connector already provides is refused unless
--force is given, in which case neither is active until one is removed.

Prints "installed <fqn> <version> sha256:<hex>". Exit status: 0 installed,
1 invalid spec, conflict or I/O error, 2 usage error.`,
		Example: `  aileron-proxy connector install configs/connectors/demo.aileron.connector.v1.json
  aileron-proxy connector install ./my-connector-package
  aileron-proxy connector install --force ./my-github-fork`,
		Args:                  usageArgs(cobra.ExactArgs(1)),
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := policy.OpenStore(a.home)
			if err != nil {
				return err
			}
			inst, err := st.Install(args[0], policy.InstallOptions{Force: force})
			if err != nil {
				var ve *policy.ValidationError
				if errors.As(err, &ve) {
					connPrintProblems(a.stderr, "", ve.Problems)
					return fmt.Errorf("%s is not a valid connector spec (%s); nothing was installed", args[0], connPlural(len(ve.Problems), "problem"))
				}
				return err
			}
			fmt.Fprintf(a.stdout, "installed %s %s %s\n", inst.Spec.Connector.FQN, connVersionLabel(inst.Spec.Connector.Version), inst.Hash)
			if !inst.IsActive() {
				fmt.Fprintf(a.stderr, "warning: %s is not active: %s\n", inst.Spec.Connector.FQN, inst.Status)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "install even if a tool command collides with another connector (both become inactive)")
	return cmd
}

func newConnectorListCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--json]",
		Short: "List the installed connectors and their status",
		Long: `List every package in the store with its FQN, version, hash, status and
tools. The status is one of:

  ok                 active: the daemon serves its operations
  superseded         a higher version of the same connector is active
  invalid: <reason>  unreadable, damaged or not a valid spec; skipped
  conflict: <reason> a tool command collides with another connector; skipped

--json prints the full detail, including every tool and operation.`,
		Example: `  aileron-proxy connector list
  aileron-proxy connector list --json`,
		Args:                  usageArgs(cobra.NoArgs),
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := policy.OpenStore(a.home)
			if err != nil {
				return err
			}
			entries, err := st.List()
			if err != nil {
				return err
			}
			if asJSON {
				return connWriteJSON(a.stdout, entries)
			}
			if len(entries) == 0 {
				fmt.Fprintln(a.stderr, "no connectors installed; install one with: aileron-proxy connector install PATH")
				return nil
			}
			return connWriteTable(a.stdout, entries)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON with every tool and operation")
	return cmd
}

func newConnectorValidateCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a connector spec and print every problem",
		Long: `Check a connector spec without installing it. FILE is a spec file or a
package directory holding aileron.connector.v1.json.

Every problem is printed to stdout, one per line, as "<json path>: <message>";
warnings (unknown fields, operations that are not proxyable, duplicate hosts)
are printed as "warning: <json path>: <message>" and do not make the spec
invalid. Exit status: 0 valid, 1 invalid or unreadable, 2 usage error.`,
		Example: `  aileron-proxy connector validate configs/connectors/demo.aileron.connector.v1.json
  aileron-proxy connector validate ./my-connector-package`,
		Args:                  usageArgs(cobra.ExactArgs(1)),
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := connReadSpec(args[0])
			if err != nil {
				return err
			}
			spec, warnings, err := policy.ParseSpec(data)
			connPrintProblems(a.stdout, "warning: ", warnings)
			var ve *policy.ValidationError
			var se *policy.SyntaxError
			switch {
			case errors.As(err, &ve):
				connPrintProblems(a.stdout, "", ve.Problems)
				return fmt.Errorf("%s is not a valid connector spec (%s)", args[0], connPlural(len(ve.Problems), "problem"))
			case errors.As(err, &se):
				fmt.Fprintln(a.stdout, se.Error())
				return fmt.Errorf("%s is not valid JSON", args[0])
			case err != nil:
				return fmt.Errorf("validating %s: %w", args[0], err)
			}
			ops, notProxyable := 0, 0
			for _, t := range spec.Tools {
				for i := range t.Operations {
					ops++
					if !t.Operations[i].IsProxyable() {
						notProxyable++
					}
				}
			}
			fmt.Fprintf(a.stdout, "valid: %s %s: %s, %s", spec.Connector.FQN, connVersionLabel(spec.Connector.Version),
				connPlural(len(spec.Tools), "tool"), connPlural(ops, "operation"))
			if notProxyable > 0 {
				fmt.Fprintf(a.stdout, " (%d not proxyable)", notProxyable)
			}
			fmt.Fprintln(a.stdout)
			return nil
		},
	}
}

func newConnectorRemoveCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "remove FQN|FQN@VERSION|sha256:HEX",
		Short: "Remove installed connector packages from the store",
		Long: `Remove installed packages: every version of a connector given its FQN, one
version given FQN@VERSION, or one package given sha256:HEX (a unique prefix of
at least 8 hex digits will do, such as the short hash "connector list" shows).

Prints "removed <fqn> <version> sha256:<hex>" per package. Exit status: 0
removed, 1 nothing matched or I/O error, 2 usage error.`,
		Example: `  aileron-proxy connector remove github://acme/aileron-connector-github
  aileron-proxy connector remove github://acme/aileron-connector-github@0.4.0
  aileron-proxy connector remove sha256:0123456789ab`,
		Args:                  usageArgs(cobra.ExactArgs(1)),
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := policy.OpenStore(a.home)
			if err != nil {
				return err
			}
			removed, err := st.Remove(args[0])
			for _, e := range removed {
				if e.Spec == nil {
					fmt.Fprintf(a.stdout, "removed invalid package %s\n", e.Hash)
					continue
				}
				fmt.Fprintf(a.stdout, "removed %s %s %s\n", e.Spec.Connector.FQN, connVersionLabel(e.Spec.Connector.Version), e.Hash)
			}
			return err
		},
	}
}

// connReadSpec reads a spec file, or the spec of a package directory.
func connReadSpec(path string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("reading spec: %w", err)
	}
	if info.IsDir() {
		path = filepath.Join(path, policy.SpecFileName)
		if info, err = os.Stat(path); err != nil {
			return nil, fmt.Errorf("reading spec: %w (a package directory holds %s at its root)", err, policy.SpecFileName)
		}
	}
	if info.Size() > policy.MaxSpecSize {
		return nil, fmt.Errorf("reading spec %s: it is %d bytes, over the %d-byte limit", path, info.Size(), policy.MaxSpecSize)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading spec: %w", err)
	}
	return data, nil
}

func connPrintProblems(w io.Writer, prefix string, problems []policy.Problem) {
	for _, p := range problems {
		fmt.Fprintf(w, "%s%s\n", prefix, p)
	}
}

func connVersionLabel(v string) string {
	if v == "" {
		return "unversioned"
	}
	return v
}

func connPlural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func connWriteTable(w io.Writer, entries []policy.Installed) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FQN\tVERSION\tHASH\tSTATUS\tTOOLS/OPERATIONS")
	for _, e := range entries {
		hash := e.Hash
		if len(hash) > len("sha256:")+12 {
			hash = hash[:len("sha256:")+12]
		}
		if e.Spec == nil {
			fmt.Fprintf(tw, "-\t-\t%s\t%s\t-\n", hash, e.Status)
			continue
		}
		var tools []string
		for _, t := range e.Spec.Tools {
			tools = append(tools, fmt.Sprintf("%s (%s)", t.Name, connPlural(len(t.Operations), "operation")))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Spec.Connector.FQN, connVersionLabel(e.Spec.Connector.Version), hash, e.Status, strings.Join(tools, ", "))
	}
	return tw.Flush()
}

// connListEntry is one entry of `connector list --json`.
type connListEntry struct {
	FQN     string         `json:"fqn,omitempty"`
	Version string         `json:"version,omitempty"`
	Hash    string         `json:"hash"`
	Dir     string         `json:"dir"`
	Status  string         `json:"status"`
	Active  bool           `json:"active"`
	Tools   []connListTool `json:"tools,omitempty"`
}

type connListTool struct {
	Name        string              `json:"name"`
	Command     string              `json:"command"`
	Description string              `json:"description,omitempty"`
	Operations  []connListOperation `json:"operations"`
}

type connListOperation struct {
	policy.Operation
	Proxyable bool `json:"proxyable"`
}

func connWriteJSON(w io.Writer, entries []policy.Installed) error {
	out := make([]connListEntry, 0, len(entries))
	for _, e := range entries {
		j := connListEntry{Hash: e.Hash, Dir: e.Dir, Status: e.Status, Active: e.IsActive()}
		if e.Spec != nil {
			j.FQN, j.Version = e.Spec.Connector.FQN, e.Spec.Connector.Version
			for _, t := range e.Spec.Tools {
				lt := connListTool{Name: t.Name, Command: policy.ToolCommand(t.Name), Description: t.Description, Operations: []connListOperation{}}
				for _, op := range t.Operations {
					lt.Operations = append(lt.Operations, connListOperation{Operation: op, Proxyable: op.IsProxyable()})
				}
				j.Tools = append(j.Tools, lt)
			}
		}
		out = append(out, j)
	}
	return writeJSON(w, out)
}
