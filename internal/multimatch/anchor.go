package multimatch

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/bits"
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
	// pair is set when nearBytes holds at most maxPairNear bytes, nb1 and
	// nb2 (the same byte when one): the anchor and its neighbour are then
	// searched together with indexPair, which skips the anchor's other
	// occurrences, and a hit is a stop of that search.
	pair     bool
	nb1, nb2 byte
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
	// maxPairNear is the most neighbour bytes an anchor searched as a pair
	// can have (indexPair compares with two).
	maxPairNear = 2
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

// firstOffsets returns, for each byte value, the first offset of it in each
// pattern (-1 where a pattern lacks it), or nil for bytes in no pattern.
func firstOffsets(pats [][]byte) *[256][]int32 {
	var offs [256][]int32
	for pi, p := range pats {
		for j, c := range p {
			if offs[c] == nil {
				offs[c] = make([]int32, len(pats))
				for i := range offs[c] {
					offs[c][i] = -1
				}
			}
			if offs[c][pi] < 0 {
				offs[c][pi] = int32(j)
			}
		}
	}
	return &offs
}

// greedyCover picks anchor bytes covering every pattern by greedy set
// cover, most uncovered patterns per estimated cost first, with freq the
// byte-frequency model; nil when more than maxAnchorPass would be needed.
func greedyCover(pats [][]byte, offs *[256][]int32, freq func(byte) float64) []byte {
	covered := make([]bool, len(pats))
	left := len(pats)
	var order []byte
	for left > 0 {
		if len(order) == maxAnchorPass {
			return nil
		}
		best, bestScore := -1, 0.0
		for c := range 256 {
			n := 0
			for pi, off := range offs[c] {
				if off >= 0 && !covered[pi] {
					n++
				}
			}
			if n == 0 {
				continue
			}
			if score := float64(n) / (passNS + hitNS*freq(byte(c))); score > bestScore {
				best, bestScore = c, score
			}
		}
		for pi, off := range offs[best] {
			if off >= 0 && !covered[pi] {
				covered[pi] = true
				left--
			}
		}
		order = append(order, byte(best))
	}
	return order
}

// buildAnchors makes the anchors for the bytes in order; each pattern is
// checked through the first of them it contains.
func buildAnchors(pats [][]byte, offs *[256][]int32, order []byte) []anchor {
	covered := make([]bool, len(pats))
	anchors := make([]anchor, 0, len(order))
	for _, c := range order {
		a := anchor{c: c, minOff: 1 << 30}
		for pi, off := range offs[c] {
			if off < 0 || covered[pi] {
				continue
			}
			covered[pi] = true
			a.pats = append(a.pats, anchorPat{idx: int32(pi), off: int(off), head: binary.LittleEndian.Uint32(pats[pi])})
			a.minOff = min(a.minOff, int(off))
			a.maxOff = max(a.maxOff, int(off))
		}
		a.setNear(pats)
		anchors = append(anchors, a)
	}
	return anchors
}

// chooseAnchors picks anchor bytes for text by greedy set cover with the
// byteFreq model and returns them with their estimated cost per byte of
// text (ignoring the neighbour filter), or nil when more than maxAnchorPass
// bytes would be needed.
func chooseAnchors(pats [][]byte, offs *[256][]int32) ([]anchor, float64) {
	order := greedyCover(pats, offs, byteFreq)
	if order == nil {
		return nil, math.Inf(1)
	}
	total := baseNS
	for _, c := range order {
		total += passNS + hitNS*byteFreq(c)
	}
	return buildAnchors(pats, offs, order), total
}

// uniformFreq is the byte frequency of random (binary) data.
func uniformFreq(byte) float64 { return 1.0 / 256 }

// anchorCost is the estimated cost per byte of one anchor pass for byte c
// with n patterns and the given neighbour filter, where byte b appears with
// frequency q(b). A pass searched as a pair (at most maxPairNear neighbour
// bytes) stops only where the neighbour matches too.
func anchorCost(c byte, n, near int, nearBytes *[256]bool, q func(byte) float64) float64 {
	pass, k := 1.0, 0
	if near != 0 {
		pass = 0
		for b, ok := range nearBytes {
			if ok {
				pass += q(byte(b))
				k++
			}
		}
	}
	if searchedAsPair(k) {
		return passNS + q(c)*pass*(hitNS+checkNS*float64(n))
	}
	return passNS + q(c)*(hitNS+checkNS*float64(n)*pass)
}

// setCost is the estimated cost per byte of the anchored scan with set.
func setCost(set []anchor, q func(byte) float64) float64 {
	total := baseNS
	for i := range set {
		a := &set[i]
		total += anchorCost(a.c, len(a.pats), a.near, &a.nearBytes, q)
	}
	return total
}

// coverCost is setCost(buildAnchors(pats, offs, order), q) without
// building the anchors.
func coverCost(pats [][]byte, offs *[256][]int32, order []byte, q func(byte) float64) float64 {
	total := baseNS
	for ai, c := range order {
		n, after, before := 0, true, true
		var nearA, nearB [256]bool
	next:
		for pi, off := range offs[c] {
			if off < 0 {
				continue
			}
			for _, e := range order[:ai] {
				if offs[e][pi] >= 0 {
					continue next
				}
			}
			n++
			p := pats[pi]
			if int(off)+1 < len(p) {
				nearA[p[off+1]] = true
			} else {
				after = false
			}
			if off > 0 {
				nearB[p[off-1]] = true
			} else {
				before = false
			}
		}
		switch {
		case after:
			total += anchorCost(c, n, 1, &nearA, q)
		case before:
			total += anchorCost(c, n, -1, &nearB, q)
		default:
			total += anchorCost(c, n, 0, nil, q)
		}
	}
	return total
}

// binarySearchBudget bounds the nodes of the exact cover search, and
// textShare weighs the cost on text when ranking covers for binary data.
const (
	binarySearchBudget = 1 << 13
	textShare          = 0.01
)

// chooseBinaryAnchors picks anchor bytes for data in which every byte value
// is equally likely (binary bodies), where the cost is about the number of
// passes: a minimum set cover, found exactly for up to 64 patterns (within
// a search budget) and greedily beyond. Among covers with the fewest
// passes it prefers fewer pattern checks per hit on random data, and a
// lower cost on text where that saves more than a few checks. It returns
// nil when more than maxAnchorPass bytes would be needed.
func chooseBinaryAnchors(pats [][]byte, offs *[256][]int32) []anchor {
	// Greedy on uniform frequencies, ties broken toward bytes rare in text.
	best := greedyCover(pats, offs, func(c byte) float64 { return 1.0/256 + 1e-9*byteFreq(c) })
	if best == nil {
		return nil
	}
	if len(pats) > 64 {
		return buildAnchors(pats, offs, best)
	}
	// score ranks covers with as many passes: the cost on random data
	// (fewer pattern checks per hit), plus a small share of the cost on
	// text, which decides between covers that differ on random data only
	// by a few checks per 64 KiB.
	score := func(order []byte) float64 {
		return coverCost(pats, offs, order, uniformFreq) + textShare*coverCost(pats, offs, order, byteFreq)
	}
	bestScore := score(best)
	var masks [256]uint64
	for c, o := range offs {
		for pi, off := range o {
			if off >= 0 {
				masks[c] |= 1 << pi
			}
		}
	}
	all := ^uint64(0) >> (64 - len(pats))
	budget := binarySearchBudget
	order := make([]byte, 0, len(best))
	var search func(covered uint64)
	search = func(covered uint64) {
		if budget--; budget < 0 {
			return
		}
		if covered == all {
			if sc := score(order); len(order) < len(best) || sc < bestScore {
				best, bestScore = slices.Clone(order), sc
			}
			return
		}
		if len(order) == len(best) {
			return
		}
		// Every cover holds a byte of the first uncovered pattern.
		p := bits.TrailingZeros64(all &^ covered)
		for c := range 256 {
			if masks[c]>>p&1 != 0 {
				order = append(order, byte(c))
				search(covered | masks[c])
				order = order[:len(order)-1]
			}
		}
	}
	search(0)
	return buildAnchors(pats, offs, best)
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
	var nb []byte
	for _, ap := range a.pats {
		c := pats[ap.idx][ap.off+a.near]
		if !a.nearBytes[c] {
			a.nearBytes[c] = true
			nb = append(nb, c)
		}
	}
	if searchedAsPair(len(nb)) {
		a.pair, a.nb1, a.nb2 = true, nb[0], nb[len(nb)-1]
	}
}

// searchedAsPair reports whether an anchor whose hits are filtered on k
// neighbour bytes (0: none) is searched with indexPair.
func searchedAsPair(k int) bool { return k > 0 && k <= maxPairNear }

// nearCount is how many neighbour bytes a pair anchor matches.
func (a *anchor) nearCount() int {
	if a.nb1 == a.nb2 {
		return 1
	}
	return 2
}

// scanAnchored examines start positions s..limit (every pattern fits) with
// the anchor set set, adds each anchor's hits to hits and returns the number
// of anchor hits and of pattern checks. Occurrences are collected per
// anchor, then recorded in start order as masker requires.
func (m *Matcher) scanAnchored(set []anchor, buf []byte, s, limit int, k *masker, hits *[maxAnchorPass]int) (nhits, checks int) {
	var local [8]occurrence
	found := local[:0]
	for ai := range set {
		a := &set[ai]
		h := 0
		lo, hi := s+a.minOff, limit+a.maxOff // anchor positions to search, inclusive
		for i := lo; i <= hi; i++ {
			// With near 1, i+1 <= limit+maxLen-1 < end; with near -1,
			// i-1 >= s+minOff-1 >= s.
			var j int
			switch {
			case !a.pair:
				j = bytes.IndexByte(buf[i:hi+1], a.c)
			case a.near == 1:
				j = indexPair(buf[i:hi+2], a.c, a.c, a.nb1, a.nb2)
			default: // the pair starts at the neighbour, one before the anchor
				j = indexPair(buf[i-1:hi+1], a.nb1, a.nb2, a.c, a.c)
			}
			if j < 0 {
				break
			}
			i += j
			h++
			if !a.pair && a.near != 0 && !a.nearBytes[buf[i+a.near]] {
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
		hits[ai] += h
		nhits += h
	}
	if len(found) > 1 {
		slices.SortFunc(found, func(x, y occurrence) int { return x.start - y.start })
	}
	for _, o := range found {
		k.add(buf, o.start, o.n)
	}
	return nhits, checks
}

// adaptWindow is how many bytes a stream scans between strategy decisions,
// and adaptMargin how much cheaper another strategy must look.
const (
	adaptWindow = 256 << 10
	adaptMargin = 0.8
)

// Scan strategies: Wu-Manber, and anchored search with the anchors chosen
// for text or for binary data.
const (
	stratWuManber = iota
	stratText
	stratBinary
	numStrats
)

// anchorSet returns the anchors of strategy st (nil for Wu-Manber or a set
// the Matcher lacks).
func (m *Matcher) anchorSet(st int) []anchor {
	switch st {
	case stratText:
		return m.anchors
	case stratBinary:
		return m.bin
	}
	return nil
}

// adapt is one stream's scan strategy. It starts with the Matcher's static
// choice and counts the work each scan does (no clock); after every window
// of scanned bytes it prices that work with the cost model and switches to
// the strategy with the lowest estimate when that is below adaptMargin
// times the current cost. A strategy's estimate is its last observed cost or, until
// it has run, a prediction: for the other anchor set, after a window of
// anchored search, its cost on data with the observed frequencies of the
// running set's anchor bytes and, for other bytes, random data's when those
// frequencies look random, else the text model's; otherwise its lower
// bound (anchored passes without hits; Wu-Manber always shifting fully),
// so a strategy that might be cheaper is tried once. Every scan call uses
// one strategy throughout, so a switch cannot affect what is found.
type adapt struct {
	cur   int                // the strategy in use
	est   [numStrats]float64 // cost per byte of each strategy
	ran   [numStrats]bool    // whether est is an observed cost
	hits  [maxAnchorPass]int // hits per anchor of cur in this window
	bytes int                // bytes scanned in this window
	ns    float64            // their cost, less anchoredBase when anchored
	// choose picks the strategy for the next window given the current
	// one's observed cost; nil means the cheapest estimate (cheapest).
	// Tests set it to force every transition between strategies.
	choose   func(a *adapt, m *Matcher, cur float64) int
	window   int
	switches int
}

func newAdapt(m *Matcher, window int) adapt {
	a := adapt{cur: stratWuManber, est: m.est, window: window}
	if m.anchored {
		a.cur = stratText
	}
	return a
}

// startEstimates returns the estimates a stream starts with (see adapt).
// New computes them once: setCost takes longer than scanning a
// typical header value.
func (m *Matcher) startEstimates() [numStrats]float64 {
	var est [numStrats]float64
	est[stratWuManber] = wuManberCost(m.minLen)
	for _, st := range []int{stratText, stratBinary} {
		est[st] = math.Inf(1)
		if set := m.anchorSet(st); set != nil {
			est[st] = anchoredBase(len(set))
		}
	}
	if m.anchors != nil && m.bin != nil {
		// The text anchors' lower bound gets them tried first; their window
		// then predicts the binary anchors' cost.
		est[stratBinary] = setCost(m.bin, byteFreq)
	}
	return est
}

// observe records n bytes scanned at a cost of ns and decides at the end of
// a window.
func (a *adapt) observe(m *Matcher, n int, ns float64) {
	a.bytes += n
	a.ns += ns
	if a.bytes < a.window {
		return
	}
	cur := a.ns / float64(a.bytes)
	if set := m.anchorSet(a.cur); set != nil {
		cur += anchoredBase(len(set))
		other := stratText + stratBinary - a.cur
		if to := m.anchorSet(other); to != nil && !a.ran[other] {
			a.est[other] = predictCost(to, set, &a.hits, a.bytes)
		}
		a.hits = [maxAnchorPass]int{}
	}
	a.est[a.cur] = cur
	a.ran[a.cur] = true
	choose := a.choose
	if choose == nil {
		choose = (*adapt).cheapest
	}
	if next := choose(a, m, cur); next != a.cur {
		a.cur = next
		a.switches++
	}
	a.bytes, a.ns = 0, 0
}

// cheapest returns the strategy with the lowest estimate when it beats cur
// (the current strategy's observed cost) by adaptMargin, else the current
// one.
func (a *adapt) cheapest(_ *Matcher, cur float64) int {
	best := -1
	for st := range numStrats {
		if st != a.cur && (best < 0 || a.est[st] < a.est[best]) {
			best = st
		}
	}
	if a.est[best] < cur*adaptMargin {
		return best
	}
	return a.cur
}

// predictCost estimates the cost per byte of the anchor set to on data in
// which n bytes scanned with the anchor set from had hits[i] stops of
// from[i]'s search. The byte of an anchor searched alone appears as
// observed; other bytes as in random data when every anchor stopped about
// as often as on random data (n/256 times, or n/256 times the share of its
// neighbour bytes for a pair; within a quarter, plus four standard
// deviations: in text they are far from it, though a body repeating a
// block of random bytes deviates more than random data), else as the text
// model predicts.
func predictCost(to, from []anchor, hits *[maxAnchorPass]int, n int) float64 {
	var obs [256]float64
	var known [256]bool
	uniform := true
	for i := range from {
		a := &from[i]
		h := float64(hits[i])
		e := float64(n) / 256
		if a.pair {
			e *= float64(a.nearCount()) / 256
		} else {
			obs[a.c] = h / float64(n)
			known[a.c] = true
		}
		uniform = uniform && math.Abs(h-e) <= e/4+4*math.Sqrt(e)+1
	}
	return setCost(to, func(c byte) float64 {
		switch {
		case known[c]:
			return obs[c]
		case uniform:
			return 1.0 / 256
		}
		return byteFreq(c)
	})
}
