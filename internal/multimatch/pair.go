package multimatch

// indexPair returns the smallest i with b[i] one of x1, x2 and b[i+1] one
// of y1, y2, or -1. Anchored search uses it for an anchor whose neighbour
// is one of at most two bytes: on binary data an anchor byte alone occurs
// every 256 bytes, and restarting bytes.IndexByte at each occurrence cost
// more than the search; a byte and its neighbour together occur about every
// 32 KiB.
func indexPair(b []byte, x1, x2, y1, y2 byte) int {
	i := 0
	if pairAsm && len(b) > 32 {
		n := (len(b) - 1) &^ 31 // whole 32-byte blocks; b[n] exists for the last neighbour
		if j := indexPairBlocks(&b[0], n, x1, x2, y1, y2); j >= 0 {
			return j
		}
		i = n
	}
	for ; i+1 < len(b); i++ {
		if c := b[i]; c == x1 || c == x2 {
			if d := b[i+1]; d == y1 || d == y2 {
				return i
			}
		}
	}
	return -1
}
