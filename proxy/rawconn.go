package proxy

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// rawConn reads and writes a TCP socket with raw system calls.
//
// A Go read or write on a socket enters the scheduler's syscall state:
// sysmon, asleep while every P is idle, is woken by the first one
// (entersyscall) and runs on a 20 µs tick again, and a write that takes
// longer than that tick (a loopback write runs the receiver's TCP stack
// too) can have its P handed to another thread. For a proxy that wakes for
// each request, that was a fifth of its CPU at one client (perf: sysmon's
// nanosleep, futex wakeups, context switches). A read or write on a
// non-blocking socket never blocks, so it needs none of that: rawConn
// makes the same calls with syscall.RawSyscall inside the poller's
// RawRead and RawWrite, which still park the goroutine until the socket is
// ready and honour deadlines and Close.
type rawConn struct {
	*net.TCPConn
	rc syscall.RawConn

	// The callbacks and their state live here so a call allocates nothing.
	rbuf   []byte
	rn     int
	rerr   syscall.Errno
	readFn func(uintptr) bool

	wbuf    []byte
	wn      int
	werr    syscall.Errno
	writeFn func(uintptr) bool
}

// newRawConn wraps c when it is a TCP connection; otherwise it returns c.
func newRawConn(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	r := &rawConn{TCPConn: tc, rc: rc}
	r.readFn = r.doRead
	r.writeFn = r.doWrite
	return r
}

func (c *rawConn) doRead(fd uintptr) bool {
	for {
		n, _, errno := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&c.rbuf[0])), uintptr(len(c.rbuf)))
		switch errno {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait until readable
		}
		c.rn, c.rerr = int(n), errno
		return true
	}
}

func (c *rawConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rbuf, c.rn, c.rerr = p, 0, 0
	err := c.rc.Read(c.readFn)
	c.rbuf = nil
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case c.rerr != 0:
		return 0, c.opError("read", os.NewSyscallError("read", c.rerr))
	case c.rn == 0:
		return 0, io.EOF
	}
	return c.rn, nil
}

func (c *rawConn) doWrite(fd uintptr) bool {
	for c.wn < len(c.wbuf) {
		p := c.wbuf[c.wn:]
		n, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		switch errno {
		case 0:
			c.wn += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // wait until writable
		default:
			c.werr = errno
			return true
		}
	}
	return true
}

func (c *rawConn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.wbuf, c.wn, c.werr = p, 0, 0
	err := c.rc.Write(c.writeFn)
	c.wbuf = nil
	n := c.wn
	switch {
	case err != nil:
		return n, c.opError("write", err)
	case c.werr != 0:
		return n, c.opError("write", os.NewSyscallError("write", c.werr))
	}
	return n, nil
}

// opError wraps err as net's own TCP connection reports it.
func (c *rawConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
