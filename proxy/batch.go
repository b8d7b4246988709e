package proxy

import (
	"net"
	"sync"
)

// System calls on the bulk path. crypto/tls reads and writes its
// connection one record (at most 16 KiB) at a time, so a download costs a
// read and a write system call per 16 KiB, each with its TCP work, and on
// loopback the receiver's too. Two wrappers cut that:
//
//   - readBufConn under an upstream TLS connection reads the socket in
//     pieces of up to rawReadSize, from which TLS takes its records, and
//     says when a whole record is already here (a read that cannot block).
//   - tunnelConn (the client side) collects the records of one large body
//     write and sends them with one system call (startBatch, flushBatch).
//
// Both buffers are pooled and held only while they hold data.

// rawReadSize is the socket read size of an upstream connection.
const rawReadSize = 256 << 10

// maxRecordWire bounds a TLS record on the wire: header, 16 KiB of
// plaintext and the largest expansion TLS 1.2 allows. With this many bytes
// buffered, the next record can be read without waiting.
const maxRecordWire = 5 + 16<<10 + 2048

// batchMin is the smallest body write sent as one batch.
const batchMin = 32 << 10

var rawBufPool = sync.Pool{New: func() any { b := make([]byte, rawReadSize); return &b }}

// readBufConn buffers the reads of a connection.
type readBufConn struct {
	net.Conn
	buf  *[]byte // nil when empty
	r, w int
}

func (c *readBufConn) Read(p []byte) (int, error) {
	if c.buf == nil {
		if len(p) >= rawReadSize {
			return c.Conn.Read(p)
		}
		c.buf = rawBufPool.Get().(*[]byte)
		n, err := c.Conn.Read(*c.buf)
		if n <= 0 {
			c.release()
			return 0, err
		}
		c.r, c.w = 0, n
		// A read error after data returns again on the next read.
	}
	n := copy(p, (*c.buf)[c.r:c.w])
	c.r += n
	if c.r == c.w {
		c.release()
	}
	return n, nil
}

func (c *readBufConn) release() {
	if c.buf != nil {
		rawBufPool.Put(c.buf)
		c.buf = nil
	}
	c.r, c.w = 0, 0
}

// buffered is how many bytes are read from the socket and not yet taken.
func (c *readBufConn) buffered() int { return c.w - c.r }

var batchBufPool = sync.Pool{New: func() any { b := make([]byte, 0, 256<<10); return &b }}

// startBatch makes Write collect what it is given until flushBatch.
func (c *tunnelConn) startBatch() {
	if c.batch == nil {
		c.batch = batchBufPool.Get().(*[]byte)
	}
}

// flushBatch sends what was collected with one write and stops collecting.
func (c *tunnelConn) flushBatch() error {
	b := c.batch
	if b == nil {
		return nil
	}
	c.batch = nil
	var err error
	if len(*b) > 0 {
		_, err = c.Conn.Write(*b)
	}
	*b = (*b)[:0]
	batchBufPool.Put(b)
	return err
}

func (c *tunnelConn) Write(p []byte) (int, error) {
	if c.batch != nil {
		*c.batch = append(*c.batch, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}
