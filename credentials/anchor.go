package credentials

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
)

// anchor is one byte value searched with bytes.IndexByte; each pattern in
// pats is verified at the position the anchor implies.
type anchor struct {
	c    byte
	pats []anchorPat
	// minOff and maxOff bound the anchor offsets of pats.
	minOff, maxOff int
	// near is 1 when every pattern has a byte after its anchor, else -1 when
	// every one has a byte before it, else 0; nearBytes holds those bytes,
	// and a hit with another byte there is skipped.
	near      int
	nearBytes [256]bool
}

type anchorPat struct {
	idx  int32
	off  int    // offset of the anchor byte in the pattern
	head uint32 // the pattern's first four bytes, little-endian
}

// occurrence is a match found by the anchored scan, before ordering.
type occurrence struct{ start, n int }

// Cost model, in nanoseconds, fitted to measurements on the benchmark
// machine. An anchored scan costs baseNS per byte, plus passNS per byte for
// each anchor, hitNS per occurrence of an anchor byte and checkNS per pattern
// checked at an occurrence that passes the neighbour filter. A Wu-Manber step
// (a dependent load chain) costs stepNS and advances at most
// min(minLen-1, 255) bytes; verifying a candidate costs verifyNS.
const (
	baseNS        = 0.03
	passNS        = 0.02
	hitNS         = 7.0
	checkNS       = 5.0
	stepNS        = 7.0
	verifyNS      = 6.0
	maxAnchorPass = 16
)

// wuManberCost is the Wu-Manber cost per byte when every step shifts as far
// as it can; data full of the patterns' blocks makes shifts shorter.
func wuManberCost(minLen int) float64 {
	return stepNS / float64(min(minLen-1, 255))
}

// anchoredBase is the cost per byte of n anchor passes without hits.
func anchoredBase(n int) float64 { return baseNS + float64(n)*passNS }

// byteFreq estimates how often c appears in typical response bodies (JSON,
// HTML, text), never below the 1/256 of random data.
func byteFreq(c byte) float64 {
	f := 0.0005
	switch {
	case c == ' ':
		f = 0.12
	case c >= 'a' && c <= 'z':
		f = 0.04
		if bytes.IndexByte([]byte("etaoinsrhl"), c) >= 0 {
			f = 0.07
		}
	case c == '"':
		f = 0.05
	case c >= '0' && c <= '9':
		f = 0.02
	case bytes.IndexByte([]byte(",:.\n{}_-/<>="), c) >= 0:
		f = 0.02
	case c >= 'A' && c <= 'Z':
		f = 0.006
	case c == '\t' || c == '\r' || c == '[' || c == ']' || c == '\\':
		f = 0.005
	}
	return max(f, 1.0/256)
}

// chooseAnchors picks anchor bytes covering every pattern by greedy set
// cover (most patterns per cost first) and returns them with their
// estimated cost per byte of text (ignoring the neighbour filter), or nil when
// more than maxAnchorPass bytes would be needed.
func chooseAnchors(pats [][]byte) ([]anchor, float64) {
	// For each byte value, the first offset of it in each pattern.
	var offs [256]map[int32]int
	for pi, p := range pats {
		for j, c := range p {
			if offs[c] == nil {
				offs[c] = map[int32]int{}
			}
			if _, ok := offs[c][int32(pi)]; !ok {
				offs[c][int32(pi)] = j
			}
		}
	}
	covered := make([]bool, len(pats))
	left := len(pats)
	var anchors []anchor
	total := baseNS
	for left > 0 {
		best, bestScore := -1, 0.0
		for c := range 256 {
			n := 0
			for pi := range offs[c] {
				if !covered[pi] {
					n++
				}
			}
			if n == 0 {
				continue
			}
			if score := float64(n) / (passNS + hitNS*byteFreq(byte(c))); score > bestScore {
				best, bestScore = c, score
			}
		}
		a := anchor{c: byte(best), minOff: 1 << 30}
		for pi, off := range offs[best] {
			if covered[pi] {
				continue
			}
			covered[pi] = true
			left--
			p := pats[pi]
			a.pats = append(a.pats, anchorPat{idx: pi, off: off, head: binary.LittleEndian.Uint32(p)})
			a.minOff = min(a.minOff, off)
			a.maxOff = max(a.maxOff, off)
		}
		slices.SortFunc(a.pats, func(x, y anchorPat) int { return int(x.idx - y.idx) })
		a.setNear(pats)
		anchors = append(anchors, a)
		total += passNS + hitNS*byteFreq(byte(best))
		if len(anchors) > maxAnchorPass {
			return nil, math.Inf(1)
		}
	}
	return anchors, total
}

// setNear chooses the neighbour of the anchor byte that a hit is filtered
// on.
func (a *anchor) setNear(pats [][]byte) {
	after, before := true, true
	for _, ap := range a.pats {
		after = after && ap.off+1 < len(pats[ap.idx])
		before = before && ap.off > 0
	}
	switch {
	case after:
		a.near = 1
	case before:
		a.near = -1
	default:
		return
	}
	for _, ap := range a.pats {
		a.nearBytes[pats[ap.idx][ap.off+a.near]] = true
	}
}

// scanAnchored examines start positions s..limit (every pattern fits) and
// returns the number of anchor hits and of pattern checks. Occurrences are
// collected per anchor, then recorded in start order as masker requires.
func (m *matcher) scanAnchored(buf []byte, s, limit int, k *masker) (hits, checks int) {
	var local [8]occurrence
	found := local[:0]
	for ai := range m.anchors {
		a := &m.anchors[ai]
		lo, hi := s+a.minOff, limit+a.maxOff // anchor positions to search, inclusive
		for i := lo; i <= hi; i++ {
			j := bytes.IndexByte(buf[i:hi+1], a.c)
			if j < 0 {
				break
			}
			i += j
			hits++
			// With near 1, i+1 <= limit+maxLen-1 < end; with near -1,
			// i-1 >= s+minOff-1 >= s.
			if a.near != 0 && !a.nearBytes[buf[i+a.near]] {
				continue
			}
			checks += len(a.pats)
			for _, ap := range a.pats {
				st := i - ap.off
				if st < s || st > limit || binary.LittleEndian.Uint32(buf[st:]) != ap.head {
					continue
				}
				p := m.pats[ap.idx]
				if bytes.Equal(buf[st:st+len(p)], p) {
					found = append(found, occurrence{st, len(p)})
				}
			}
		}
	}
	if len(found) > 1 {
		slices.SortFunc(found, func(x, y occurrence) int { return x.start - y.start })
	}
	for _, o := range found {
		k.add(buf, o.start, o.n)
	}
	return hits, checks
}

// adaptWindow is how many bytes a stream scans between strategy decisions,
// and adaptMargin how much cheaper the other strategy must look.
const (
	adaptWindow = 256 << 10
	adaptMargin = 0.8
)

// adapt is one stream's scan strategy. It starts with the matcher's static
// choice and counts the work each scan does (no clock); after every window
// of scanned bytes it prices that work with the cost model and switches when
// the other strategy's estimate is below margin times that cost. A
// strategy's estimate is its last observed cost or, until it has run, its
// lower bound (anchored passes without hits; Wu-Manber always shifting
// fully), so a strategy that might be cheaper is tried once. Every scan call
// uses one strategy throughout, so a switch cannot affect what is found.
type adapt struct {
	anchored bool
	est      [2]float64 // cost per byte: [0] Wu-Manber, [1] anchored
	bytes    int        // bytes scanned in this window
	ns       float64    // their cost, less anchoredBase when anchored
	window   int
	margin   float64
	switches int
}

func newAdapt(m *matcher, window int) adapt {
	a := adapt{anchored: m.anchored, window: window, margin: adaptMargin}
	a.est[0] = wuManberCost(m.minLen)
	a.est[1] = math.Inf(1)
	if m.anchors != nil {
		a.est[1] = anchoredBase(len(m.anchors))
	}
	return a
}

// observe records n bytes scanned at a cost of ns and decides at the end of
// a window.
func (a *adapt) observe(m *matcher, n int, ns float64) {
	a.bytes += n
	a.ns += ns
	if a.bytes < a.window {
		return
	}
	cur := a.ns / float64(a.bytes)
	i := 0
	if a.anchored {
		i = 1
		cur += anchoredBase(len(m.anchors))
	}
	a.est[i] = cur
	if a.est[1-i] < cur*a.margin {
		a.anchored = !a.anchored
		a.switches++
	}
	a.bytes, a.ns = 0, 0
}
