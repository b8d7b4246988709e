package credentials

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
)

// mask is the byte that replaces every byte of a secret occurrence.
const mask = '*'

// scrubBufSize is the streaming buffer size; it grows only to hold four times
// the longest pattern.
const scrubBufSize = 32 << 10

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
	if s != nil {
		s.m.maskAll(out)
	}
	return out
}

// Reader wraps rc so that reads return its bytes with secrets masked. It
// streams: memory is bounded by a fixed buffer, bytes are delivered as soon
// as no secret can start at them (a partial match at the end of what has
// arrived so far is held back until it is resolved), and matches split
// across reads are found. Close closes rc. A nil Scrubber returns rc.
func (s *Scrubber) Reader(rc io.ReadCloser) io.ReadCloser {
	if s == nil || rc == nil {
		return rc
	}
	size := scrubBufSize
	if n := 4 * s.m.maxLen; n > size {
		size = n
	}
	return &scrubReader{m: s.m, rc: rc, buf: make([]byte, size)}
}

// matcher finds all occurrences of a fixed set of patterns. Where every
// pattern fits in the data it uses one of two strategies, whichever its cost
// model says is cheaper for the pattern set: a Wu-Manber scan with two-byte
// blocks (fast for long patterns, whose skips are long), or anchored search
// (each pattern is found through its rarest byte with SIMD bytes.IndexByte;
// fast for short patterns). Near the end of the data it checks each position
// directly.
type matcher struct {
	pats   [][]byte
	minLen int
	maxLen int
	// anchors, when set, selects the anchored strategy.
	anchors []anchor
	// shift[block] is how far the window may move when the two bytes ending
	// the minLen-long window are block.
	shift []uint8
	// cand[block] lists the patterns whose minLen prefix ends with block.
	cand map[uint16][]int32
	// byFirst[c] lists the patterns starting with byte c.
	byFirst [256][]int32
}

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
	m.shift = make([]uint8, 1<<16)
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
	if anchors, cost := chooseAnchors(pats); cost < wuManberCost(m.minLen) {
		m.anchors = anchors
	}
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

// scan examines start positions from s on in buf[:end]. With final set, data
// ends at end; otherwise scanning stops at the first position where a pattern
// could still start with bytes not yet seen. It returns the first position
// not examined; every byte before it is final once flushed.
func (m *matcher) scan(buf []byte, s, end int, final bool, k *masker) int {
	// Fast region: every pattern fits.
	limit := end - m.maxLen
	if m.anchors != nil {
		if s <= limit {
			s = m.scanAnchored(buf, s, limit, k)
		}
		return m.scanTail(buf, s, end, final, k)
	}
	ml := m.minLen
	for s <= limit {
		blk := uint16(buf[s+ml-2])<<8 | uint16(buf[s+ml-1])
		if sh := m.shift[blk]; sh != 0 {
			s += int(sh)
			continue
		}
		for _, pi := range m.cand[blk] {
			p := m.pats[pi]
			if bytes.Equal(buf[s:s+len(p)], p) {
				k.add(buf, s, len(p))
			}
		}
		s++
	}
	return m.scanTail(buf, s, end, final, k)
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
	m.scan(b, 0, len(b), true, &k)
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
	err  error // sticky error from rc, io.EOF included
}

// maxEmptyReads bounds consecutive (0, nil) reads from the wrapped body.
const maxEmptyReads = 100

func (r *scrubReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	empty := 0
	for r.ro == r.done {
		if r.err != nil {
			if r.done < r.end {
				r.release(true)
				continue
			}
			return 0, r.err
		}
		if !r.compact() {
			return 0, errBufferFull
		}
		n, err := r.rc.Read(r.buf[r.end:])
		r.end += n
		if err != nil {
			r.err = err
		}
		if n == 0 && err == nil {
			if empty++; empty >= maxEmptyReads {
				return 0, io.ErrNoProgress
			}
			continue
		}
		r.release(r.err != nil)
	}
	n := copy(p, r.buf[r.ro:r.done])
	r.ro += n
	return n, nil
}

// release scans the unreleased bytes and moves done forward over every
// byte that is final.
func (r *scrubReader) release(final bool) {
	next := r.m.scan(r.buf, r.done, r.end, final, &r.k)
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
