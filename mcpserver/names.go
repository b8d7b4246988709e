package mcpserver

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxNameLen is the longest tool name every model API accepts.
const MaxNameLen = 64

// suffixLen is the number of hex characters of a collision suffix.
const suffixLen = 8

// sanitize maps every character outside [A-Za-z0-9_-] to '_'.
func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

// baseName is the name of an entry before collisions are resolved:
// "<tool>__<operation>" for an operation, "<action>" for an action, mapped
// to [A-Za-z0-9_-].
func baseName(e *Entry) string {
	if e.Action != "" {
		return sanitize(e.Action)
	}
	return sanitize(e.Tool) + "__" + sanitize(e.Operation)
}

// identity names the entry uniquely and never changes for it: the
// connector FQN, tool and operation, or the action name.
func identity(e *Entry) string {
	if e.Action != "" {
		return "action\x00" + e.Action
	}
	return "operation\x00" + e.ConnectorFQN + "\x00" + e.Tool + "\x00" + e.Operation
}

// withSuffix returns name cut so that "_" and the identity's hash suffix
// fit in MaxNameLen.
func withSuffix(name, id string) string {
	sum := sha256.Sum256([]byte(id))
	suffix := "_" + hex.EncodeToString(sum[:])[:suffixLen]
	if len(name) > MaxNameLen-len(suffix) {
		name = name[:MaxNameLen-len(suffix)]
	}
	return name + suffix
}

// assignNames sets the Name of every entry: the base name when it is at
// most MaxNameLen characters and no other entry maps to it; otherwise the
// base name (cut to fit) plus "_" and 8 hex characters of the SHA-256 of
// the entry's identity. The suffix depends only on the entry, so a name
// never changes while the same entries are installed, whatever their
// order.
func assignNames(entries []*Entry) {
	count := map[string]int{}
	for _, e := range entries {
		count[strings.ToLower(baseName(e))]++
	}
	for _, e := range entries {
		n := baseName(e)
		if len(n) > MaxNameLen || count[strings.ToLower(n)] > 1 {
			n = withSuffix(n, identity(e))
		}
		e.Name = n
	}
}
