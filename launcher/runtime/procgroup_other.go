//go:build !linux

package runtime

import "os/exec"

// ownProcessGroup leaves cmd in launch's process group.
func ownProcessGroup(*exec.Cmd) {}
