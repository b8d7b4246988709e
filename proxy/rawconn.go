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

	// Held writes (holdWrites): bytes the next Read sends, and whether
	// Writes are being held.
	held       []byte
	holding    bool
	heldErr    error // the held send's error when the poller refused it
	sendHeldFn func(uintptr) bool
	emptyReads int // reads that found nothing (EAGAIN), for tests
}

// heldMax bounds a held write; a larger one is sent at once.
const heldMax = 16 << 10

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
	r.sendHeldFn = r.sendHeldThenRead
	return r
}

// holdWrites, with on, makes Writes keep their bytes for the next Read to
// send; with off, Writes send again (what is held still waits for Read).
//
// A request written just before its answer is read is otherwise followed
// by a read that finds nothing yet (EAGAIN): a system call for nothing,
// about 0.55 µs here. The read cannot simply wait first: the poller
// forgets a readiness event at the start of every read (prepareRead), and
// the answer may already have come in. Sent from inside the read, after
// that reset, the request's answer can only arrive later and wakes the
// wait.
//
// Held bytes leave only through the next Read. A Write before that Read
// drops them: the exchange they were for ended unread (a failed request's
// Close sends an alert), and its request must not go out after the client
// was told it failed.
//
// Only for a request whose answer is the next thing the peer sends: bytes
// it sent before, unread, with nothing after them, would not wake the
// wait. That rules out a server's response to a client that may pipeline.
func (c *rawConn) holdWrites(on bool) { c.holding = on }

// heldPending reports whether held bytes wait for a Read.
func (c *rawConn) heldPending() bool { return len(c.held) > 0 }

// sendHeldThenRead is Read's callback while a write is held: the first
// call sends it and waits for the answer, later calls read.
func (c *rawConn) sendHeldThenRead(fd uintptr) bool {
	if len(c.held) == 0 {
		return c.doRead(fd)
	}
	c.wbuf, c.wn, c.werr = c.held, 0, 0
	if !c.doWrite(fd) {
		// The socket buffer is full: wait until writable, as Write does.
		c.heldErr = c.rc.Write(c.writeFn)
	}
	c.wbuf, c.held = nil, c.held[:0]
	return c.heldErr != nil || c.werr != 0
}

func (c *rawConn) doRead(fd uintptr) bool {
	for {
		n, _, errno := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&c.rbuf[0])), uintptr(len(c.rbuf)))
		switch errno {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			c.emptyReads++
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
	fn, sending := c.readFn, len(c.held) > 0
	if sending {
		c.holding, c.heldErr, c.werr = false, nil, 0
		fn = c.sendHeldFn
	}
	err := c.rc.Read(fn)
	c.rbuf = nil
	switch {
	case sending && c.heldErr != nil:
		err, c.heldErr = c.heldErr, nil
		return 0, c.opError("write", err)
	case sending && c.werr != 0:
		return 0, c.opError("write", os.NewSyscallError("write", c.werr))
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
	if !c.holding {
		if len(c.held) > 0 {
			c.held = c.held[:0] // dropped: see holdWrites
		}
		return c.writeAll(p)
	}
	if len(c.held)+len(p) <= heldMax {
		c.held = append(c.held, p...)
		return len(p), nil
	}
	// Too much to hold: what is held goes first, in order (TLS records are
	// numbered), and nothing more is held.
	c.holding = false
	held := c.held
	c.held = c.held[:0]
	if len(held) > 0 {
		if _, err := c.writeAll(held); err != nil {
			return 0, err
		}
	}
	return c.writeAll(p)
}

// writeAll writes p with the poller's RawWrite.
func (c *rawConn) writeAll(p []byte) (int, error) {
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
