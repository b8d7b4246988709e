package credentials

import (
	"bytes"
	"slices"
)

// anchor is one byte value searched with bytes.IndexByte; each pattern in
// pats is verified at the position the anchor implies.
type anchor struct {
	c    byte
	pats []anchorPat
	// minOff and maxOff bound the anchor offsets of pats.
	minOff, maxOff int
}

type anchorPat struct {
	idx int32
	off int // offset of the anchor byte in the pattern
}

// occurrence is a match found by the anchored scan, before ordering.
type occurrence struct{ start, n int }

// Cost model, in nanoseconds per scanned byte, measured on the benchmark
// machine: a Wu-Manber step costs about 5ns (a dependent load chain) and
// advances up to minLen-1 bytes; an IndexByte pass costs about 0.06ns per
// byte plus about 10ns per occurrence of its byte.
const (
	wmStepNS      = 5.0
	passNS        = 0.06
	occurrenceNS  = 10.0
	maxAnchorPass = 16
)

func wuManberCost(minLen int) float64 {
	return wmStepNS / float64(min(minLen-1, 255))
}

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
// estimated cost per byte.
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
	total := 0.0
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
			if score := float64(n) / (passNS + occurrenceNS*byteFreq(byte(c))); score > bestScore {
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
			a.pats = append(a.pats, anchorPat{idx: pi, off: off})
			a.minOff = min(a.minOff, off)
			a.maxOff = max(a.maxOff, off)
		}
		slices.SortFunc(a.pats, func(x, y anchorPat) int { return int(x.idx - y.idx) })
		anchors = append(anchors, a)
		total += passNS + occurrenceNS*byteFreq(byte(best))
		if len(anchors) > maxAnchorPass {
			return nil, 1e9
		}
	}
	return anchors, total
}

// scanAnchored examines start positions s..limit (every pattern fits) and
// returns limit+1. Occurrences are collected per anchor, then recorded in
// start order as masker requires.
func (m *matcher) scanAnchored(buf []byte, s, limit int, k *masker) int {
	var local [8]occurrence
	found := local[:0]
	for ai := range m.anchors {
		a := &m.anchors[ai]
		lo, hi := s+a.minOff, limit+a.maxOff // anchor positions to search, inclusive
		for i := lo; i <= hi; {
			j := bytes.IndexByte(buf[i:hi+1], a.c)
			if j < 0 {
				break
			}
			i += j
			for _, ap := range a.pats {
				st := i - ap.off
				if st < s || st > limit {
					continue
				}
				p := m.pats[ap.idx]
				if bytes.Equal(buf[st:st+len(p)], p) {
					found = append(found, occurrence{st, len(p)})
				}
			}
			i++
		}
	}
	if len(found) > 1 {
		slices.SortFunc(found, func(x, y occurrence) int { return x.start - y.start })
	}
	for _, o := range found {
		k.add(buf, o.start, o.n)
	}
	return limit + 1
}
