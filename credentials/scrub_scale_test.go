package credentials

import (
	"bytes"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// scaleFiller separates the forms in TestScrubberThousandSecrets' body. None
// of its bytes occurs in any form of any secret (the secrets' alphabet, the
// base64 alphabets, '%' and the space of "Bearer "), so every occurrence of
// a form lies inside one placed form, and the body masked is exactly each
// placed form turned to '*' with the filler untouched.
const scaleFiller = "\n,:{}\"!#"

// scaleBody places every form (testkit.SecretForms) of each bearer value of
// secrets (the secret and "Bearer secret") once, between filler runs of 1 to
// 8 bytes. It returns the body, the body masked, and the start and length
// of each placed form.
func scaleBody(secrets []string, rng *rand.Rand) (body, want []byte, starts, lens []int) {
	filler := func() {
		for range 1 + rng.Intn(8) {
			c := scaleFiller[rng.Intn(len(scaleFiller))]
			body = append(body, c)
			want = append(want, c)
		}
	}
	for _, s := range secrets {
		for _, v := range []string{s, "Bearer " + s} {
			for _, f := range testkit.SecretForms(v) {
				filler()
				starts, lens = append(starts, len(body)), append(lens, len(f))
				body = append(body, f...)
				want = append(want, strings.Repeat("*", len(f))...)
			}
		}
	}
	filler()
	return body, want, starts, lens
}

// cutReader returns data in pieces that end at each of cuts (increasing)
// and at its end.
type cutReader struct {
	data []byte
	pos  int
	cuts []int
}

func (c *cutReader) Read(p []byte) (int, error) {
	if c.pos == len(c.data) {
		return 0, io.EOF
	}
	end := len(c.data)
	for len(c.cuts) > 0 && c.cuts[0] <= c.pos {
		c.cuts = c.cuts[1:]
	}
	if len(c.cuts) > 0 {
		end = c.cuts[0]
	}
	n := copy(p, c.data[c.pos:end])
	c.pos += n
	return n, nil
}

func (c *cutReader) Close() error { return nil }

// randomCuts returns increasing cut positions in [1, n) with gaps of 1 to
// maxGap bytes.
func randomCuts(n, maxGap int, rng *rand.Rand) []int {
	var cuts []int
	for at := 1 + rng.Intn(maxGap); at < n; at += 1 + rng.Intn(maxGap) {
		cuts = append(cuts, at)
	}
	return cuts
}

// readBoth streams body through sc's Reader cut at cuts, once with Read
// (through a small buffer, so reads also end inside a held-back tail) and
// once with WriteTo, and fails unless both give want.
func readBoth(t *testing.T, sc *Scrubber, body, want []byte, cuts []int, what string) {
	t.Helper()
	rc := sc.Reader(&cutReader{data: body, cuts: cuts})
	var got []byte
	p := make([]byte, 777)
	for {
		n, err := rc.Read(p)
		got = append(got, p[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: Read: %v", what, err)
		}
	}
	if i := firstDiff(got, want); i >= 0 {
		t.Fatalf("%s: Read output differs from the expected masking at byte %d of %d", what, i, len(want))
	}
	var out bytes.Buffer
	if _, err := sc.Reader(&cutReader{data: body, cuts: cuts}).(io.WriterTo).WriteTo(&out); err != nil {
		t.Fatalf("%s: WriteTo: %v", what, err)
	}
	if i := firstDiff(out.Bytes(), want); i >= 0 {
		t.Fatalf("%s: WriteTo output differs from the expected masking at byte %d of %d", what, i, len(want))
	}
}

// firstDiff returns the first index where a and b differ, or -1 when equal.
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// TestScrubberThousandSecrets binds 1,000 distinct 40-byte secrets as
// bearer credentials in one Scrubber and checks that every form of each
// (raw, four base64 variants, query and path escaping, of the secret and of
// its header value) is masked by Mask, Header, the streaming Reader (Read and
// WriteTo) and ChunkMasker, with the body cut into pieces of 1 to 16 and 1
// to 4096 bytes, and, for a sample of 30 secrets, cut inside every form at
// every offset; and that nothing else is masked.
func TestScrubberThousandSecrets(t *testing.T) {
	secrets := scaleSecrets(1000, 2)
	sc := scaleScrubber(t, secrets)
	rng := rand.New(rand.NewSource(3))
	body, want, starts, lens := scaleBody(secrets, rng)

	got := bytes.Clone(body)
	sc.Mask(got)
	if i := firstDiff(got, want); i >= 0 {
		t.Fatalf("Mask: output differs from the expected masking at byte %d of %d", i, len(want))
	}

	for _, maxGap := range []int{16, 4096} {
		cuts := randomCuts(len(body), maxGap, rng)
		readBoth(t, sc, body, want, cuts, fmt.Sprintf("pieces of 1..%d bytes", maxGap))
		if got := chunkAll(t, sc, body, cuts); firstDiff(got, want) >= 0 {
			t.Fatalf("ChunkMasker, pieces of 1..%d bytes: output differs from the expected masking at byte %d", maxGap, firstDiff(got, want))
		}
	}

	// A sample: the first 30 secrets' forms, each cut at every offset.
	sample, sampleWant, sStarts, sLens := scaleBody(secrets[:30], rng)
	longest := 0
	for _, n := range sLens {
		longest = max(longest, n)
	}
	for off := 1; off < longest; off++ {
		var cuts []int
		for i, s := range sStarts {
			if off < sLens[i] {
				cuts = append(cuts, s+off)
			}
		}
		readBoth(t, sc, sample, sampleWant, cuts, fmt.Sprintf("every form cut %d bytes in", off))
		if got := chunkAll(t, sc, sample, cuts); firstDiff(got, sampleWant) >= 0 {
			t.Fatalf("ChunkMasker, every form cut %d bytes in: output differs at byte %d", off, firstDiff(got, sampleWant))
		}
	}

	// Headers: each placed form of the first 30 secrets as a header value,
	// with text around it.
	h := http.Header{}
	for i, s := range starts[:len(sStarts)] {
		h.Add("X-Echo", "v="+string(body[s:s+lens[i]])+";")
	}
	sc.Header(h)
	for i, v := range h.Values("X-Echo") {
		if w := "v=" + strings.Repeat("*", lens[i]) + ";"; v != w {
			t.Fatalf("header value %d = %q, want %q", i, v, w)
		}
	}
}

// scaleSecrets returns n distinct 40-byte secrets drawn from a token
// alphabet that includes characters URL escaping and base64 change.
func scaleSecrets(n int, seed int64) []string {
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

// scaleScrubber binds each secret as a bearer credential would: the secret
// and its "Bearer " header value.
func scaleScrubber(t testing.TB, secrets []string) *Scrubber {
	var vals []string
	for _, s := range secrets {
		vals = append(vals, s, "Bearer "+s)
	}
	return mustScrubber(t, vals...)
}

type repeatSource struct {
	block []byte
	left  int
}

func (r *repeatSource) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	n := min(len(p), r.left, len(r.block))
	copy(p, r.block[:n])
	r.left -= n
	return n, nil
}

func (r *repeatSource) Close() error { return nil }

func scaleJSON() []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < 64<<10; i++ {
		fmt.Fprintf(&b, `{"id":%d,"name":"item-%d","status":"ok","tags":["alpha","beta"],"url":"https://api.example.com/v1/items/%d?page=2"},`, i, i, i)
	}
	return b.Bytes()
}

func BenchmarkScrubberScale(b *testing.B) {
	rnd := make([]byte, 64<<10)
	rand.New(rand.NewSource(9)).Read(rnd)
	for _, n := range []int{1, 1000} {
		sc := scaleScrubber(b, scaleSecrets(n, 1))
		for _, data := range []struct {
			name  string
			block []byte
		}{{"random", rnd}, {"json", scaleJSON()}} {
			b.Run(fmt.Sprintf("stream/%s/secrets=%d", data.name, n), func(b *testing.B) {
				const size = 64 << 20
				b.SetBytes(size)
				b.ReportAllocs()
				for b.Loop() {
					rc := sc.Reader(&repeatSource{block: data.block, left: size})
					if _, err := rc.(io.WriterTo).WriteTo(io.Discard); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		b.Run(fmt.Sprintf("small/secrets=%d", n), func(b *testing.B) {
			const body = `{"id":"b3c1","object":"item","name":"bench","status":"ok","count":3,"tags":["a","b","c"]}`
			buf := make([]byte, len(body))
			b.ReportAllocs()
			for b.Loop() {
				h := http.Header{"Content-Type": {"application/json"}, "Content-Length": {"88"}, "Date": {"Sat, 28 Nov 2026 07:00:00 GMT"}}
				sc.Header(h)
				copy(buf, body)
				sc.Mask(buf)
			}
		})
	}
}
