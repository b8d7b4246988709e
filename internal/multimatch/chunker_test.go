package multimatch

import (
	"bytes"
	"math/rand"
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// TestChunkerMatchesReference feeds messages with forms of the secrets (and
// their prefixes) spliced in, cut into random chunks, through one Chunker:
// each message's released bytes equal the reference masking, and nothing
// of a message is held past its final chunk.
func TestChunkerMatchesReference(t *testing.T) {
	secretSets := [][]string{
		{"tok_9f8e7d6c5b4a"},
		{"aaaa"}, // self-overlapping
		{"a/b+c?d=e"},
		{"s3cr3t-pass", "alice:s3cr3t-pass", "Basic YWxpY2U6czNjcjN0LXBhc3M="},
	}
	rng := rand.New(rand.NewSource(1))
	for _, secrets := range secretSets {
		m := mustScrubber(t, secrets...)
		c := m.Chunker()
		for msg := range 200 {
			in := make([]byte, rng.Intn(300))
			for i := range in {
				in[i] = "aeb4/+=%_-:* "[rng.Intn(13)]
			}
			for range rng.Intn(5) {
				forms := testkit.SecretForms(secrets[rng.Intn(len(secrets))])
				f := forms[rng.Intn(len(forms))]
				if rng.Intn(3) == 0 {
					f = f[:rng.Intn(len(f))]
				}
				at := rng.Intn(len(in) + 1)
				in = append(in[:at], append([]byte(f), in[at:]...)...)
			}
			want := reference(in, secrets...)
			var got []byte
			for rest := in; ; {
				k := min(rng.Intn(40), len(rest))
				final := k == len(rest)
				got = append(got, c.Next(rest[:k], final, 64)...)
				rest = rest[k:]
				if final {
					break
				}
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("secrets %q, message %d: got %q, want %q", secrets, msg, got, want)
			}
		}
	}
}
