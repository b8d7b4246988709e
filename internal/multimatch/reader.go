package multimatch

import (
	"errors"
	"io"
)

// reader is the streaming state of Matcher.Reader.
//
// buf[ro:done] is masked output not yet returned; buf[done:end] has been
// read but not yet released (a possible pattern prefix, at most maxLen-1
// bytes, plus bytes masker has not flushed).
type reader struct {
	m    *Matcher
	rc   io.ReadCloser
	buf  []byte
	ro   int
	done int
	end  int
	k    masker
	ad   adapt
	err  error // sticky error from rc, io.EOF included
	// grow is set when a read filled the buffer; compact then doubles it.
	grow bool
}

// maxEmptyReads bounds consecutive (0, nil) reads from the wrapped body.
const maxEmptyReads = 100

func (r *reader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := r.fill(); err != nil {
		return 0, err
	}
	n := copy(p, r.buf[r.ro:r.done])
	r.ro += n
	return n, nil
}

// WriteTo implements io.WriterTo: it writes the masked bytes to w straight
// from the internal buffer, each released segment as soon as Read could
// return it, until the body ends (returning nil) or fails, or a write
// fails. Each Write receives a slice that is valid only during the call.
func (r *reader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		if err := r.fill(); err != nil {
			if err == io.EOF {
				err = nil
			}
			return total, err
		}
		seg := r.buf[r.ro:r.done]
		n, err := w.Write(seg)
		if n < 0 || n > len(seg) {
			n = 0
			if err == nil {
				err = errInvalidWrite
			}
		}
		r.ro += n
		total += int64(n)
		if err == nil && n < len(seg) {
			err = io.ErrShortWrite
		}
		if err != nil {
			return total, err
		}
	}
}

var errInvalidWrite = errors.New("scrubbing response body: invalid write result")

// fill makes released bytes available (ro < done), reading from rc as
// needed, or returns the sticky error once everything has been released.
func (r *reader) fill() error {
	empty := 0
	for r.ro == r.done {
		if r.err != nil {
			if r.done < r.end {
				r.release(true)
				continue
			}
			return r.err
		}
		if !r.compact() {
			return errBufferFull
		}
		free := len(r.buf) - r.end
		n, err := r.rc.Read(r.buf[r.end:])
		r.end += n
		r.grow = n == free && len(r.buf) < maxBufSize
		if err != nil {
			r.err = err
		}
		if n == 0 && err == nil {
			if empty++; empty >= maxEmptyReads {
				return io.ErrNoProgress
			}
			continue
		}
		r.release(r.err != nil)
	}
	return nil
}

// release scans the unreleased bytes and moves done forward over every
// byte that is final.
func (r *reader) release(final bool) {
	next := r.m.scan(r.buf, r.done, r.end, final, &r.k, &r.ad)
	if final {
		next = r.end
	}
	r.k.flush(r.buf, next)
	r.done = next
}

// errBufferFull reports a broken invariant: unreleased bytes never exceed
// maxLen-1 and the buffer holds at least 4*maxLen.
var errBufferFull = errors.New("scrubbing response body: internal buffer full")

// compact moves unreleased bytes to the front of buf so a read has room and
// reports whether there is room. It runs only when all released bytes have
// been returned (ro == done).
func (r *reader) compact() bool {
	if r.grow {
		r.grow = false
		nb := make([]byte, min(2*len(r.buf), maxBufSize))
		n := copy(nb, r.buf[r.ro:r.end])
		r.k.shiftBy(r.ro)
		r.buf = nb
		r.end = n
		r.done -= r.ro
		r.ro = 0
		return true
	}
	if r.ro > 0 {
		n := copy(r.buf, r.buf[r.ro:r.end])
		r.k.shiftBy(r.ro)
		r.end = n
		r.done -= r.ro
		r.ro = 0
	}
	return r.end < len(r.buf)
}

func (r *reader) Close() error { return r.rc.Close() }
