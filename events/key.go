package events

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// MaxKeyBytes is the longest session key, in bytes of UTF-8.
const MaxKeyBytes = 256

// MaxPlainToken is the longest key that is its own subject token.
const MaxPlainToken = 64

// encodedPrefix starts every encoded token. It is outside the plain alphabet
// [A-Za-z0-9_-], so an encoded token never equals a plain one, and it is
// allowed both in NATS subjects and in KV keys.
const encodedPrefix = '='

var b64 = base64.RawURLEncoding

// Sentinel errors of key handling; match with errors.Is.
var (
	ErrEmptyKey   = errors.New("session key is empty")
	ErrKeyTooLong = fmt.Errorf("session key is longer than %d bytes", MaxKeyBytes)
	ErrKeyUTF8    = errors.New("session key is not valid UTF-8")
	ErrBadToken   = errors.New("not a lane token")
)

// ValidateKey reports whether key is a usable session key: non-empty, valid
// UTF-8, at most MaxKeyBytes bytes.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return ErrEmptyKey
	case len(key) > MaxKeyBytes:
		return ErrKeyTooLong
	case !utf8.ValidString(key):
		return ErrKeyUTF8
	}
	return nil
}

// isAlphabet reports whether s uses only [A-Za-z0-9_-].
func isAlphabet(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// isPlain reports whether s is a plain token: 1..MaxPlainToken characters of
// [A-Za-z0-9_-].
func isPlain(s string) bool {
	return s != "" && len(s) <= MaxPlainToken && isAlphabet(s)
}

// KeyToken returns the subject token of a session key. A key of only
// [A-Za-z0-9_-] and at most 64 characters is its own token, so
// `nats pub agent.in.alice …` addresses session "alice". Every other key
// becomes "=" followed by its unpadded base64url encoding: reversible, free of
// '.', '*', '>' and whitespace, and distinct from every plain token.
func KeyToken(key string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	if isPlain(key) {
		return key, nil
	}
	buf := make([]byte, 1+b64.EncodedLen(len(key)))
	buf[0] = encodedPrefix
	b64.Encode(buf[1:], []byte(key))
	return string(buf), nil
}

// TokenKey is the inverse of KeyToken. It accepts only canonical tokens, so
// each key has exactly one token and each token at most one key.
func TokenKey(token string) (string, error) {
	if isPlain(token) {
		return token, nil
	}
	// The base64 decoder skips CR and LF, so the alphabet is checked first.
	if len(token) < 2 || token[0] != encodedPrefix || !isAlphabet(token[1:]) {
		return "", fmt.Errorf("%w: %q", ErrBadToken, clip(token))
	}
	raw, err := b64.Strict().DecodeString(token[1:])
	if err != nil {
		return "", fmt.Errorf("%w: %q: %v", ErrBadToken, clip(token), err)
	}
	key := string(raw)
	if err := ValidateKey(key); err != nil {
		return "", fmt.Errorf("%w: %q: %w", ErrBadToken, clip(token), err)
	}
	if isPlain(key) {
		return "", fmt.Errorf("%w: %q encodes a plain key; use %q", ErrBadToken, clip(token), key)
	}
	return key, nil
}

// MaxDirName is the longest lane token a session's own directory (its
// workspace) is named by as it is: NAME_MAX, the longest file name of Linux
// and macOS file systems. A key of up to 190 bytes has a token that fits.
const MaxDirName = 255

// dirNamePrefix starts a digest directory name. It is in neither the plain
// alphabet nor the encoded one and starts no token, so a digest name never
// equals a token.
const dirNamePrefix = '+'

// dirReadable is the most bytes of the key a digest directory name shows.
const dirReadable = 48

// KeyDirName returns the name of a session key's own directory (its
// workspace under the workspace root): its lane token when that is at most
// MaxDirName bytes, as it always was; else "+", up to 48 bytes of the key
// (each byte outside [A-Za-z0-9_-] shown as '_'), "+" and the hex SHA-256
// of the whole key: 114 bytes at most. Different keys get different names
// (a token is the key's reversible encoding; a digest name starts with '+',
// which no token does, and names the key by its digest), and every name is
// a single path element: neither '/', NUL, "." nor "..".
func KeyDirName(key string) (string, error) {
	tok, err := KeyToken(key)
	if err != nil {
		return "", err
	}
	if len(tok) <= MaxDirName {
		return tok, nil
	}
	sum := sha256.Sum256([]byte(key))
	b := make([]byte, 0, 2+dirReadable+hex.EncodedLen(len(sum)))
	b = append(b, dirNamePrefix)
	for i := 0; i < len(key) && i < dirReadable; i++ {
		if c := key[i]; isAlphabet(key[i : i+1]) {
			b = append(b, c)
		} else {
			b = append(b, '_')
		}
	}
	b = append(b, dirNamePrefix)
	return string(hex.AppendEncode(b, sum[:])), nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// KeyInScope reports whether a scope of session-key prefixes and exact keys
// reaches key: key is one of keys, or starts with one of prefixes (a ""
// prefix reaches every key). It is the one rule behind a gateway token's
// sessions (gateway/auth) and the scope a listing carries to the admin
// service (admin.Scope).
func KeyInScope(key string, prefixes, keys []string) bool {
	if slices.Contains(keys, key) {
		return true
	}
	for _, p := range prefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}
