package main

import (
	"fmt"
	"net/netip"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/aileron-dev/aileron-proxy/launcher/guard"
)

// newInternalCmd is the hidden `aileron-proxy internal`: helpers launch
// runs inside containers. They are not a user interface.
func newInternalCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "internal COMMAND",
		Short:   "Run helpers that launch starts inside containers",
		Long:    `Helpers launch runs inside the containers it creates. Not for direct use.`,
		Example: `  aileron-proxy internal guard show`,
		Hidden:  true,
		Args:    cobra.ArbitraryArgs,
		RunE:    groupRunE,
	}
	guard := &cobra.Command{
		Use:   "guard COMMAND",
		Short: "Hold, install or show the sandbox's egress guard",
		Long: `Run in the sandbox's holder container (static binary, CAP_NET_ADMIN only):
"hold" keeps the network namespace alive until SIGTERM, "apply" installs the
nftables egress guard allowing only the given TCP endpoints and prints the rules
the kernel then holds, "show" prints them. See "Egress guard" in docs/launcher.md.`,
		Example: `  aileron-proxy internal guard apply --allow 10.89.1.1:41000 --allow 10.89.1.1:41001`,
		Args:    cobra.ArbitraryArgs,
		RunE:    groupRunE,
	}
	guard.AddCommand(newGuardHoldCmd(), newGuardApplyCmd(a), newGuardShowCmd(a))
	cmd.AddCommand(guard, newInternalSandboxCmd(a))
	return cmd
}

func newGuardHoldCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "hold [flags]",
		Short:   "Wait for SIGTERM, keeping the network namespace alive",
		Long:    `Block until SIGTERM or SIGINT: the holder container's main process.`,
		Example: `  aileron-proxy internal guard hold`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			<-ctx.Done()
			return nil
		},
	}
}

func newGuardApplyCmd(a *app) *cobra.Command {
	var allow []string
	cmd := &cobra.Command{
		Use:   "apply --allow IP:PORT [--allow IP:PORT]...",
		Short: "Install the egress guard in this network namespace",
		Long: `Install the nftables egress guard (table inet ` + guard.Table + `) in this network
namespace, verify what the kernel holds, and print it. Needs CAP_NET_ADMIN.`,
		Example: `  aileron-proxy internal guard apply --allow 10.89.1.1:41000 --allow 10.89.1.1:41001`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			eps := make([]netip.AddrPort, 0, len(allow))
			for _, s := range allow {
				ap, err := netip.ParseAddrPort(s)
				if err != nil {
					return usageError(fmt.Errorf("--allow %q is not IP:PORT (e.g. 10.89.1.1:41000)", s))
				}
				eps = append(eps, ap)
			}
			rs, err := guard.Rules(eps)
			if err != nil {
				return err
			}
			if err := guard.Apply(rs); err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, strings.Join(rs.Lines(), "\n"))
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&allow, "allow", nil, "TCP endpoint the sandbox may connect to (repeatable)")
	return cmd
}

func newGuardShowCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "show [flags]",
		Short:   "Print the egress guard this network namespace holds",
		Long:    `Print the rules of table inet ` + guard.Table + ` as read back from the kernel. Needs CAP_NET_ADMIN.`,
		Example: `  aileron-proxy internal guard show`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			lines, err := guard.Read()
			if err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, strings.Join(lines, "\n"))
			return nil
		},
	}
}
