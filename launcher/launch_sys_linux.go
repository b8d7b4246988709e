package launcher

import (
	"syscall"
)

// freebindControl sets IP_FREEBIND so a relay can bind a gateway address
// before Podman has added it to the host (it does so when the first
// container joins the network).
func freebindControl(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_FREEBIND, 1)
	}); err != nil {
		return err
	}
	return serr
}

// ownerOf returns the uid and gid owning path; ok is false when unknown.
func ownerOf(path string) (uid, gid int, ok bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}
