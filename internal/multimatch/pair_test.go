package multimatch

import (
	"math/rand"
	"testing"
)

// naiveIndexPair is indexPair's definition.
func naiveIndexPair(b []byte, x1, x2, y1, y2 byte) int {
	for i := 0; i+1 < len(b); i++ {
		if (b[i] == x1 || b[i] == x2) && (b[i+1] == y1 || b[i+1] == y2) {
			return i
		}
	}
	return -1
}

// TestIndexPairEveryPosition places one pair at every position of buffers
// of every length up to 200 (the kernel's blocks, its two-block loop and
// the scalar tail), with each of the allowed bytes, and checks that a lone
// first or second byte is not a match.
func TestIndexPairEveryPosition(t *testing.T) {
	if !pairAsm {
		t.Log("no AVX2 here: this checks the portable loop only")
	}
	const x1, x2, y1, y2 = 'a', 'b', 'y', 'z'
	for n := 0; n <= 200; n++ {
		buf := make([]byte, n+1) // a byte past the slice catches a read beyond it
		sub := buf[:n]
		for i := range sub {
			sub[i] = '.'
		}
		buf[n] = y1
		if n > 0 {
			sub[n-1] = x1 // a first byte whose neighbour is past the end
		}
		if got := indexPair(sub, x1, x2, y1, y2); got != -1 {
			t.Fatalf("len %d, no pair: got %d, want -1 (read past the end?)", n, got)
		}
		if n > 0 {
			sub[n-1] = '.'
		}
		for i := 0; i+1 < n; i++ {
			for _, p := range [][2]byte{{x1, y1}, {x2, y2}, {x1, y2}, {x2, y1}} {
				sub[i], sub[i+1] = p[0], p[1]
				if got := indexPair(sub, x1, x2, y1, y2); got != i {
					t.Fatalf("len %d, pair %q at %d: got %d", n, p[:], i, got)
				}
			}
			sub[i], sub[i+1] = x1, '.'
			if got := indexPair(sub, x1, x2, y1, y2); got != -1 {
				t.Fatalf("len %d, lone first byte at %d: got %d, want -1", n, i, got)
			}
			sub[i], sub[i+1] = '.', y1
			if got := indexPair(sub, x1, x2, y1, y2); got != -1 {
				t.Fatalf("len %d, lone second byte at %d: got %d, want -1", n, i+1, got)
			}
			sub[i+1] = '.'
		}
	}
}

// TestIndexPairRandom compares with the definition on random data over a
// small alphabet, so pairs are frequent, from every alignment, with the
// kernel and with the portable loop alone.
func TestIndexPairRandom(t *testing.T) {
	asm := pairAsm
	defer func() { pairAsm = asm }()
	for _, useAsm := range []bool{asm, false} {
		pairAsm = useAsm
		rng := rand.New(rand.NewSource(1))
		buf := make([]byte, 4096)
		for round := 0; round < 2000; round++ {
			k := 2 + rng.Intn(40)
			for i := range buf {
				buf[i] = byte(rng.Intn(k))
			}
			off, n := rng.Intn(64), rng.Intn(len(buf)-64)
			b := buf[off : off+n]
			x1, x2, y1, y2 := byte(rng.Intn(k)), byte(rng.Intn(k)), byte(rng.Intn(k)), byte(rng.Intn(k))
			if got, want := indexPair(b, x1, x2, y1, y2), naiveIndexPair(b, x1, x2, y1, y2); got != want {
				t.Fatalf("kernel %v, round %d: got %d, want %d", useAsm, round, got, want)
			}
		}
	}
}

func FuzzIndexPair(f *testing.F) {
	f.Add([]byte("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxab"), byte('a'), byte('a'), byte('b'), byte('c'))
	f.Fuzz(func(t *testing.T, b []byte, x1, x2, y1, y2 byte) {
		if got, want := indexPair(b, x1, x2, y1, y2), naiveIndexPair(b, x1, x2, y1, y2); got != want {
			t.Fatalf("indexPair = %d, want %d", got, want)
		}
	})
}

func BenchmarkIndexPair(b *testing.B) {
	buf := make([]byte, 256<<10)
	rand.New(rand.NewSource(1)).Read(buf)
	for i := 0; i+1 < len(buf); i++ {
		if buf[i] == '9' && (buf[i+1] == 'a' || buf[i+1] == 'r') {
			buf[i+1] = 0
		}
	}
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if indexPair(buf, '9', '9', 'a', 'r') >= 0 {
			b.Fatal("found")
		}
	}
}
