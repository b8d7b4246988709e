package credentials

import "github.com/aileron-dev/aileron-proxy/internal/multimatch"

// ChunkMasker masks secrets in a message that arrives, and must be passed
// on, in chunks (the frames of one WebSocket message), including secrets
// split across chunks. Each chunk is masked as soon as it arrives; only the
// last bytes that could start a secret not yet complete (at most the longest
// pattern minus one) are held back until the next chunk or the message's
// end. Its buffers grow to the largest chunk plus that tail and are dropped
// at a message's end when larger than 4 KiB, so an idle stream keeps little.
// It is not safe for concurrent use; build one per stream with
// Scrubber.Chunks.
type ChunkMasker struct {
	m                 *multimatch.Matcher
	out               []byte // scratch: tail and chunk, masked in place
	tailOrig, tailOut []byte // the held-back tail as received, and masked
}

// chunkKeepMax is the largest scratch buffer a ChunkMasker keeps between
// messages.
const chunkKeepMax = 4 << 10

// Chunks returns a ChunkMasker for one stream of messages; nil for a nil
// Scrubber. A nil *ChunkMasker passes chunks through unchanged.
func (s *Scrubber) Chunks() *ChunkMasker {
	if s == nil {
		return nil
	}
	return &ChunkMasker{m: s.m}
}

// Next masks p, the next chunk of the current message, and returns the bytes
// that can be passed on now, in order: when final (the message ends with p)
// all of them, the held-back tail included; otherwise all but a tail that
// could still start a secret. The result is valid until the next call; p is
// not modified. Over a whole message the results add up to exactly the bytes
// given, with every secret occurrence masked.
func (c *ChunkMasker) Next(p []byte, final bool) []byte {
	if c == nil {
		return p
	}
	held := len(c.tailOrig)
	c.out = append(append(c.out[:0], c.tailOrig...), p...)
	c.m.MaskAll(c.out)
	for i, b := range c.tailOut {
		if b == multimatch.Mask {
			c.out[i] = multimatch.Mask // found whole by an earlier pass; this one may not see it whole
		}
	}
	n := len(c.out)
	release := n
	if !final {
		release = max(n-(c.m.MaxLen()-1), 0)
	}
	// The new tail as received is the end of tailOrig then p; only it is
	// copied, never the whole chunk.
	if release < held {
		c.tailOrig = append(c.tailOrig[:copy(c.tailOrig, c.tailOrig[release:])], p...)
	} else {
		c.tailOrig = append(c.tailOrig[:0], p[release-held:]...)
	}
	c.tailOut = append(c.tailOut[:0], c.out[release:]...)
	res := c.out[:release]
	if final && cap(c.out) > chunkKeepMax {
		c.out = nil // res still points at the old buffer
	}
	return res
}
