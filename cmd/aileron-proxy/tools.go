package main

import (
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/aileron-dev/aileron-proxy/actions"
	"github.com/aileron-dev/aileron-proxy/mcpserver"
	"github.com/aileron-dev/aileron-proxy/policy"
	"github.com/aileron-dev/aileron-proxy/shims"
)

// newToolsCmd is `aileron-proxy tools`: render tools.txt and the shims an
// agent uses to call connector operations.
func newToolsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tools COMMAND",
		Short: "Render the commands an agent uses to call connector operations",
		Long: `Render tools.txt and one command (shim) per connector tool from the active
installed connector specs. Inside a sandbox, tools.txt is /etc/aileron/tools.txt
and the shims are in /usr/local/bin; launch renders them itself, this command
shows or prepares the same files.

See docs/shims.md for the shim protocol, exit codes and conflicts.`,
		Example: `  aileron-proxy tools render --out ./tools
  aileron-proxy tools render --out ./tools --connector github://acme/aileron-connector-google --agent claude`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRunE,
	}
	cmd.AddCommand(newToolsRenderCmd(a))
	return cmd
}

func newToolsRenderCmd(a *app) *cobra.Command {
	var (
		out        string
		connectors []string
		agent      string
		reserved   []string
		mcpNames   bool
	)
	cmd := &cobra.Command{
		Use:   "render (--out DIR | --mcp) [--connector FQN]... [--agent CMD] [--reserved NAME]...",
		Short: "Write tools.txt and the shims of the installed connectors",
		Long: `Write DIR/tools.txt and DIR/bin/<tool> (mode 0755) for every tool of the
active installed connectors, or of the connectors named with --connector, and
one action tool per connector that installed actions run (docs/actions.md).

Everything is rendered before anything is written, into a temporary directory
that then replaces DIR, so on any error DIR is left as it was. DIR must be new,
empty or a previous render.

Rendering fails, listing every conflict, when two connectors provide the same
tool command, when a connector tool and an action tool share a command, when a command equals the agent command (--agent) or a --reserved
name, or when it would shadow a basic sandbox command (sh, env, wget, curl, git
and the others listed in docs/shims.md).

Exit status: 0 rendered; 1 conflict or write failure; 2 usage error.`,
		Example: `  aileron-proxy tools render --out ./tools
  aileron-proxy tools render --out ./tools --connector github://acme/aileron-connector-google
  aileron-proxy tools render --out ./tools --agent claude --reserved aileron-approve`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" && !mcpNames {
				return usageError(errors.New("--out is required; pass the directory to write, e.g. --out ./tools (or --mcp to show the MCP tool names)"))
			}
			_, loaded, err := a.loadConnectors(func(p string) { fmt.Fprintf(a.stderr, "warning: %s\n", p) })
			if err != nil {
				return err
			}
			conns, err := policy.SelectConnectors(loaded.Active, connectors)
			if err != nil {
				return fmt.Errorf("rendering tools: --connector %w", err)
			}
			if len(conns) == 0 {
				fmt.Fprintln(a.stderr, "warning: no active connectors; the render holds no tools (install one with \"aileron-proxy connector install PATH\")")
			}
			acts, err := a.loadActions(conns)
			if err != nil {
				return err
			}
			if mcpNames {
				return a.printMCPNames(conns, acts)
			}
			rendered, err := shims.Render(shims.RenderOptions{Connectors: conns, AgentCommand: agent, Reserved: reserved, Actions: acts})
			if err != nil {
				return fmt.Errorf("%w\nnothing was written to %s", err, out)
			}
			if err := shims.WriteDir(out, rendered); err != nil {
				return err
			}
			noun := "tools"
			if len(rendered.Shims) == 1 {
				noun = "tool"
			}
			fmt.Fprintf(a.stdout, "wrote %d %s to %s\n", len(rendered.Shims), noun, out)
			_, err = a.stdout.Write(rendered.ToolsTxt)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "", "directory to write tools.txt and bin/ into (required)")
	f.StringArrayVar(&connectors, "connector", nil, "render only this connector FQN (repeatable; default every active connector)")
	f.StringVar(&agent, "agent", "", "agent command the sandbox runs; no tool may be named like it")
	f.BoolVar(&mcpNames, "mcp", false, "print the MCP tool names and what each calls instead of writing shims (docs/mcp.md)")
	f.StringArrayVar(&reserved, "reserved", nil, "command name the sandbox mounts besides the shims (repeatable)")
	return cmd
}

// loadConnectors opens the connector store of a.home and loads it, passing
// the problem of each skipped entry to warn.
func (a *app) loadConnectors(warn func(string)) (*policy.Store, *policy.LoadResult, error) {
	store, err := policy.OpenStore(a.home)
	if err != nil {
		return nil, nil, err
	}
	loaded, err := store.Load()
	if err != nil {
		return nil, nil, fmt.Errorf("loading the installed connectors: %w", err)
	}
	for _, p := range loaded.Problems {
		warn(p)
	}
	return store, loaded, nil
}

// printMCPNames prints the MCP tool of every operation and action of
// conns: its name, then the connector FQN, tool and operation it calls (or
// the action), tab-separated.
func (a *app) printMCPNames(conns []policy.Connector, acts []actions.Installed) error {
	snap, err := policy.Compile(conns)
	if err != nil {
		return fmt.Errorf("compiling the connectors: %w", err)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MCP TOOL\tCALLS")
	for _, e := range mcpserver.Catalog(snap, mcpserver.AllScope(snap), acts) {
		calls := e.ConnectorFQN + " " + e.Tool + " " + e.Operation
		if e.Action != "" {
			calls = "action " + e.Action + " (" + calls + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\n", e.Name, calls)
	}
	return tw.Flush()
}
