//go:build !amd64

package multimatch

// pairAsm is false: indexPair runs the portable loop.
var pairAsm = false

func indexPairBlocks(*byte, int, byte, byte, byte, byte) int { panic("unreachable") }
