package main

import (
	"fmt"
	"os"
	"os/exec"

	"github.com/spf13/cobra"
)

// newUICmd is `aileron-proxy ui`: a fresh one-time sign-in link for the
// web console of the running daemon.
func newUICmd(a *app) *cobra.Command {
	var noOpen bool
	cmd := &cobra.Command{
		Use:   "ui [--no-open]",
		Short: "Print a one-time sign-in link for the web console",
		Long: `Ask the running daemon (through the admin API) for a fresh one-time link to
its web console at /ui/ and print it on stdout. The link works once, within
a few minutes, and sets a browser cookie; the console shows pending
approvals, sessions and the audit trail. When a desktop is available ($DISPLAY
or $WAYLAND_DISPLAY, and xdg-open on PATH) the link is also opened in the
browser, unless --no-open is given. See docs/console.md.`,
		Example: `  aileron-proxy ui
  aileron-proxy ui --no-open`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.daemonClient()
			if err != nil {
				return err
			}
			login, err := c.ConsoleLogin(cmd.Context())
			if err != nil {
				return fmt.Errorf("asking the daemon for a console sign-in link: %w", err)
			}
			fmt.Fprintln(a.stdout, login.URL)
			if !noOpen && hasDesktop() {
				if xdg, err := exec.LookPath("xdg-open"); err == nil {
					open := exec.Command(xdg, login.URL)
					if err := open.Start(); err == nil {
						go func() { _ = open.Wait() }()
					}
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&noOpen, "no-open", false, "only print the link, never open a browser")
	return cmd
}

// hasDesktop reports whether a graphical session is available.
func hasDesktop() bool { return os.Getenv("DISPLAY") != "" || os.Getenv("WAYLAND_DISPLAY") != "" }
