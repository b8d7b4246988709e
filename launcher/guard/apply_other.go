//go:build !linux

package guard

import (
	"errors"
	"net/netip"
)

var errGuardLinux = errors.New("the egress guard runs only on Linux, inside the sandbox's network namespace")

// Ruleset is Linux-only.
type Ruleset struct{}

// Rules is Linux-only.
func Rules([]netip.AddrPort) (*Ruleset, error) { return nil, errGuardLinux }

// Lines is Linux-only.
func (*Ruleset) Lines() []string { return nil }

// Apply is Linux-only.
func Apply(*Ruleset) error { return errGuardLinux }

// Read is Linux-only.
func Read() ([]string, error) { return nil, errGuardLinux }
