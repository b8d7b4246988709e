package multimatch

import "golang.org/x/sys/cpu"

// pairAsm reports whether indexPairBlocks is the AVX2 kernel.
var pairAsm = cpu.X86.HasAVX2

// indexPairBlocks is indexPair over positions [0, n) of the n+1 bytes at
// p, with n a multiple of 32; it returns -1 when none matches.
//
//go:noescape
func indexPairBlocks(p *byte, n int, x1, x2, y1, y2 byte) int
