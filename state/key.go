package state

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/aileron-dev/aileron-proxy/internal/atomicfile"
)

// KeySize is the length of a state key in bytes (AES-256).
const KeySize = 32

// sealVersion is the first byte of a sealed value: the format (AES-256-GCM,
// a 12-byte random nonce, then the ciphertext and its tag).
const sealVersion = 1

// keyCheckID and keyCheckPlain make the check value a store keeps to tell,
// at start, whether it is given the key that sealed its records.
const (
	keyCheckID    = "aileron-proxy state key check"
	keyCheckPlain = "aileron-proxy state key check v1"
)

// ErrWrongKey is returned when the state key does not open what the store
// sealed: the key file was replaced, lost and re-created, or belongs to
// another store.
var ErrWrongKey = errors.New("the state key does not open what this store sealed; the sessions cannot be recovered without the key that sealed them")

// Key is the state key: it seals what the store must not hold in plaintext
// (a session CA's private key) with AES-256-GCM. A Key never prints its
// bytes.
type Key struct {
	aead cipher.AEAD
}

// NewKey returns a Key from KeySize raw bytes.
func NewKey(raw []byte) (*Key, error) {
	if len(raw) != KeySize {
		return nil, fmt.Errorf("a state key is %d bytes, not %d", KeySize, len(raw))
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, fmt.Errorf("making the state cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("making the state cipher: %w", err)
	}
	return &Key{aead: aead}, nil
}

// String hides the key.
func (k *Key) String() string { return "[REDACTED]" }

// GoString hides the key.
func (k *Key) GoString() string { return "[REDACTED]" }

// Seal encrypts plaintext for the record id: id is the additional data, so
// the sealed value opens only as the same record's (a sealed key copied to
// another session's row does not open). Each call draws a fresh nonce.
func (k *Key) Seal(id string, plaintext []byte) ([]byte, error) {
	ns := k.aead.NonceSize()
	out := make([]byte, 1+ns, 1+ns+len(plaintext)+k.aead.Overhead())
	out[0] = sealVersion
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, fmt.Errorf("drawing a nonce: %w", err)
	}
	return k.aead.Seal(out, out[1:1+ns], plaintext, []byte(id)), nil
}

// Open decrypts what Seal sealed for the record id. A value sealed under
// another key, for another record, or altered gives an error wrapping
// ErrWrongKey (the error says nothing of the key or the plaintext).
func (k *Key) Open(id string, sealed []byte) ([]byte, error) {
	ns := k.aead.NonceSize()
	if len(sealed) < 1+ns+k.aead.Overhead() || sealed[0] != sealVersion {
		return nil, fmt.Errorf("opening the sealed value of %q: not a sealed value of this version", id)
	}
	pt, err := k.aead.Open(nil, sealed[1:1+ns], sealed[1+ns:], []byte(id))
	if err != nil {
		return nil, fmt.Errorf("opening the sealed value of %q: %w", id, ErrWrongKey)
	}
	return pt, nil
}

// checkValue seals a fixed text: a store keeps it beside what it seals so
// that a wrong key is refused at start, before any session is read.
func (k *Key) checkValue() ([]byte, error) {
	return k.Seal(keyCheckID, []byte(keyCheckPlain))
}

// verifyCheck reports (as an error wrapping ErrWrongKey) whether check was
// made by this key.
func (k *Key) verifyCheck(check []byte) error {
	pt, err := k.Open(keyCheckID, check)
	if err != nil || !bytes.Equal(pt, []byte(keyCheckPlain)) {
		return ErrWrongKey
	}
	return nil
}

// ReadKeyFile reads a state key from path: KeySize raw bytes, or their
// standard base64 encoding (as `openssl rand -base64 32` prints it; a
// trailing newline is fine).
func ReadKeyFile(path string) (*Key, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading the state key: %s does not exist; create one with `openssl rand -base64 %d > %s` and give every replica the same file", path, KeySize, path)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the state key: %w", err)
	}
	raw := data
	if len(data) != KeySize {
		dec, derr := base64.StdEncoding.DecodeString(string(bytes.TrimSpace(data)))
		if derr != nil || len(dec) != KeySize {
			return nil, fmt.Errorf("reading the state key %s: it holds neither %d raw bytes nor their base64; create one with `openssl rand -base64 %d`", path, KeySize, KeySize)
		}
		raw = dec
	}
	return NewKey(raw)
}

// loadOrCreateKey reads the key at path, or, when it does not exist and
// create is true, writes a new random one there (0600, atomically). created
// reports whether it made the key.
func loadOrCreateKey(path string, create bool) (k *Key, created bool, err error) {
	if _, err := os.Stat(path); err == nil || !errors.Is(err, fs.ErrNotExist) || !create {
		k, err := ReadKeyFile(path)
		return k, false, err
	}
	raw := make([]byte, KeySize)
	if _, err := rand.Read(raw); err != nil {
		return nil, false, fmt.Errorf("drawing a state key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, fmt.Errorf("creating the state key's directory: %w", err)
	}
	if err := atomicfile.WriteFile(path, raw, 0o600); err != nil {
		return nil, false, fmt.Errorf("writing the state key %s: %w", path, err)
	}
	k, err = NewKey(raw)
	return k, true, err
}

// warnLooseKey logs a warning when the key file at path may be read by
// others than its owner (a Kubernetes Secret volume without defaultMode
// 0400, a file made under a loose umask). It is not refused: the
// permissions are the operator's, and the key is still needed.
func warnLooseKey(log *zap.Logger, path string) {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm()&0o077 == 0 {
		return
	}
	log.Warn("the state key file is readable by others than its owner; make it 0600 (or defaultMode 0400 for a Kubernetes Secret)",
		zap.String("path", path), zap.String("mode", fi.Mode().Perm().String()))
}
