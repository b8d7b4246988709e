package multimatch

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// reference masks, in the original input, every byte covered by any
// occurrence (overlaps included) of any form of any secret, using
// bytes.Index on the untouched input.
func reference(in []byte, secrets ...string) []byte {
	out := bytes.Clone(in)
	for _, s := range secrets {
		for _, f := range testkit.SecretForms(s) {
			p := []byte(f)
			for i := 0; i <= len(in); {
				j := bytes.Index(in[i:], p)
				if j < 0 {
					break
				}
				copy(out[i+j:], bytes.Repeat([]byte{'*'}, len(p)))
				i += j + 1
			}
		}
	}
	return out
}

// mustScrubber builds the Matcher credentials.NewScrubber would for
// secrets: every encoding testForms lists.
func mustScrubber(t testing.TB, secrets ...string) *Matcher {
	t.Helper()
	var pats []string
	for _, s := range secrets {
		if len(s) < minPatternLen {
			t.Fatalf("secret %q is shorter than %d bytes", s, minPatternLen)
		}
		pats = append(pats, testkit.SecretForms(s)...)
	}
	m := New(pats)
	if m == nil {
		t.Fatal("New returned nil for non-empty patterns")
	}
	return m
}

// minPatternLen is the shortest pattern New takes (credentials.MinSecretLen).
const minPatternLen = 4

// maskedCopy returns a copy of b with every occurrence masked.
func maskedCopy(m *Matcher, b []byte) []byte {
	out := bytes.Clone(b)
	m.MaskAll(out)
	return out
}

// variant is a Matcher whose readers start with one scan strategy,
// optionally moving to the next strategy after every scan.
type variant struct {
	name      string
	sc        *Matcher
	start     int
	alternate bool
}

// reader wraps rc as v.sc.Reader does, starting with v.start and rotating
// strategies if asked.
func (v variant) reader(rc io.ReadCloser) *reader {
	r := v.sc.Reader(rc).(*reader)
	r.ad.cur = v.start
	if v.alternate {
		r.ad.window, r.ad.choose = 1, rotating()
	}
	return r
}

// rotating returns an adapt.choose that moves to the next available
// strategy of a rotation passing once from each strategy to each other one,
// after every window.
func rotating() func(a *adapt, m *Matcher, cur float64) int {
	rotation := [...]int{stratWuManber, stratText, stratBinary, stratWuManber, stratBinary, stratText}
	step := 0
	return func(a *adapt, m *Matcher, _ float64) int {
		for range rotation {
			step = (step + 1) % len(rotation)
			if st := rotation[step]; st != a.cur && (st == stratWuManber || m.anchorSet(st) != nil) {
				return st
			}
		}
		return a.cur
	}
}

// strategies returns sc with readers starting with each scan strategy, and
// rotating through them, so the property tests cover every strategy and
// switches between them whatever the cost model picks. Bytes uses the
// static choice, forced to each of Wu-Manber and the text anchors.
func strategies(t testing.TB, sc *Matcher) []variant {
	t.Helper()
	wm, an := *sc, *sc
	wm.anchored, an.anchored = false, true
	out := []variant{{name: "wu-manber", sc: &wm, start: stratWuManber}}
	if an.anchors != nil {
		out = append(out, variant{name: "anchored", sc: &an, start: stratText})
	}
	if sc.bin != nil {
		out = append(out, variant{name: "binary", sc: sc, start: stratBinary})
	}
	if an.anchors != nil || sc.bin != nil {
		out = append(out, variant{name: "alternating", sc: &wm, start: stratWuManber, alternate: true})
	}
	return out
}

// chunkReader returns data in chunks of random size, sometimes with io.EOF
// on the last chunk.
type chunkReader struct {
	data   []byte
	rng    *rand.Rand
	max    int
	closed bool
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(1+c.rng.Intn(c.max), len(p), len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	if len(c.data) == 0 && c.rng.Intn(2) == 0 {
		return n, io.EOF
	}
	return n, nil
}

func (c *chunkReader) Close() error { c.closed = true; return nil }

// readAllRandom reads r with random buffer sizes.
func readAllRandom(t testing.TB, r io.Reader, rng *rand.Rand) []byte {
	t.Helper()
	var out []byte
	for i := 0; ; i++ {
		if i > 1<<22 {
			t.Fatal("reader made no progress")
		}
		p := make([]byte, 1+rng.Intn(97))
		n, err := r.Read(p)
		out = append(out, p[:n]...)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
	}
}

// genInput builds random text with forms of the secrets spliced in, some of
// them truncated (near misses) and some overlapping.
func genInput(rng *rand.Rand, secrets []string, n int) []byte {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/=_-%{}\": \n"
	var b []byte
	for len(b) < n {
		switch rng.Intn(6) {
		case 0, 1:
			s := secrets[rng.Intn(len(secrets))]
			forms := testkit.SecretForms(s)
			f := forms[rng.Intn(len(forms))]
			if rng.Intn(3) == 0 {
				f = f[:rng.Intn(len(f))] // near miss
			}
			if rng.Intn(4) == 0 && len(b) > 3 {
				b = b[:len(b)-rng.Intn(4)] // overlap the previous bytes
			}
			b = append(b, f...)
		default:
			k := rng.Intn(40)
			for range k {
				b = append(b, alphabet[rng.Intn(len(alphabet))])
			}
		}
	}
	return b
}

func TestReaderMatchesReference(t *testing.T) {
	secretSets := [][]string{
		{"tok_9f8e7d6c5b4a"},
		{"abcd"},
		{"aaaa"},      // self-overlapping
		{"a/b+c?d=e"}, // every encoding differs
		{"ghp_0123456789abcdefghijABCDEFGHIJ012345", "Bearer ghp_0123456789abcdefghijABCDEFGHIJ012345"},
		{"s3cr3t-pass", "alice:s3cr3t-pass", "Basic YWxpY2U6czNjcjN0LXBhc3M="},
		{"x y z"},
		{benchSecret, "Bearer " + benchSecret},
		{"k3y!"},
	}
	switches, binary := 0, 0
	for si, secrets := range secretSets {
		for _, v := range strategies(t, mustScrubber(t, secrets...)) {
			if v.start == stratBinary {
				binary++
			}
			t.Run(fmt.Sprintf("%d/%s", si, v.name), func(t *testing.T) {
				n := checkReference(t, v, si, secrets)
				if v.alternate {
					switches += n
				}
			})
		}
	}
	if switches < 1000 {
		t.Errorf("alternating readers switched strategy %d times, want many", switches)
	}
	if binary < 3 {
		t.Errorf("%d secret sets have binary anchors, want at least 3", binary)
	}
}

// checkReference compares Read, WriteTo and Bytes with reference on random
// inputs and returns how often the readers switched strategy.
func checkReference(t *testing.T, v variant, si int, secrets []string) (switches int) {
	for trial := range 60 {
		seed := int64(si*1000 + trial)
		rng := rand.New(rand.NewSource(seed))
		in := genInput(rng, secrets, rng.Intn(3000))
		want := reference(in, secrets...)
		cr := &chunkReader{data: bytes.Clone(in), rng: rng, max: 1 + rng.Intn(200)}
		rc := v.reader(cr)
		got := readAllRandom(t, rc, rng)
		if !bytes.Equal(got, want) {
			t.Fatalf("secrets %d seed %d: scrubbed output differs from reference\n got %q\nwant %q", si, seed, got, want)
		}
		if err := rc.Close(); err != nil || !cr.closed {
			t.Fatalf("Close: err %v, underlying closed %v", err, cr.closed)
		}
		switches += rc.ad.switches

		rc = v.reader(&chunkReader{data: bytes.Clone(in), rng: rng, max: 1 + rng.Intn(200)})
		var out bytes.Buffer
		if n, err := rc.WriteTo(&out); err != nil || n != int64(len(in)) || !bytes.Equal(out.Bytes(), want) {
			t.Fatalf("secrets %d seed %d: WriteTo = %d, %v; output equal to reference: %v", si, seed, n, err, bytes.Equal(out.Bytes(), want))
		}
		switches += rc.ad.switches

		orig := append([]byte(nil), in...)
		if got := maskedCopy(v.sc, in); !bytes.Equal(got, want) || !bytes.Equal(in, orig) {
			t.Fatalf("secrets %d seed %d: Bytes differs from reference or changed its input", si, seed)
		}
		if v.sc.MaskAll(orig); !bytes.Equal(orig, want) {
			t.Fatalf("secrets %d seed %d: Mask differs from reference", si, seed)
		}
	}
	return switches
}

// TestReaderEqualsReplaceAll checks the streaming output against a
// plain bytes.ReplaceAll chain where occurrences do not overlap.
func TestReaderEqualsReplaceAll(t *testing.T) {
	secret := "tok_Zq81/xK+9w=="
	forms := testkit.SecretForms(secret)
	rng := rand.New(rand.NewSource(7))
	var in []byte
	for range 500 {
		in = append(in, strings.Repeat(" ", rng.Intn(30))...)
		in = append(in, `{"k":"`...)
		in = append(in, forms[rng.Intn(len(forms))]...)
		in = append(in, "\"}\n"...)
	}
	want := bytes.Clone(in)
	// Longest first, so a form that contains another is replaced whole.
	sorted := append([]string(nil), forms...)
	for i := range sorted {
		for j := i + 1; j < len(sorted); j++ {
			if len(sorted[j]) > len(sorted[i]) {
				sorted[i], sorted[j] = sorted[j], sorted[i]
			}
		}
	}
	for _, f := range sorted {
		want = bytes.ReplaceAll(want, []byte(f), bytes.Repeat([]byte{'*'}, len(f)))
	}
	for _, v := range strategies(t, mustScrubber(t, secret)) {
		for _, max := range []int{1, 2, 3, 7, 64, 4096} {
			got := readAllRandom(t, v.reader(&chunkReader{data: bytes.Clone(in), rng: rng, max: max}), rng)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s, max chunk %d: output differs from bytes.ReplaceAll", v.name, max)
			}
		}
	}
}

// TestReaderEverySplit splits one occurrence at every offset.
func TestReaderEverySplit(t *testing.T) {
	secret := "sk_live_51HabcdefXYZ"
	for _, form := range testkit.SecretForms(secret) {
		in := []byte("before " + form + " after")
		want := []byte("before " + strings.Repeat("*", len(form)) + " after")
		for split := 0; split <= len(in); split++ {
			for _, v := range strategies(t, mustScrubber(t, secret)) {
				src := func() io.ReadCloser {
					return io.NopCloser(io.MultiReader(bytes.NewReader(in[:split]), bytes.NewReader(in[split:])))
				}
				got, err := io.ReadAll(v.reader(src()))
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("%s: form %q split %d: got %q, %v; want %q", v.name, form, split, got, err, want)
				}
				var out bytes.Buffer
				if _, err := v.reader(src()).WriteTo(&out); err != nil || !bytes.Equal(out.Bytes(), want) {
					t.Fatalf("%s: form %q split %d: WriteTo wrote %q, %v; want %q", v.name, form, split, out.Bytes(), err, want)
				}
			}
		}
	}
}

// TestReaderStreamsWithoutWaiting shows bytes that cannot start a
// secret are delivered at once (SSE keeps working), by Read and by WriteTo,
// while a partial match is held until resolved.
func TestReaderStreamsWithoutWaiting(t *testing.T) {
	for _, useWriteTo := range []bool{false, true} {
		t.Run(fmt.Sprintf("WriteTo=%v", useWriteTo), func(t *testing.T) { checkStreams(t, useWriteTo) })
	}
}

// chanWriter sends a copy of every write on c.
type chanWriter chan string

func (c chanWriter) Write(p []byte) (int, error) { c <- string(p); return len(p), nil }

func checkStreams(t *testing.T, useWriteTo bool) {
	secret := "tok_abcdefgh1234"
	pr, pw := io.Pipe()
	rc := mustScrubber(t, secret).Reader(pr)
	defer rc.Close()

	got := make(chan string, 10)
	copied := make(chan error, 1)
	if useWriteTo {
		go func() {
			n, err := rc.(io.WriterTo).WriteTo(chanWriter(got))
			if err == nil && n != int64(len("data: hello\n\ndata: "+secret+"\n\ndata: tok_x\n")) {
				err = fmt.Errorf("WriteTo returned %d", n)
			}
			copied <- err
		}()
	}
	readNow := func(want string) {
		t.Helper()
		if !useWriteTo {
			go func() {
				buf := make([]byte, 1024)
				n, err := rc.Read(buf)
				if err != nil {
					got <- "error: " + err.Error()
					return
				}
				got <- string(buf[:n])
			}()
		}
		select {
		case g := <-got:
			if g != want {
				t.Fatalf("got %q, want %q", g, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("blocked, want %q", want)
		}
	}
	write := func(s string) {
		go func() { _, _ = pw.Write([]byte(s)) }()
	}

	write("data: hello\n\n")
	readNow("data: hello\n\n")
	write("data: " + secret[:6])
	readNow("data: ") // "tok_ab" could start the secret: held back
	write(secret[6:] + "\n\n")
	readNow(strings.Repeat("*", len(secret)) + "\n\n")
	write("data: tok_x\n")
	readNow("data: tok_x\n") // near miss resolved by the next bytes
	pw.Close()
	if useWriteTo {
		if err := <-copied; err != nil {
			t.Fatalf("WriteTo: %v", err)
		}
		if len(got) != 0 {
			t.Fatalf("WriteTo wrote %q after the body ended", <-got)
		}
	}
	if n, err := rc.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Fatalf("Read at end = %d, %v; want 0, EOF", n, err)
	}
}

// segmentWriter records each write.
type segmentWriter struct{ segs []string }

func (w *segmentWriter) Write(p []byte) (int, error) {
	w.segs = append(w.segs, string(p))
	return len(p), nil
}

// TestReaderWriteToMatchesRead checks WriteTo writes exactly the
// segments that Read with a large buffer returns, for the same arrivals:
// it neither waits longer nor releases more than Read.
func TestReaderWriteToMatchesRead(t *testing.T) {
	secrets := []string{"s3cr3t-pass", "alice:s3cr3t-pass"}
	for _, v := range strategies(t, mustScrubber(t, secrets...)) {
		for seed := range int64(40) {
			in := genInput(rand.New(rand.NewSource(seed)), secrets, 5000)
			src := func() io.ReadCloser {
				rng := rand.New(rand.NewSource(seed))
				return &chunkReader{data: bytes.Clone(in), rng: rng, max: 1 + rng.Intn(300)}
			}
			var reads []string
			rc := v.reader(src())
			p := make([]byte, 2*len(rc.buf))
			for {
				n, err := rc.Read(p)
				if n > 0 {
					reads = append(reads, string(p[:n]))
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			var w segmentWriter
			if _, err := v.reader(src()).WriteTo(&w); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(w.segs) != fmt.Sprint(reads) {
				t.Fatalf("%s seed %d: WriteTo wrote %d segments, Read returned %d\nwrites %q\nreads  %q", v.name, seed, len(w.segs), len(reads), w.segs, reads)
			}
			if strings.Join(reads, "") != string(reference(in, secrets...)) {
				t.Fatalf("%s seed %d: output differs from reference", v.name, seed)
			}
		}
	}
}

// failWriter accepts ok bytes in total, then returns n and err from Write.
type failWriter struct {
	ok   int
	n    func(len int) int
	err  error
	seen []byte
}

func (w *failWriter) Write(p []byte) (int, error) {
	if len(p) <= w.ok {
		w.ok -= len(p)
		w.seen = append(w.seen, p...)
		return len(p), nil
	}
	n := w.n(len(p))
	if n > 0 && n <= len(p) {
		w.seen = append(w.seen, p[:n]...)
	}
	return n, w.err
}

func TestReaderWriteToErrors(t *testing.T) {
	secret := "secret-value"
	sc := mustScrubber(t, secret)
	body := strings.Repeat("partial secret-value body ", 4000)
	want := strings.ReplaceAll(body, secret, strings.Repeat("*", len(secret)))
	boom := errors.New("downstream reset")
	newReader := func(tail io.Reader) io.ReadCloser {
		return sc.Reader(io.NopCloser(io.MultiReader(&chunkReader{data: []byte(body), rng: rand.New(rand.NewSource(1)), max: 1000}, tail)))
	}

	// The body's error is returned after everything before it is written.
	var out bytes.Buffer
	n, err := newReader(&errReader{errors.New("upstream reset")}).(io.WriterTo).WriteTo(&out)
	if err == nil || err.Error() != "upstream reset" || n != int64(len(body)) || out.String() != want {
		t.Fatalf("WriteTo with failing body = %d, %v; output correct: %v", n, err, out.String() == want)
	}

	for _, tc := range []struct {
		name    string
		n       func(int) int
		werr    error
		wantErr error
	}{
		{"write error", func(l int) int { return l / 2 }, boom, boom},
		{"short write", func(l int) int { return l / 2 }, nil, io.ErrShortWrite},
		{"negative count", func(int) int { return -1 }, nil, errInvalidWrite},
		{"count beyond slice", func(l int) int { return l + 1 }, nil, errInvalidWrite},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := newReader(strings.NewReader(""))
			// Writes within the first 5000 bytes succeed; the next one
			// returns the result under test.
			w := &failWriter{ok: 5000, n: tc.n, err: tc.werr}
			n, err := rc.(io.WriterTo).WriteTo(w)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("WriteTo error = %v, want %v", err, tc.wantErr)
			}
			if n != int64(len(w.seen)) {
				t.Fatalf("WriteTo = %d, writer accepted %d bytes", n, len(w.seen))
			}
			// Reading resumes after the bytes the writer accepted.
			rest, err := io.ReadAll(rc)
			if err != nil || string(w.seen)+string(rest) != want {
				t.Fatalf("reading after WriteTo: %v; output correct: %v", err, string(w.seen)+string(rest) == want)
			}
		})
	}

	// Read part of the stream, then WriteTo the rest.
	rc := newReader(strings.NewReader(""))
	head := make([]byte, 777)
	if _, err := io.ReadFull(rc, head); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if n, err := rc.(io.WriterTo).WriteTo(&out); err != nil || n != int64(len(body)-len(head)) || string(head)+out.String() != want {
		t.Fatalf("WriteTo after Read = %d, %v", n, err)
	}
	if n, err := rc.(io.WriterTo).WriteTo(&out); n != 0 || err != nil {
		t.Fatalf("WriteTo at end = %d, %v; want 0, nil", n, err)
	}
	if n, err := rc.Read(head); n != 0 || err != io.EOF {
		t.Fatalf("Read after WriteTo = %d, %v; want 0, EOF", n, err)
	}
}

func TestReaderPassesErrors(t *testing.T) {
	boom := errors.New("upstream reset")
	rc := mustScrubber(t, "secret-value").Reader(io.NopCloser(io.MultiReader(strings.NewReader("partial secret-value body"), &errReader{boom})))
	got, err := io.ReadAll(rc)
	if !errors.Is(err, boom) {
		t.Fatalf("ReadAll error = %v, want %v", err, boom)
	}
	if string(got) != "partial ************ body" {
		t.Fatalf("ReadAll = %q", got)
	}
}

type errReader struct{ err error }

func (e *errReader) Read([]byte) (int, error) { return 0, e.err }

// fixedReader returns data in reads of chunk bytes and counts what it has
// delivered.
type fixedReader struct {
	data  []byte
	chunk int
	off   int
}

func (f *fixedReader) Read(p []byte) (int, error) {
	if f.off == len(f.data) {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), f.chunk)], f.data[f.off:])
	f.off += n
	return n, nil
}

func (f *fixedReader) Close() error { return nil }

// switchPoint is where a stream switched strategy: the body had delivered
// off bytes, those before under another strategy, and to became the
// strategy.
type switchPoint struct {
	off int
	to  int
}

// readSwitches reads in through sc in fixed chunks, with Read or WriteTo,
// and returns the output and where the strategy switched.
func readSwitches(t *testing.T, sc *Matcher, in []byte, chunk int, useWriteTo bool) ([]byte, []switchPoint) {
	t.Helper()
	src := &fixedReader{data: in, chunk: chunk}
	rc := sc.Reader(src).(*reader)
	var out bytes.Buffer
	var pts []switchPoint
	// Every segment is released right after a body read, so the switch a
	// segment shows happened when the body had delivered src.off bytes.
	note := func() {
		if len(pts) < rc.ad.switches {
			pts = append(pts, switchPoint{src.off, rc.ad.cur})
		}
	}
	if useWriteTo {
		w := writerFunc(func(p []byte) (int, error) {
			note()
			return out.Write(p)
		})
		if _, err := rc.WriteTo(w); err != nil {
			t.Fatal(err)
		}
	} else {
		p := make([]byte, 2*len(rc.buf))
		for {
			n, err := rc.Read(p)
			note()
			out.Write(p[:n])
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(pts) != rc.ad.switches {
		t.Fatalf("%d switches seen, %d made", len(pts), rc.ad.switches)
	}
	return out.Bytes(), pts
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestReaderAdaptiveSwitch drives one stream from anchored search to
// Wu-Manber and back, and checks secrets placed across each switch point
// (which is also a body read boundary) are masked, with Read and WriteTo.
func TestReaderAdaptiveSwitch(t *testing.T) {
	secret := "Qb" + strings.Repeat("c", 38)
	sc := mustScrubber(t, secret)
	if !sc.anchored {
		t.Fatal("static choice is Wu-Manber; the test needs anchored")
	}
	// "QbQb..." hits the anchor of the raw form every other byte, while
	// Wu-Manber skips nearly minLen bytes; "cccc..." holds no anchor byte
	// and leaves Wu-Manber a candidate at every position.
	const half = 600 << 10
	in := append(bytes.Repeat([]byte("Qb"), half/2), '\n')
	in = append(in, bytes.Repeat([]byte("c"), half)...)
	const chunk = 4093
	out, pts := readSwitches(t, sc, in, chunk, false)
	if !bytes.Equal(out, in) {
		t.Fatal("output differs from input, which holds no secret")
	}
	if len(pts) != 2 || pts[0].to != stratWuManber || pts[1].to != stratText || pts[0].off >= half || pts[1].off < half {
		t.Fatalf("switch points %+v, want one to Wu-Manber before byte %d and one back to anchored after it", pts, half)
	}
	checkStraddles(t, sc, in, chunk, pts, []string{secret}, []string{testkit.SecretForms(secret)[0], testkit.SecretForms(secret)[1], testkit.SecretForms(secret)[3]})
}

// checkStraddles places each form so it starts 1, half its length and all
// but one byte before each switch point pts of in (each also a read
// boundary), checks the switch still falls inside it, and compares the
// output of Read and WriteTo with the reference.
func checkStraddles(t *testing.T, sc *Matcher, in []byte, chunk int, pts []switchPoint, secrets, forms []string) {
	t.Helper()
	for i := range pts {
		for _, f := range forms {
			for _, j := range []int{1, len(f) / 2, len(f) - 1} {
				// Place f to start j bytes before the switch point, then
				// check it still straddles the point it moved to.
				x := pts[i].off
				for try := 0; ; try++ {
					in2 := bytes.Clone(in)
					copy(in2[x-j:], f)
					want := reference(in2, secrets...)
					var pts2 []switchPoint
					for _, useWriteTo := range []bool{false, true} {
						var out []byte
						out, pts2 = readSwitches(t, sc, in2, chunk, useWriteTo)
						if !bytes.Equal(out, want) {
							t.Fatalf("switch %d, form %q %d bytes before it, WriteTo=%v: output differs from reference", i, f, j, useWriteTo)
						}
					}
					if len(pts2) == len(pts) && pts2[i].to == pts[i].to && x-j < pts2[i].off && pts2[i].off < x-j+len(f) {
						break
					}
					if try == 3 || len(pts2) != len(pts) {
						t.Fatalf("switch %d, form %q: could not place it across the switch point: %+v", i, f, pts2)
					}
					x = pts2[i].off
				}
			}
		}
	}
}

// TestReaderBinarySwitch drives one stream from the text anchors to
// the binary anchors on random bytes and out of them on bytes that stop
// the binary anchors' search only (each anchor with a neighbour it is
// searched with), and checks secrets placed across each switch point are
// masked, with Read and WriteTo.
func TestReaderBinarySwitch(t *testing.T) {
	secrets := []string{benchSecret, "Bearer " + benchSecret}
	sc := mustScrubber(t, secrets...)
	if !sc.anchored || sc.bin == nil {
		t.Fatal("the test needs text anchors as the static choice and binary anchors")
	}
	const half = 600 << 10
	in := make([]byte, half, 2*half)
	rand.New(rand.NewSource(3)).Read(in)
	var hot []byte
	for _, a := range sc.bin {
		switch {
		case !a.pair:
			hot = append(hot, a.c)
		case a.near == 1:
			hot = append(hot, a.c, a.nb1)
		default:
			hot = append(hot, a.nb1, a.c)
		}
	}
	for len(in) < 2*half {
		in = append(in, hot...)
	}
	const chunk = 4093
	out, pts := readSwitches(t, sc, in, chunk, false)
	if !bytes.Equal(out, reference(in, secrets...)) {
		t.Fatal("output differs from reference")
	}
	if len(pts) != 2 || pts[0].to != stratBinary || pts[1].to != stratText || pts[0].off >= half || pts[1].off < half {
		t.Fatalf("switch points %+v, want one to the binary anchors before byte %d and one back to the text anchors after it", pts, half)
	}
	var forms []string
	for _, s := range secrets {
		forms = append(forms, testkit.SecretForms(s)...)
	}
	checkStraddles(t, sc, in, chunk, pts, secrets, forms)
}

// TestReaderBinaryPasses checks the proxy benchmark's credential,
// whose text anchors take three passes, is scanned with two over random
// bytes and over JSON, by Read and WriteTo: both binary anchors are
// searched as pairs, which stop about once in 32 KiB of random bytes and
// seldom in text, so their two passes cost less on either.
func TestReaderBinaryPasses(t *testing.T) {
	sc := mustScrubber(t, benchSecret, "Bearer "+benchSecret)
	if len(sc.anchors) != 3 || len(sc.bin) != 2 || !sc.bin[0].pair || !sc.bin[1].pair {
		t.Fatalf("%d text anchors and %d binary anchors (pairs: %v), want 3 and 2 pairs", len(sc.anchors), len(sc.bin), sc.bin[0].pair && sc.bin[1].pair)
	}
	rnd := make([]byte, 4<<20)
	rand.New(rand.NewSource(5)).Read(rnd)
	for _, tc := range []struct {
		name string
		in   []byte
		want int
	}{
		{"random", rnd, stratBinary},
		{"json", bytes.Repeat(jsonBlock(""), 64), stratBinary},
	} {
		for _, useWriteTo := range []bool{false, true} {
			_, pts := readSwitches(t, sc, tc.in, 32<<10, useWriteTo)
			if len(pts) != 1 || pts[0].to != tc.want || pts[0].off > 2*adaptWindow {
				t.Errorf("%s, WriteTo=%v: switch points %+v, want one to the binary anchors within %d bytes", tc.name, useWriteTo, pts, 2*adaptWindow)
			}
		}
	}
}

// minCover is the fewest byte values that each occur in every pattern of
// some subset covering pats, by brute force over up to three bytes (0 when
// more are needed).
func minCover(pats [][]byte) int {
	var masks []uint64
	for c := range 256 {
		var m uint64
		for pi, p := range pats {
			if bytes.IndexByte(p, byte(c)) >= 0 {
				m |= 1 << pi
			}
		}
		if m != 0 {
			masks = append(masks, m)
		}
	}
	all := uint64(1)<<len(pats) - 1
	best := 0
	for i, a := range masks {
		for j, b := range masks[:i+1] {
			for _, c := range masks[:j+1] {
				if n := len(slices.Compact([]uint64{a, b, c})); a|b|c == all && (best == 0 || n < best) {
					best = n
				}
			}
		}
	}
	return best
}

// TestBinaryAnchorsMinimumCover checks the binary anchors check every
// pattern exactly once, at an offset holding the anchor byte, with as few
// passes as brute force finds, and that a Matcher keeps them only when
// they are cheaper on random data than the text anchors.
func TestBinaryAnchorsMinimumCover(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	sets := [][]string{
		{benchSecret, "Bearer " + benchSecret},
		{"ghp_0123456789abcdefghijABCDEFGHIJ012345", "Bearer ghp_0123456789abcdefghijABCDEFGHIJ012345"},
		{"pa55word", "alice:pa55word", "Basic YWxpY2U6cGE1NXdvcmQ="},
		{"correct-horse-battery", "Bearer correct-horse-battery"},
		{"k3y!"}, {"a/b+c?d=e"}, {"aaaa"},
	}
	for range 200 {
		var set []string
		for range 1 + rng.Intn(2) {
			b := make([]byte, 4+rng.Intn(12))
			for i := range b {
				b[i] = byte(' ' + rng.Intn(95))
			}
			set = append(set, string(b))
		}
		sets = append(sets, set)
	}
	kept := 0
	for _, secrets := range sets {
		m := mustScrubber(t, secrets...)
		bin := m.bin
		if bin == nil {
			bin = chooseBinaryAnchors(m.pats, firstOffsets(m.pats))
			if m.anchors != nil && setCost(bin, uniformFreq) < setCost(m.anchors, uniformFreq) {
				t.Fatalf("%q: binary anchors cheaper on random data dropped", secrets)
			}
		} else {
			kept++
			if setCost(bin, uniformFreq) >= setCost(m.anchors, uniformFreq) {
				t.Fatalf("%q: binary anchors kept though no cheaper on random data", secrets)
			}
		}
		seen := make([]int, len(m.pats))
		for _, a := range bin {
			for _, ap := range a.pats {
				seen[ap.idx]++
				if m.pats[ap.idx][ap.off] != a.c {
					t.Fatalf("%q: pattern %d has no %q at offset %d", secrets, ap.idx, a.c, ap.off)
				}
			}
		}
		for pi, n := range seen {
			if n != 1 {
				t.Fatalf("%q: pattern %q checked by %d anchors", secrets, m.pats[pi], n)
			}
		}
		if want := minCover(m.pats); want != 0 && len(bin) != want {
			t.Fatalf("%q: %d binary anchors, a cover of %d exists", secrets, len(bin), want)
		}
	}
	if kept < 20 {
		t.Errorf("binary anchors kept for %d of %d secret sets, want more", kept, len(sets))
	}
}

// patternSource fills reads from a repeating block without allocating.
type patternSource struct {
	block []byte
	off   int
	left  int64
}

func (p *patternSource) Read(b []byte) (int, error) {
	if p.left == 0 {
		return 0, io.EOF
	}
	n := 0
	for n < len(b) && p.left > 0 {
		k := copy(b[n:], p.block[p.off:])
		if int64(k) > p.left {
			k = int(p.left)
		}
		n += k
		p.left -= int64(k)
		p.off = (p.off + k) % len(p.block)
	}
	return n, nil
}

func (p *patternSource) Close() error { return nil }

func jsonBlock(secret string) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < 64<<10; i++ {
		fmt.Fprintf(&b, `{"id":%d,"name":"item-%d","tags":["alpha","beta"],"token_hint":"tok_%x","url":"https://api.example.com/v1/items/%d?page=%d"}`+"\n", i, i, i*7919, i, i%13)
	}
	if secret != "" {
		b.WriteString(secret)
	}
	return b.Bytes()
}

// TestReaderBoundedMemory streams 64 MiB and checks the reader
// allocates nothing per read and its buffer grows only to its bound.
func TestReaderBoundedMemory(t *testing.T) {
	for _, useWriteTo := range []bool{false, true} {
		t.Run(fmt.Sprintf("WriteTo=%v", useWriteTo), func(t *testing.T) { checkBoundedMemory(t, useWriteTo) })
	}
}

func checkBoundedMemory(t *testing.T, useWriteTo bool) {
	secret := "ghp_0123456789abcdefghijABCDEFGHIJ012345"
	sc := mustScrubber(t, secret, "Bearer "+secret)
	src := &patternSource{block: jsonBlock(secret), left: 64 << 20}
	rc := sc.Reader(src)
	sr := rc.(*reader)
	bufCap := cap(sr.buf)
	var total int64
	check := func(b []byte) {
		total += int64(len(b))
		if bytes.Contains(b, []byte(secret)) {
			t.Fatal("secret passed through")
		}
	}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	if useWriteTo {
		if _, err := sr.WriteTo(writerFunc(func(b []byte) (int, error) { check(b); return len(b), nil })); err != nil {
			t.Fatal(err)
		}
	} else {
		p := make([]byte, 32<<10)
		for {
			n, err := rc.Read(p)
			check(p[:n])
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	runtime.ReadMemStats(&ms1)
	if total != 64<<20 {
		t.Fatalf("read %d bytes, want %d", total, 64<<20)
	}
	// The source always fills the buffer, so it grows to the bound (and no
	// further) while streaming.
	if bufCap != bufSize || cap(sr.buf) != maxBufSize {
		t.Fatalf("buffer went from %d to %d bytes, want %d to %d", bufCap, cap(sr.buf), bufSize, maxBufSize)
	}
	if alloc := ms1.TotalAlloc - ms0.TotalAlloc; alloc > 1<<20 {
		t.Fatalf("streaming 64 MiB allocated %d bytes, want < 1 MiB", alloc)
	}
}

func FuzzReader(f *testing.F) {
	f.Add("tok_9f8e7d6c5b4a", []byte("hello tok_9f8e7d6c5b4a world"), int64(1))
	f.Add("aaaa", []byte("aaaaaaaaaa"), int64(2))
	f.Add("a/b+c?d=e", []byte("x YS9iK2M/ZD1l y a%2Fb%2Bc%3Fd%3De"), int64(3))
	f.Add("Bearer xyz1", []byte{}, int64(4))
	f.Fuzz(func(t *testing.T, secret string, data []byte, seed int64) {
		if len(secret) < minPatternLen || len(secret) > 300 || len(data) > 1<<16 {
			t.Skip()
		}
		rng := rand.New(rand.NewSource(seed))
		// Splice forms of the secret into the fuzzer's bytes.
		in := bytes.Clone(data)
		forms := testkit.SecretForms(secret)
		for range rng.Intn(5) {
			f := forms[rng.Intn(len(forms))]
			if rng.Intn(3) == 0 {
				f = f[:rng.Intn(len(f))]
			}
			at := rng.Intn(len(in) + 1)
			in = append(in[:at], append([]byte(f), in[at:]...)...)
		}
		want := reference(in, secret)
		for _, v := range strategies(t, mustScrubber(t, secret)) {
			got := readAllRandom(t, v.reader(&chunkReader{data: bytes.Clone(in), rng: rng, max: 1 + rng.Intn(100)}), rng)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: output differs from reference\n got %q\nwant %q", v.name, got, want)
			}
			var out bytes.Buffer
			n, err := v.reader(&chunkReader{data: bytes.Clone(in), rng: rng, max: 1 + rng.Intn(100)}).WriteTo(&out)
			if err != nil || n != int64(len(in)) || !bytes.Equal(out.Bytes(), want) {
				t.Fatalf("%s: WriteTo = %d, %v\n got %q\nwant %q", v.name, n, err, out.Bytes(), want)
			}
		}
	})
}

// manySecrets returns n distinct 40-byte secrets from a token alphabet with
// characters base64 and URL escaping change, drawn from seed.
func manySecrets(n int, seed int64) []string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_./+=~"
	rng := rand.New(rand.NewSource(seed))
	seen := map[string]bool{}
	var out []string
	for len(out) < n {
		b := make([]byte, 40)
		for i := range b {
			b[i] = alphabet[rng.Intn(len(alphabet))]
		}
		if s := string(b); !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// FuzzReaderManySecrets is FuzzReader with the fuzzer's secret among 199
// others, so every strategy (and the direct check near the end of the data)
// runs with over a thousand patterns, as with a large credential set in one
// scrubber (credentials' TestScrubberThousandSecrets covers 1,000 secrets
// with every form cut at every offset). Forms of the fuzzer's secret and of a few others,
// sometimes truncated, are spliced into the fuzzer's bytes, which reach the
// reader in random small pieces, so occurrences straddle reads.
func FuzzReaderManySecrets(f *testing.F) {
	f.Add("tok_9f8e7d6c5b4a", []byte("hello tok_9f8e7d6c5b4a world"), int64(1))
	f.Add("a/b+c?d=e", []byte("x YS9iK2M/ZD1l y a%2Fb%2Bc%3Fd%3De"), int64(3))
	f.Add("Bearer xyz1", []byte{}, int64(4))
	others := manySecrets(199, 11)
	f.Fuzz(func(t *testing.T, secret string, data []byte, seed int64) {
		if len(secret) < minPatternLen || len(secret) > 300 || len(data) > 4<<10 {
			t.Skip()
		}
		rng := rand.New(rand.NewSource(seed))
		secrets := append([]string{secret}, others...)
		in := bytes.Clone(data)
		for range rng.Intn(8) {
			s := secret
			if rng.Intn(2) == 0 {
				s = others[rng.Intn(len(others))]
			}
			forms := testkit.SecretForms(s)
			f := forms[rng.Intn(len(forms))]
			if rng.Intn(4) == 0 {
				f = f[:rng.Intn(len(f))]
			}
			at := rng.Intn(len(in) + 1)
			in = append(in[:at], append([]byte(f), in[at:]...)...)
		}
		want := reference(in, secrets...)
		for _, v := range strategies(t, mustScrubber(t, secrets...)) {
			got := readAllRandom(t, v.reader(&chunkReader{data: bytes.Clone(in), rng: rng, max: 1 + rng.Intn(100)}), rng)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: output differs from reference\n got %q\nwant %q", v.name, got, want)
			}
			var out bytes.Buffer
			n, err := v.reader(&chunkReader{data: bytes.Clone(in), rng: rng, max: 1 + rng.Intn(100)}).WriteTo(&out)
			if err != nil || n != int64(len(in)) || !bytes.Equal(out.Bytes(), want) {
				t.Fatalf("%s: WriteTo = %d, %v\n got %q\nwant %q", v.name, n, err, out.Bytes(), want)
			}
		}
	})
}

func benchmarkStream(b *testing.B, block []byte, sc *Matcher, useWriteTo bool) {
	const size = 64 << 20
	p := make([]byte, 32<<10)
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		var rc io.ReadCloser = &patternSource{block: block, left: size}
		if sc != nil {
			rc = sc.Reader(rc)
		}
		if useWriteTo {
			if _, err := rc.(io.WriterTo).WriteTo(io.Discard); err != nil {
				b.Fatal(err)
			}
			continue
		}
		for {
			_, err := rc.Read(p)
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// benchSecret is the proxy benchmark's credential (a bearer token).
const benchSecret = "bench-token-3f9a1c7e"

type benchCase struct {
	name  string
	block []byte
	sc    *Matcher
}

func benchCases(b *testing.B) []benchCase {
	secret := "ghp_0123456789abcdefghijABCDEFGHIJ012345"
	rnd := make([]byte, 64<<10)
	rand.New(rand.NewSource(1)).Read(rnd)
	return []benchCase{
		{"json/baseline", jsonBlock(""), nil},
		{"json/bearer40", jsonBlock(""), mustScrubber(b, secret, "Bearer "+secret)},
		{"json/basic", jsonBlock(""), mustScrubber(b, "pa55word", "alice:pa55word", "Basic YWxpY2U6cGE1NXdvcmQ=")},
		{"json/short4", jsonBlock(""), mustScrubber(b, "k3y!")},
		{"json/lowercase20", jsonBlock(""), mustScrubber(b, "correct-horse-battery", "Bearer correct-horse-battery")},
		{"random/bearer40", rnd, mustScrubber(b, secret, "Bearer "+secret)},
		{"random/short4", rnd, mustScrubber(b, "k3y!")},
		{"random/bench20", rnd, mustScrubber(b, benchSecret, "Bearer "+benchSecret)},
		{"json/with-matches", jsonBlock(secret), mustScrubber(b, secret, "Bearer "+secret)},
	}
}

// BenchmarkReader streams 64 MiB through the scrubber's Read (no
// match) and, for comparison, without it.
func BenchmarkReader(b *testing.B) {
	for _, tc := range benchCases(b) {
		b.Run(tc.name, func(b *testing.B) { benchmarkStream(b, tc.block, tc.sc, false) })
	}
}

// BenchmarkReaderWriteTo streams 64 MiB through the scrubber's WriteTo
// to io.Discard.
func BenchmarkReaderWriteTo(b *testing.B) {
	for _, tc := range benchCases(b) {
		if tc.sc != nil {
			b.Run(tc.name, func(b *testing.B) { benchmarkStream(b, tc.block, tc.sc, true) })
		}
	}
}

// TestReaderKeepsSmallBufferForSlowBodies checks that a body whose
// reads never fill the buffer (a trickle, SSE) keeps the starting buffer.
func TestReaderKeepsSmallBufferForSlowBodies(t *testing.T) {
	secret := "ghp_0123456789abcdefghijABCDEFGHIJ012345"
	sc := mustScrubber(t, secret)
	body := bytes.Repeat(jsonBlock(secret), 8)
	rc := sc.Reader(&chunkReader{data: body, rng: rand.New(rand.NewSource(1)), max: 4 << 10})
	out, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(body) || bytes.Contains(out, []byte(secret)) {
		t.Fatalf("got %d bytes (want %d), secret masked: %v", len(out), len(body), !bytes.Contains(out, []byte(secret)))
	}
	if got := cap(rc.(*reader).buf); got != bufSize {
		t.Errorf("buffer = %d bytes, want the starting %d for a body read in small pieces", got, bufSize)
	}
}

// TestReaderGrowthMatchesReference streams bodies that fill every read,
// so the buffer grows from 32 KiB to 256 KiB mid-stream, with secrets around
// each size the buffer passes through, and compares with the reference.
func TestReaderGrowthMatchesReference(t *testing.T) {
	secret := "tok_9f8e7d6c5b4a3210"
	sc := mustScrubber(t, secret)
	rng := rand.New(rand.NewSource(7))
	body := make([]byte, 2<<20)
	rng.Read(body)
	for _, at := range []int{32 << 10, 64 << 10, 96 << 10, 128 << 10, 224 << 10, 256 << 10, 480 << 10, 512 << 10, 1 << 20} {
		for _, d := range []int{-len(secret), -7, -1, 0, 3} {
			copy(body[at+d:], secret)
		}
	}
	want := reference(body, secret)
	for _, useWriteTo := range []bool{false, true} {
		rc := sc.Reader(io.NopCloser(bytes.NewReader(body)))
		var got []byte
		var err error
		if useWriteTo {
			var buf bytes.Buffer
			_, err = rc.(io.WriterTo).WriteTo(&buf)
			got = buf.Bytes()
		} else {
			got, err = io.ReadAll(rc)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			i := 0
			for i < len(got) && i < len(want) && got[i] == want[i] {
				i++
			}
			t.Fatalf("WriteTo=%v: output differs from the reference at byte %d of %d", useWriteTo, i, len(want))
		}
		if c := cap(rc.(*reader).buf); c != maxBufSize {
			t.Errorf("WriteTo=%v: buffer = %d bytes, want it grown to %d", useWriteTo, c, maxBufSize)
		}
	}
}

// TestNewWithoutPatterns checks New returns nil when no pattern is left
// (credentials.NewScrubber returns a nil Scrubber then).
func TestNewWithoutPatterns(t *testing.T) {
	if m := New(nil); m != nil {
		t.Errorf("New(nil) = %v, want nil", m)
	}
	if m := New([]string{"", ""}); m != nil {
		t.Errorf("New(empty patterns) = %v, want nil", m)
	}
	m := New([]string{"abcd", "abcd", "wxyz"})
	if m.Len() != 2 || m.MinLen() != 4 || m.MaxLen() != 4 {
		t.Errorf("New(abcd, abcd, wxyz): Len %d, MinLen %d, MaxLen %d; want 2, 4, 4", m.Len(), m.MinLen(), m.MaxLen())
	}
}
