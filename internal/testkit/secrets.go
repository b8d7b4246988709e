package testkit

import "math/rand"

// TokenAlphabet is the alphabet of Secrets: a token's characters, with some
// that base64 and URL escaping change.
const TokenAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_./+=~"

// Secrets returns n distinct secrets of length bytes from TokenAlphabet,
// the same for the same seed, none equal to one of exclude.
func Secrets(n, length int, seed int64, exclude ...string) []string {
	rng := rand.New(rand.NewSource(seed))
	seen := map[string]bool{}
	for _, s := range exclude {
		seen[s] = true
	}
	out := make([]string, 0, n)
	for len(out) < n {
		b := make([]byte, length)
		for i := range b {
			b[i] = TokenAlphabet[rng.Intn(len(TokenAlphabet))]
		}
		if s := string(b); !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
