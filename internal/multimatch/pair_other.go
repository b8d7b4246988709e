//go:build !amd64

package multimatch

const pairAsm = false

func indexPairBlocks(*byte, int, byte, byte, byte, byte) int { panic("unreachable") }
