//go:build !linux

package launcher

import (
	"errors"
	"net/netip"
)

var errGuardLinux = errors.New("the egress guard runs only on Linux, inside the sandbox's network namespace")

// GuardRuleset is Linux-only.
type GuardRuleset struct{}

// GuardRules is Linux-only.
func GuardRules([]netip.AddrPort) (*GuardRuleset, error) { return nil, errGuardLinux }

// Lines is Linux-only.
func (*GuardRuleset) Lines() []string { return nil }

// ApplyGuard is Linux-only.
func ApplyGuard(*GuardRuleset) error { return errGuardLinux }

// ReadGuard is Linux-only.
func ReadGuard() ([]string, error) { return nil, errGuardLinux }
