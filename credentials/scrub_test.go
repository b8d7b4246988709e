package credentials

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"
)

// testForms lists the encodings the scrubber must find, written
// independently of secretForms.
func testForms(s string) []string {
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

// reference masks, in the original input, every byte covered by any
// occurrence (overlaps included) of any form of any secret, using
// bytes.Index on the untouched input.
func reference(in []byte, secrets ...string) []byte {
	out := bytes.Clone(in)
	for _, s := range secrets {
		for _, f := range testForms(s) {
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

func mustScrubber(t testing.TB, secrets ...string) *Scrubber {
	t.Helper()
	var vs []Value
	for _, s := range secrets {
		vs = append(vs, NewValue(s))
	}
	s, err := NewScrubber(vs...)
	if err != nil {
		t.Fatalf("NewScrubber: %v", err)
	}
	return s
}

// strategies returns sc forced to each scan strategy, so the property
// tests cover both whatever the cost model picks.
func strategies(t testing.TB, sc *Scrubber) map[string]*Scrubber {
	t.Helper()
	wm, an := *sc.m, *sc.m
	wm.anchors = nil
	if an.anchors == nil {
		an.anchors, _ = chooseAnchors(an.pats)
	}
	out := map[string]*Scrubber{"wu-manber": {m: &wm}}
	if an.anchors != nil {
		out["anchored"] = &Scrubber{m: &an}
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
			forms := testForms(s)
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

func TestScrubReaderMatchesReference(t *testing.T) {
	secretSets := [][]string{
		{"tok_9f8e7d6c5b4a"},
		{"abcd"},
		{"aaaa"},      // self-overlapping
		{"a/b+c?d=e"}, // every encoding differs
		{"ghp_0123456789abcdefghijABCDEFGHIJ012345", "Bearer ghp_0123456789abcdefghijABCDEFGHIJ012345"},
		{"s3cr3t-pass", "alice:s3cr3t-pass", "Basic YWxpY2U6czNjcjN0LXBhc3M="},
		{"x y z"},
	}
	for si, secrets := range secretSets {
		for name, sc := range strategies(t, mustScrubber(t, secrets...)) {
			t.Run(fmt.Sprintf("%d/%s", si, name), func(t *testing.T) { checkReference(t, sc, si, secrets) })
		}
	}
}

func checkReference(t *testing.T, sc *Scrubber, si int, secrets []string) {
	{
		for trial := range 60 {
			seed := int64(si*1000 + trial)
			rng := rand.New(rand.NewSource(seed))
			in := genInput(rng, secrets, rng.Intn(3000))
			want := reference(in, secrets...)
			cr := &chunkReader{data: bytes.Clone(in), rng: rng, max: 1 + rng.Intn(200)}
			rc := sc.Reader(cr)
			got := readAllRandom(t, rc, rng)
			if !bytes.Equal(got, want) {
				t.Fatalf("secrets %d seed %d: scrubbed output differs from reference\n got %q\nwant %q", si, seed, got, want)
			}
			if err := rc.Close(); err != nil || !cr.closed {
				t.Fatalf("Close: err %v, underlying closed %v", err, cr.closed)
			}
			if got := sc.Bytes(in); !bytes.Equal(got, want) {
				t.Fatalf("secrets %d seed %d: Bytes differs from reference", si, seed)
			}
		}
	}
}

// TestScrubReaderEqualsReplaceAll checks the streaming output against a
// plain bytes.ReplaceAll chain where occurrences do not overlap.
func TestScrubReaderEqualsReplaceAll(t *testing.T) {
	secret := "tok_Zq81/xK+9w=="
	forms := testForms(secret)
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
	for name, sc := range strategies(t, mustScrubber(t, secret)) {
		for _, max := range []int{1, 2, 3, 7, 64, 4096} {
			got := readAllRandom(t, sc.Reader(&chunkReader{data: bytes.Clone(in), rng: rng, max: max}), rng)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s, max chunk %d: output differs from bytes.ReplaceAll", name, max)
			}
		}
	}
}

// TestScrubReaderEverySplit splits one occurrence at every offset.
func TestScrubReaderEverySplit(t *testing.T) {
	secret := "sk_live_51HabcdefXYZ"
	for _, form := range testForms(secret) {
		in := []byte("before " + form + " after")
		want := []byte("before " + strings.Repeat("*", len(form)) + " after")
		for split := 0; split <= len(in); split++ {
			for name, sc := range strategies(t, mustScrubber(t, secret)) {
				rc := sc.Reader(io.NopCloser(io.MultiReader(bytes.NewReader(in[:split]), bytes.NewReader(in[split:]))))
				got, err := io.ReadAll(rc)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("%s: form %q split %d: got %q, %v; want %q", name, form, split, got, err, want)
				}
			}
		}
	}
}

// TestScrubReaderStreamsWithoutWaiting shows bytes that cannot start a
// secret are delivered at once (SSE keeps working) while a partial match is
// held until resolved.
func TestScrubReaderStreamsWithoutWaiting(t *testing.T) {
	secret := "tok_abcdefgh1234"
	pr, pw := io.Pipe()
	rc := mustScrubber(t, secret).Reader(pr)
	defer rc.Close()

	readNow := func(want string) {
		t.Helper()
		got := make(chan string, 1)
		go func() {
			buf := make([]byte, 1024)
			n, err := rc.Read(buf)
			if err != nil {
				got <- "error: " + err.Error()
				return
			}
			got <- string(buf[:n])
		}()
		select {
		case g := <-got:
			if g != want {
				t.Fatalf("Read = %q, want %q", g, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Read blocked, want %q", want)
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
	if n, err := rc.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Fatalf("Read at end = %d, %v; want 0, EOF", n, err)
	}
}

func TestScrubReaderPassesErrors(t *testing.T) {
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

func TestScrubberHeader(t *testing.T) {
	secret := "tok_Zq81/xK+9w"
	sc := mustScrubber(t, secret, "Bearer "+secret)
	h := http.Header{
		"X-Echo":       {"Bearer " + secret, "ok"},
		"Location":     {"https://x.example/cb?t=" + url.QueryEscape(secret)},
		"X-B64":        {base64.StdEncoding.EncodeToString([]byte(secret))},
		"Content-Type": {"application/json"},
	}
	sc.Header(h)
	for k, vs := range h {
		for _, v := range vs {
			for _, f := range testForms(secret) {
				if strings.Contains(v, f) {
					t.Errorf("header %s still holds a form of the secret: %q", k, v)
				}
			}
		}
	}
	if got := h.Get("X-Echo"); got != strings.Repeat("*", len("Bearer "+secret)) {
		t.Errorf("X-Echo = %q", got)
	}
	if h.Values("X-Echo")[1] != "ok" || h.Get("Content-Type") != "application/json" {
		t.Errorf("unrelated values changed: %v", h)
	}
	var nilScrubber *Scrubber
	nilScrubber.Header(h) // no panic
	body := io.NopCloser(strings.NewReader("x"))
	if nilScrubber.Reader(body) != body {
		t.Error("nil Scrubber wrapped the body")
	}
}

func TestNewScrubberRefusesShortSecrets(t *testing.T) {
	for _, s := range []string{"Q", "Qz", "Qz7"} {
		if _, err := NewScrubber(NewValue(s)); err == nil {
			t.Errorf("NewScrubber(%d-byte secret) succeeded, want error", len(s))
		} else if strings.Contains(err.Error(), s) {
			t.Errorf("error %q contains the secret", err)
		}
	}
	if s, err := NewScrubber(); s != nil || err != nil {
		t.Errorf("NewScrubber() = %v, %v; want nil, nil", s, err)
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

// TestScrubReaderBoundedMemory streams 64 MiB and checks the reader
// allocates nothing per read and its buffer never grows.
func TestScrubReaderBoundedMemory(t *testing.T) {
	secret := "ghp_0123456789abcdefghijABCDEFGHIJ012345"
	sc := mustScrubber(t, secret, "Bearer "+secret)
	src := &patternSource{block: jsonBlock(secret), left: 64 << 20}
	rc := sc.Reader(src)
	sr := rc.(*scrubReader)
	bufCap := cap(sr.buf)
	p := make([]byte, 32<<10)
	var total int64
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	for {
		n, err := rc.Read(p)
		total += int64(n)
		if bytes.Contains(p[:n], []byte(secret)) {
			t.Fatal("secret passed through")
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&ms1)
	if total != 64<<20 {
		t.Fatalf("read %d bytes, want %d", total, 64<<20)
	}
	if cap(sr.buf) != bufCap {
		t.Fatalf("buffer grew from %d to %d", bufCap, cap(sr.buf))
	}
	if alloc := ms1.TotalAlloc - ms0.TotalAlloc; alloc > 1<<20 {
		t.Fatalf("streaming 64 MiB allocated %d bytes, want < 1 MiB", alloc)
	}
}

func FuzzScrubReader(f *testing.F) {
	f.Add("tok_9f8e7d6c5b4a", []byte("hello tok_9f8e7d6c5b4a world"), int64(1))
	f.Add("aaaa", []byte("aaaaaaaaaa"), int64(2))
	f.Add("a/b+c?d=e", []byte("x YS9iK2M/ZD1l y a%2Fb%2Bc%3Fd%3De"), int64(3))
	f.Add("Bearer xyz1", []byte{}, int64(4))
	f.Fuzz(func(t *testing.T, secret string, data []byte, seed int64) {
		if len(secret) < MinSecretLen || len(secret) > 300 || len(data) > 1<<16 {
			t.Skip()
		}
		rng := rand.New(rand.NewSource(seed))
		// Splice forms of the secret into the fuzzer's bytes.
		in := bytes.Clone(data)
		forms := testForms(secret)
		for range rng.Intn(5) {
			f := forms[rng.Intn(len(forms))]
			if rng.Intn(3) == 0 {
				f = f[:rng.Intn(len(f))]
			}
			at := rng.Intn(len(in) + 1)
			in = append(in[:at], append([]byte(f), in[at:]...)...)
		}
		want := reference(in, secret)
		for name, sc := range strategies(t, mustScrubber(t, secret)) {
			got := readAllRandom(t, sc.Reader(&chunkReader{data: bytes.Clone(in), rng: rng, max: 1 + rng.Intn(100)}), rng)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: output differs from reference\n got %q\nwant %q", name, got, want)
			}
		}
	})
}

func benchmarkStream(b *testing.B, block []byte, sc *Scrubber) {
	const size = 64 << 20
	p := make([]byte, 32<<10)
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		var rc io.ReadCloser = &patternSource{block: block, left: size}
		if sc != nil {
			rc = sc.Reader(rc)
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

// BenchmarkScrubReader streams 64 MiB through the scrubber (no match) and,
// for comparison, without it.
func BenchmarkScrubReader(b *testing.B) {
	secret := "ghp_0123456789abcdefghijABCDEFGHIJ012345"
	rnd := make([]byte, 64<<10)
	rand.New(rand.NewSource(1)).Read(rnd)
	cases := []struct {
		name  string
		block []byte
		sc    *Scrubber
	}{
		{"json/baseline", jsonBlock(""), nil},
		{"json/bearer40", jsonBlock(""), mustScrubber(b, secret, "Bearer "+secret)},
		{"json/basic", jsonBlock(""), mustScrubber(b, "pa55word", "alice:pa55word", "Basic YWxpY2U6cGE1NXdvcmQ=")},
		{"json/short4", jsonBlock(""), mustScrubber(b, "k3y!")},
		{"json/lowercase20", jsonBlock(""), mustScrubber(b, "correct-horse-battery", "Bearer correct-horse-battery")},
		{"random/bearer40", rnd, mustScrubber(b, secret, "Bearer "+secret)},
		{"random/short4", rnd, mustScrubber(b, "k3y!")},
		{"json/with-matches", jsonBlock(secret), mustScrubber(b, secret, "Bearer "+secret)},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) { benchmarkStream(b, tc.block, tc.sc) })
	}
}
