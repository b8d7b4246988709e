package runtime

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup starts cmd in a process group of its own, so a signal a
// terminal sends to launch's group does not reach it besides the copy
// launch relays.
func ownProcessGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}
