package events

import (
	"crypto/sha256"
	"encoding/hex"
)

// Fingerprint names a session in logs, spans and operator listings without
// its key: the first 12 hex digits of the key's SHA-256. The same key always
// has the same fingerprint, so an operator can find a session's log lines
// (publisher sessions prints both); the key itself, which may hold a user's
// identity, never reaches a log line.
func Fingerprint(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
}
