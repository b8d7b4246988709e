package multimatch

// Chunker masks a message that arrives, and must be passed on, in chunks,
// with the same scan and hold-back as Reader: only bytes at which an
// occurrence could still start with bytes not yet seen are held back. It is
// not safe for concurrent use.
type Chunker struct {
	m   *Matcher
	buf []byte // buf[:held] is the held-back tail, as received
	out int    // buf[:out] was returned by the last Next
	k   masker
	ad  adapt
}

// Chunker returns a Chunker for one stream of messages.
func (m *Matcher) Chunker() *Chunker {
	return &Chunker{m: m, ad: newAdapt(m, adaptWindow)}
}

// Next masks p, the next chunk of the current message, and returns the
// bytes that can be passed on now: all of them when final (the message ends
// with p), otherwise all but a tail that could still start an occurrence.
// The result is valid until the next call; p is not modified. When final,
// the Chunker is ready for the next message, and it drops a buffer larger
// than keepMax.
func (c *Chunker) Next(p []byte, final bool, keepMax int) []byte {
	if c.out > 0 {
		n := copy(c.buf, c.buf[c.out:])
		c.buf = c.buf[:n]
		c.k.shiftBy(c.out)
		c.out = 0
	}
	c.buf = append(c.buf, p...)
	next := c.m.scan(c.buf, 0, len(c.buf), final, &c.k, &c.ad)
	if final {
		next = len(c.buf)
	}
	c.k.flush(c.buf, next)
	res := c.buf[:next]
	c.out = next
	if final {
		c.k, c.out = masker{}, 0
		if cap(c.buf) > keepMax {
			c.buf = nil // res still points at the old buffer
		} else {
			c.buf = c.buf[:0]
		}
	}
	return res
}
