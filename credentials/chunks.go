package credentials

import "github.com/aileron-dev/aileron-proxy/internal/multimatch"

// ChunkMasker masks secrets in a message that arrives, and must be passed
// on, in chunks (the frames of one WebSocket message), including secrets
// split across chunks. Each chunk is masked as soon as it arrives; only the
// last bytes that could start a secret not yet complete (at most the longest
// pattern minus one) are held back until the next chunk or the message's
// end. Its buffer grows to the largest chunk plus that tail and is dropped
// at a message's end when larger than 4 KiB, so an idle stream keeps little.
// It is not safe for concurrent use; build one per stream with
// Scrubber.Chunks.
type ChunkMasker struct {
	c *multimatch.Chunker
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
	return &ChunkMasker{c: s.m.Chunker()}
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
	return c.c.Next(p, final, chunkKeepMax)
}
