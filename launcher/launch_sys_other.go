//go:build !linux

package launcher

import (
	"syscall"
)

// freebindControl binds normally: IP_FREEBIND is Linux-only, and the
// gateway address of a Docker network exists as soon as it is created.
func freebindControl(_, _ string, _ syscall.RawConn) error { return nil }

// ownerOf is unknown outside Linux: the image user is kept.
func ownerOf(string) (uid, gid int, ok bool) { return 0, 0, false }
