// Package multimatch finds every occurrence of a fixed set of byte
// patterns in a buffer or a stream and masks them: the search engine behind
// credentials' scrubber. It knows nothing about secrets; credentials turns
// secrets into the patterns (their encodings) and keeps the rules about
// them.
//
// A Matcher picks among anchored search (rare bytes found with SIMD
// bytes.IndexByte) and a Wu-Manber scan with a cost model, and a stream
// switches between them as it observes what they cost (anchor.go).
package multimatch

import (
	"bytes"
	"io"
	"sort"
)

// Mask is the byte that replaces every byte of an occurrence.
const Mask = '*'

// bufSize is the streaming buffer's starting size (at least four times the
// longest pattern). It doubles, up to maxBufSize, each time a read fills
// it: a body that arrives faster than it is drained is then read in large
// pieces, which for an HTTP/2 upstream also means fewer flow-control
// updates (Go's client sends one per read of 4 KiB or more).
const (
	bufSize    = 32 << 10
	maxBufSize = 256 << 10
)

// Matcher finds all occurrences of a fixed set of patterns. Where every
// pattern fits in the data it uses one of two strategies: anchored search
// (each pattern is found through one of a few rare bytes with SIMD
// bytes.IndexByte, and a hit is checked against a neighbouring byte and the
// patterns' first four bytes), or a Wu-Manber scan with two-byte blocks,
// whose cost depends on how far it can skip, not on byte frequencies. The
// cost model in anchor.go picks one statically; a stream then switches as it
// observes the actual costs (see adapt), also to a second anchor set chosen
// for binary data, where every byte value is equally likely. Near the end of
// the data it checks each position directly.
type Matcher struct {
	pats   [][]byte
	minLen int
	maxLen int
	// anchors covers every pattern, chosen for text, or is nil when too
	// many bytes would be needed; anchored is the static choice of the
	// anchored strategy. bin covers every pattern with the fewest passes,
	// for binary data, or is nil when it would not be cheaper there than
	// anchors.
	anchors  []anchor
	bin      []anchor
	anchored bool
	// shift[block] is how far the window may move when the two bytes ending
	// the minLen-long window are block.
	shift *[1 << 16]uint8
	// cand[block] lists the patterns whose minLen prefix ends with block.
	cand map[uint16][]int32
	// firstAt[c] is the index in pats (sorted) of the first pattern whose
	// first byte is c or more; the patterns starting with c are
	// pats[firstAt[c]:firstAt[c+1]].
	firstAt [257]int32
	// starts, for a Matcher of at least startsMin patterns, has the bit
	// startHash(p[:3]) set for each pattern p: scanTail skips a position
	// whose next three bytes start no pattern without looking at any.
	starts *[1 << 16 / 64]uint64
	// est is what newAdapt starts a stream's estimates with.
	est [numStrats]float64
}

// New builds a Matcher for the non-empty patterns, each at least four bytes
// long (the anchored check loads four bytes; credentials.MinSecretLen), or
// returns nil when there are none. Duplicates are dropped.
func New(forms []string) *Matcher {
	seen := map[string]bool{}
	var pats [][]byte
	for _, f := range forms {
		if f != "" && !seen[f] {
			seen[f] = true
			pats = append(pats, []byte(f))
		}
	}
	if len(pats) == 0 {
		return nil
	}
	sort.Slice(pats, func(i, j int) bool { return bytes.Compare(pats[i], pats[j]) < 0 })
	m := &Matcher{pats: pats, minLen: len(pats[0]), cand: map[uint16][]int32{}}
	for _, p := range pats {
		m.minLen = min(m.minLen, len(p))
		m.maxLen = max(m.maxLen, len(p))
	}
	def := min(m.minLen-1, 255)
	m.shift = new([1 << 16]uint8)
	for i := range m.shift {
		m.shift[i] = uint8(def)
	}
	fi := 0
	for c := range m.firstAt {
		for fi < len(pats) && int(pats[fi][0]) < c {
			fi++
		}
		m.firstAt[c] = int32(fi)
	}
	if len(pats) >= startsMin {
		m.starts = new([1 << 16 / 64]uint64)
		for _, p := range pats {
			h := startHash(p)
			m.starts[h/64] |= 1 << (h % 64)
		}
	}
	for pi, p := range pats {
		for j := 1; j < m.minLen; j++ {
			blk := uint16(p[j-1])<<8 | uint16(p[j])
			if sh := m.minLen - 1 - j; sh < int(m.shift[blk]) {
				m.shift[blk] = uint8(sh)
			}
		}
		last := uint16(p[m.minLen-2])<<8 | uint16(p[m.minLen-1])
		m.cand[last] = append(m.cand[last], int32(pi))
	}
	offs := firstOffsets(pats)
	var cost float64
	m.anchors, cost = chooseAnchors(pats, offs)
	m.anchored = cost < wuManberCost(m.minLen)
	m.bin = chooseBinaryAnchors(pats, offs)
	if m.anchors != nil && m.bin != nil && setCost(m.bin, uniformFreq) >= setCost(m.anchors, uniformFreq) {
		m.bin = nil
	}
	m.est = m.startEstimates()
	return m
}

// Len reports how many distinct patterns m searches for.
func (m *Matcher) Len() int { return len(m.pats) }

// MinLen reports the shortest pattern's length.
func (m *Matcher) MinLen() int { return m.minLen }

// MaxLen reports the longest pattern's length; a stream holds back at most
// MaxLen-1 bytes that could still start an occurrence.
func (m *Matcher) MaxLen() int { return m.maxLen }

// Reader wraps rc so that reads return its bytes with every occurrence
// masked. It streams: memory is bounded (a buffer of 32 KiB that grows to
// 256 KiB only while reads keep filling it), bytes are delivered as soon as
// no pattern can start at them (a partial match at the end of what has
// arrived so far is held back until it is resolved), and matches split
// across reads are found. The reader also implements io.WriterTo, which
// io.Copy uses to write from its buffer without a copy. Close closes rc.
func (m *Matcher) Reader(rc io.ReadCloser) io.ReadCloser {
	size := max(bufSize, 4*m.maxLen)
	return &reader{m: m, rc: rc, buf: make([]byte, size), ad: newAdapt(m, adaptWindow)}
}

// masker accumulates occurrences found in increasing start order and writes
// the mask only over bytes that no later scan will read.
type masker struct {
	from, end int // pending merged interval [from, end)
}

// add records an occurrence [s, s+n) found while scanning start position s.
// Every byte before s is final, so a pending interval that ends before s is
// written now.
func (k *masker) add(buf []byte, s, n int) {
	if s > k.end {
		k.flush(buf, k.end)
		k.from = s
	}
	if s < k.from {
		k.from = s
	}
	k.end = max(k.end, s+n)
}

// flush writes the mask over pending bytes before limit.
func (k *masker) flush(buf []byte, limit int) {
	e := min(k.end, limit)
	for i := k.from; i < e; i++ {
		buf[i] = Mask
	}
	if e > k.from {
		k.from = e
	}
}

// shiftBy moves the pending interval left by n bytes after a compaction.
func (k *masker) shiftBy(n int) {
	k.from = max(k.from-n, 0)
	k.end = max(k.end-n, 0)
}

// scan examines start positions from s on in buf[:end] with the strategy
// ad selects, and reports the work to ad. With final set, data ends at end;
// otherwise scanning stops at the first position where a pattern could still
// start with bytes not yet seen. It returns the first position not examined;
// every byte before it is final once flushed.
func (m *Matcher) scan(buf []byte, s, end int, final bool, k *masker, ad *adapt) int {
	// Fast region: every pattern fits.
	if limit := end - m.maxLen; s <= limit {
		if set := m.anchorSet(ad.cur); set != nil {
			hits, checks := m.scanAnchored(set, buf, s, limit, k, &ad.hits)
			ad.observe(m, limit+1-s, float64(hits)*hitNS+float64(checks)*checkNS)
			s = limit + 1
		} else {
			next, steps, verifies := m.scanWuManber(buf, s, limit, k)
			ad.observe(m, limit+1-s, float64(steps)*stepNS+float64(verifies)*verifyNS)
			s = next
		}
	}
	return m.scanTail(buf, s, end, final, k)
}

// scanWuManber examines start positions s..limit (every pattern fits) and
// returns the first position not examined, the number of steps and the
// number of patterns verified.
func (m *Matcher) scanWuManber(buf []byte, s, limit int, k *masker) (next, steps, verifies int) {
	ml, shift := m.minLen, m.shift
	for s <= limit {
		steps++
		blk := uint16(buf[s+ml-2])<<8 | uint16(buf[s+ml-1])
		if sh := shift[blk]; sh != 0 {
			s += int(sh)
			continue
		}
		if m.starts != nil && !m.mayStart(buf[s:]) {
			s++ // no pattern starts with these three bytes
			continue
		}
		for _, pi := range m.cand[blk] {
			verifies++
			p := m.pats[pi]
			if bytes.Equal(buf[s:s+len(p)], p) {
				k.add(buf, s, len(p))
			}
		}
		s++
	}
	return s, steps, verifies
}

// scanTail checks each start position from s on directly. The patterns
// are sorted, so those that agree with the data on their first d bytes are
// one range of pats; each further byte narrows it by binary search, and the
// work per position does not grow with the number of patterns sharing a
// first byte (with many secrets, a hundred or more).
func (m *Matcher) scanTail(buf []byte, s, end int, final bool, k *masker) int {
	for ; s < end; s++ {
		if m.starts != nil && s+3 <= end && !m.mayStart(buf[s:]) {
			continue
		}
		c := buf[s]
		lo, hi := int(m.firstAt[c]), int(m.firstAt[int(c)+1])
		rest := buf[s:end]
		for d := 1; lo < hi; d++ {
			// pats[lo:hi] all start with rest[:d]; one of length d (they
			// are distinct) sorts first and occurs here.
			if len(m.pats[lo]) == d {
				k.add(buf, s, d)
				lo++
				if lo == hi {
					break
				}
			}
			if d == len(rest) {
				// Longer patterns start with all that has arrived.
				if !final {
					return s
				}
				break
			}
			lo, hi = narrow(m.pats, lo, hi, d, rest[d])
		}
	}
	return s
}

// startsMin is the fewest patterns for which New builds Matcher.starts (8
// KiB): below it, scanTail's ranges are a few patterns long anyway.
const startsMin = 64

// startHash maps the first three bytes of b to a bit of Matcher.starts.
func startHash(b []byte) uint32 {
	v := uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
	return v * 2654435761 >> 16
}

// mayStart reports whether a pattern may start with the first three bytes
// of b (false: none does); m.starts must be set.
func (m *Matcher) mayStart(b []byte) bool {
	h := startHash(b)
	return m.starts[h/64]&(1<<(h%64)) != 0
}

// narrow returns the range of pats[lo:hi] (sorted, all longer than d and
// equal on their first d bytes) whose byte d is c.
func narrow(pats [][]byte, lo, hi, d int, c byte) (int, int) {
	// First index with byte d >= c.
	a, b := lo, hi
	for a < b {
		h := int(uint(a+b) >> 1)
		if pats[h][d] < c {
			a = h + 1
		} else {
			b = h
		}
	}
	lo = a
	// First index with byte d > c.
	b = hi
	for a < b {
		h := int(uint(a+b) >> 1)
		if pats[h][d] <= c {
			a = h + 1
		} else {
			b = h
		}
	}
	return lo, a
}

// MaskAll masks every occurrence in b and reports whether any was found.
func (m *Matcher) MaskAll(b []byte) bool {
	if len(b) < m.minLen {
		return false
	}
	// The static choice, as a stream starts with, without a stream's
	// adapt: its strategy callback would move it to the heap, an
	// allocation per header value and small body.
	k := masker{}
	s := 0
	if limit := len(b) - m.maxLen; limit >= 0 {
		if m.anchored && m.anchors != nil {
			var hits [maxAnchorPass]int
			m.scanAnchored(m.anchors, b, 0, limit, &k, &hits)
			s = limit + 1
		} else {
			s, _, _ = m.scanWuManber(b, 0, limit, &k)
		}
	}
	m.scanTail(b, s, len(b), true, &k)
	found := k.end > 0
	k.flush(b, len(b))
	return found
}
