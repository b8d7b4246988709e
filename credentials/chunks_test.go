package credentials

import (
	"bytes"
	"strings"
	"testing"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// chunkAll feeds in to a fresh ChunkMasker cut at cuts and returns what it
// released, checking that nothing is released past a possible secret start.
func chunkAll(t testing.TB, s *Scrubber, in []byte, cuts []int) []byte {
	t.Helper()
	c := s.Chunks()
	var out []byte
	prev := 0
	for i, cut := range append(cuts, len(in)) {
		got := c.Next(in[prev:cut], i == len(cuts))
		out = append(out, got...)
		prev = cut
	}
	return out
}

// TestChunkMaskerEverySplit cuts one occurrence of each form at every pair of
// offsets (three chunks): the released bytes equal masking the whole.
func TestChunkMaskerEverySplit(t *testing.T) {
	secret := "sk_live_51HabcdefXYZ"
	s := mustScrubber(t, secret)
	for _, form := range testkit.SecretForms(secret) {
		in := []byte("before " + form + " after")
		want := []byte("before " + strings.Repeat("*", len(form)) + " after")
		for a := 0; a <= len(in); a++ {
			for b := a; b <= len(in); b += 3 {
				if got := chunkAll(t, s, in, []int{a, b}); !bytes.Equal(got, want) {
					t.Fatalf("form %q cut at %d, %d: got %q, want %q", form, a, b, got, want)
				}
			}
		}
	}
}

// TestChunkMaskerHoldsOnlyATail shows a chunk that cannot start a secret is
// released whole at once, and a message's end releases everything.
func TestChunkMaskerHoldsOnlyATail(t *testing.T) {
	secret := "sk_live_51HabcdefXYZ"
	c := mustScrubber(t, secret).Chunks()
	long := bytes.Repeat([]byte("a"), 100)
	if got := c.Next(long, false); len(got) < len(long)-len(secret)*2 {
		t.Fatalf("released %d of %d bytes; at most a pattern's length may be held", len(got), len(long))
	} else if len(got) != len(long) {
		t.Fatalf("released %d of %d bytes; none of them can start a secret", len(got), len(long))
	}
	if got := c.Next([]byte("xyz"), true); !bytes.HasSuffix(got, []byte("xyz")) {
		t.Fatalf("final chunk released %q, want it to end with the chunk", got)
	}
	if got := c.Next([]byte("sk_live_"), false); len(got) != 0 {
		t.Fatalf("a possible secret start was released early: %q", got)
	}
	if got := c.Next([]byte("51HabcdefXYZ!"), true); string(got) != strings.Repeat("*", len(secret))+"!" {
		t.Fatalf("split secret released as %q", got)
	}
	var nilMasker *ChunkMasker
	if got := nilMasker.Next([]byte("x"), false); string(got) != "x" {
		t.Fatalf("nil ChunkMasker changed the chunk: %q", got)
	}
}

// FuzzChunkMasker checks that any cutting of any input releases exactly the
// input masked as a whole, and never a secret.
func FuzzChunkMasker(f *testing.F) {
	f.Add([]byte("before sk_live_51HabcdefXYZ after"), uint8(3), uint8(20))
	f.Add([]byte("sk_live_51Hsk_live_51HabcdefXYZ"), uint8(10), uint8(11))
	f.Add([]byte("c2tfbGl2ZV81MUhhYmNkZWZYWVo="), uint8(1), uint8(2))
	s := mustScrubber(f, "sk_live_51HabcdefXYZ")
	f.Fuzz(func(t *testing.T, in []byte, a, b uint8) {
		x, y := min(int(a), len(in)), min(int(b), len(in))
		if x > y {
			x, y = y, x
		}
		got := chunkAll(t, s, in, []int{x, y})
		if want := s.Bytes(in); !bytes.Equal(got, want) {
			t.Fatalf("cut at %d, %d: got %q, want %q", x, y, got, want)
		}
		if bytes.Contains(got, []byte("sk_live_51HabcdefXYZ")) {
			t.Fatalf("secret released: %q", got)
		}
	})
}
