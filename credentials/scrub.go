package credentials

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
)

// mask is the byte that replaces every byte of a secret occurrence.
const mask = '*'

// scrubBufSize is the streaming buffer's starting size (at least four times
// the longest pattern). It doubles, up to maxScrubBufSize, each time a read
// fills it: a body that arrives faster than it is drained is then read in
// large pieces, which for an HTTP/2 upstream also means fewer
// flow-control updates (Go's client sends one per read of 4 KiB or more).
const (
	scrubBufSize    = 32 << 10
	maxScrubBufSize = 256 << 10
)

// Scrubber masks every form of a set of secrets in response headers and
// bodies. Each secret is matched raw, in base64 (standard and URL alphabets,
// padded and raw) and URL-encoded (query and path escaping); every byte of
// every occurrence (overlapping occurrences included) becomes '*', so lengths
// are preserved and all other bytes pass through unchanged.
//
// A Scrubber is immutable and safe for concurrent use. The nil *Scrubber
// scrubs nothing.
type Scrubber struct {
	m *matcher
}

// NewScrubber builds a Scrubber for secrets. Each secret must pass
// CheckSecret's length rules (at least MinSecretLen bytes); zero Values are
// skipped. With no secrets it returns nil, which scrubs nothing.
func NewScrubber(secrets ...Value) (*Scrubber, error) {
	var pats []string
	for _, v := range secrets {
		s := v.Reveal()
		if s == "" {
			continue
		}
		if len(s) < MinSecretLen || len(s) > MaxSecretLen {
			return nil, fmt.Errorf("building scrubber: a secret is not between %d and %d bytes long", MinSecretLen, MaxSecretLen)
		}
		pats = append(pats, secretForms(s)...)
	}
	if len(pats) == 0 {
		return nil, nil
	}
	return &Scrubber{m: newMatcher(pats)}, nil
}

// String describes the Scrubber without its secrets.
func (s *Scrubber) String() string {
	if s == nil {
		return "credentials.Scrubber(nil)"
	}
	return fmt.Sprintf("credentials.Scrubber(%d patterns %s)", len(s.m.pats), redacted)
}

// GoString is String.
func (s *Scrubber) GoString() string { return s.String() }

// Format prints String for every verb.
func (s *Scrubber) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, s.String()) }

// secretForms returns the encodings of s the scrubber looks for.
func secretForms(s string) []string {
	b := []byte(s)
	return []string{
		s,
		base64.StdEncoding.EncodeToString(b),
		base64.URLEncoding.EncodeToString(b),
		base64.RawStdEncoding.EncodeToString(b),
		base64.RawURLEncoding.EncodeToString(b),
		url.QueryEscape(s),
		url.PathEscape(s),
	}
}

// Header masks secrets in every value of h, in place. Header names are left
// alone.
func (s *Scrubber) Header(h http.Header) {
	if s == nil {
		return
	}
	for _, vs := range h {
		for i, v := range vs {
			if len(v) < s.m.minLen {
				continue
			}
			b := []byte(v)
			if s.m.maskAll(b) {
				vs[i] = string(b)
			}
		}
	}
}

// Bytes returns a copy of b with secrets masked.
func (s *Scrubber) Bytes(b []byte) []byte {
	out := append([]byte(nil), b...)
	s.Mask(out)
	return out
}

// Mask masks secrets in b in place, for a caller that owns b.
func (s *Scrubber) Mask(b []byte) {
	if s != nil {
		s.m.maskAll(b)
	}
}

// Reader wraps rc so that reads return its bytes with secrets masked. It
// streams: memory is bounded (a buffer of 32 KiB that grows to 256 KiB only
// while reads keep filling it), bytes are delivered as soon
// as no secret can start at them (a partial match at the end of what has
// arrived so far is held back until it is resolved), and matches split
// across reads are found. The reader also implements io.WriterTo, which
// io.Copy uses to write from its buffer without a copy. Close closes rc. A
// nil Scrubber returns rc.
func (s *Scrubber) Reader(rc io.ReadCloser) io.ReadCloser {
	if s == nil || rc == nil {
		return rc
	}
	size := scrubBufSize
	if n := 4 * s.m.maxLen; n > size {
		size = n
	}
	return &scrubReader{m: s.m, rc: rc, buf: make([]byte, size), ad: newAdapt(s.m, adaptWindow)}
}

// matcher finds all occurrences of a fixed set of patterns. Where every
// pattern fits in the data it uses one of two strategies: anchored search
// (each pattern is found through one of a few rare bytes with SIMD
// bytes.IndexByte, and a hit is checked against a neighbouring byte and the
// patterns' first four bytes), or a Wu-Manber scan with two-byte blocks,
// whose cost depends on how far it can skip, not on byte frequencies. The
// cost model in anchor.go picks one statically; a stream then switches as it
// observes the actual costs (see adapt), also to a second anchor set chosen
// for binary data, where every byte value is equally likely. Near the end of
// the data it checks each position directly.
type matcher struct {
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
	// byFirst[c] lists the patterns starting with byte c.
	byFirst [256][]int32
	// est is what newAdapt starts a stream's estimates with.
	est [numStrats]float64
}

// newMatcher builds a matcher for the non-empty forms, each at least four
// bytes long (MinSecretLen; the anchored check loads four bytes).
func newMatcher(forms []string) *matcher {
	seen := map[string]bool{}
	var pats [][]byte
	for _, f := range forms {
		if f != "" && !seen[f] {
			seen[f] = true
			pats = append(pats, []byte(f))
		}
	}
	sort.Slice(pats, func(i, j int) bool { return bytes.Compare(pats[i], pats[j]) < 0 })
	m := &matcher{pats: pats, minLen: len(pats[0]), cand: map[uint16][]int32{}}
	for _, p := range pats {
		m.minLen = min(m.minLen, len(p))
		m.maxLen = max(m.maxLen, len(p))
	}
	def := min(m.minLen-1, 255)
	m.shift = new([1 << 16]uint8)
	for i := range m.shift {
		m.shift[i] = uint8(def)
	}
	for pi, p := range pats {
		m.byFirst[p[0]] = append(m.byFirst[p[0]], int32(pi))
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
		buf[i] = mask
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
func (m *matcher) scan(buf []byte, s, end int, final bool, k *masker, ad *adapt) int {
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
func (m *matcher) scanWuManber(buf []byte, s, limit int, k *masker) (next, steps, verifies int) {
	ml, shift := m.minLen, m.shift
	for s <= limit {
		steps++
		blk := uint16(buf[s+ml-2])<<8 | uint16(buf[s+ml-1])
		if sh := shift[blk]; sh != 0 {
			s += int(sh)
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

// scanTail checks each start position from s on directly.
func (m *matcher) scanTail(buf []byte, s, end int, final bool, k *masker) int {
	for ; s < end; s++ {
		partial := false
		for _, pi := range m.byFirst[buf[s]] {
			p := m.pats[pi]
			rest := buf[s:end]
			if len(p) <= len(rest) {
				if bytes.Equal(rest[:len(p)], p) {
					k.add(buf, s, len(p))
				}
			} else if !final && bytes.HasPrefix(p, rest) {
				partial = true
			}
		}
		if partial {
			return s
		}
	}
	return s
}

// maskAll masks every occurrence in b and reports whether any was found.
func (m *matcher) maskAll(b []byte) bool {
	if len(b) < m.minLen {
		return false
	}
	k := masker{}
	ad := newAdapt(m, math.MaxInt)
	m.scan(b, 0, len(b), true, &k, &ad)
	found := k.end > 0
	k.flush(b, len(b))
	return found
}

// scrubReader is the streaming state of Scrubber.Reader.
//
// buf[ro:done] is masked output not yet returned; buf[done:end] has been
// read but not yet released (a possible secret prefix, at most maxLen-1
// bytes, plus bytes masker has not flushed).
type scrubReader struct {
	m    *matcher
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

func (r *scrubReader) Read(p []byte) (int, error) {
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
func (r *scrubReader) WriteTo(w io.Writer) (int64, error) {
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
func (r *scrubReader) fill() error {
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
		r.grow = n == free && len(r.buf) < maxScrubBufSize
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
func (r *scrubReader) release(final bool) {
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
func (r *scrubReader) compact() bool {
	if r.grow {
		r.grow = false
		nb := make([]byte, min(2*len(r.buf), maxScrubBufSize))
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

func (r *scrubReader) Close() error { return r.rc.Close() }
