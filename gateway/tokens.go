package gateway

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/gateway/auth"
)

// A token file lists the gateway's bearer tokens, stored hashed:
//
//	{"tokens": [
//	  {"name": "acme-app", "hash": "sha256:9f86d0…", "role": "sender",
//	   "prefixes": ["acme:"], "models": ["scripted/echo"],
//	   "rate": 600, "burst": 100, "concurrency": 16}
//	]}
//
// A token is 32 random bytes (43 characters of base64url after "lft_"):
// its SHA-256 cannot be reversed or guessed, so a salted slow hash would
// add nothing. `gateway token new` prints a fresh token and its entry.

// TokenPrefix starts every token the gateway makes, so a secret scanner
// recognises one.
const TokenPrefix = "lft_"

// Token file bounds.
const (
	maxTokenFileBytes = 4 << 20
	maxTokens         = 10000
	maxTokenLen       = 512 // a presented token longer than this is refused unhashed
	maxNameLen        = 128
)

// TokenEntry is one token of the file.
type TokenEntry struct {
	// Name names the token in logs and metrics (never the token).
	Name string `json:"name"`
	// Hash is "sha256:" and the hex SHA-256 of the token.
	Hash string `json:"hash"`
	// Role is sender, viewer or admin.
	Role auth.Role `json:"role"`
	// Prefixes are the session-key prefixes the token reaches ("" reaches
	// every session); Sessions single keys besides them. A token with
	// neither reaches no session.
	Prefixes []string `json:"prefixes,omitempty"`
	Sessions []string `json:"sessions,omitempty"`
	// Models, when set, are the only models (refs or aliases) the token
	// may name.
	Models []string `json:"models,omitempty"`
	// Rate is the requests per minute the token may make on one gateway
	// (0 = no limit), Burst how many at once above that rate (default a
	// tenth of Rate, at least 1).
	Rate  int `json:"rate,omitempty"`
	Burst int `json:"burst,omitempty"`
	// Concurrency is how many requests (open streams included) the token
	// may have in flight on one gateway at once (0 = no limit).
	Concurrency int `json:"concurrency,omitempty"`
}

// tokenFile is the file's JSON.
type tokenFile struct {
	Tokens []TokenEntry `json:"tokens"`
}

// Tokens are a loaded token file.
type Tokens struct {
	entries []tokenEntry
	// bySum indexes entries by their hash: a request's token is found
	// with one map read, whatever the file's size (the map is keyed by a
	// SHA-256 of the presented token, whose timing tells nothing of a
	// stored one).
	bySum map[[sha256.Size]byte]int
}

type tokenEntry struct {
	TokenEntry
	sum       [sha256.Size]byte
	principal *auth.Principal
}

// LoadTokens reads a token file.
func LoadTokens(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gateway: token file: %w", err)
	}
	defer f.Close()
	t, err := ParseTokens(io.LimitReader(f, maxTokenFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("gateway: token file %s: %w", path, err)
	}
	return t, nil
}

// ParseTokens reads a token file's JSON from r.
func ParseTokens(r io.Reader) (*Tokens, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxTokenFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxTokenFileBytes {
		return nil, fmt.Errorf("larger than %d bytes", maxTokenFileBytes)
	}
	var tf tokenFile
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tf); err != nil {
		return nil, fmt.Errorf("not a token file: %w", err)
	}
	if len(tf.Tokens) == 0 {
		return nil, errors.New("no tokens: without tokens, give no token file (the gateway then serves loopback clients only)")
	}
	if len(tf.Tokens) > maxTokens {
		return nil, fmt.Errorf("%d tokens, more than %d", len(tf.Tokens), maxTokens)
	}
	t := &Tokens{bySum: map[[sha256.Size]byte]int{}}
	names := map[string]bool{}
	for i, e := range tf.Tokens {
		te, err := checkEntry(e)
		if err != nil {
			return nil, fmt.Errorf("token %d (%q): %w", i+1, e.Name, err)
		}
		if names[e.Name] {
			return nil, fmt.Errorf("token %d: name %q appears twice", i+1, e.Name)
		}
		if _, dup := t.bySum[te.sum]; dup {
			return nil, fmt.Errorf("token %d (%q): the same token as an earlier one", i+1, e.Name)
		}
		names[e.Name], t.bySum[te.sum] = true, len(t.entries)
		t.entries = append(t.entries, te)
	}
	return t, nil
}

// checkEntry validates e and decodes its hash.
func checkEntry(e TokenEntry) (tokenEntry, error) {
	te := tokenEntry{TokenEntry: e}
	if e.Name == "" || len(e.Name) > maxNameLen || strings.ContainsFunc(e.Name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return te, fmt.Errorf("name must be 1 to %d printable characters", maxNameLen)
	}
	hexSum, ok := strings.CutPrefix(e.Hash, "sha256:")
	if !ok {
		return te, errors.New(`hash must be "sha256:" and 64 hex digits (gateway token new prints one)`)
	}
	raw, err := hex.DecodeString(hexSum)
	if err != nil || len(raw) != sha256.Size {
		return te, errors.New(`hash must be "sha256:" and 64 hex digits`)
	}
	copy(te.sum[:], raw)
	switch e.Role {
	case auth.Sender, auth.Viewer, auth.Admin:
	default:
		return te, fmt.Errorf("role must be sender, viewer or admin, not %q", e.Role)
	}
	for _, k := range e.Sessions {
		if err := events.ValidateKey(k); err != nil {
			return te, fmt.Errorf("session %q: %w", k, err)
		}
	}
	if e.Rate < 0 || e.Burst < 0 || e.Concurrency < 0 {
		return te, errors.New("rate, burst and concurrency must not be negative")
	}
	te.principal = &auth.Principal{Name: e.Name, Role: e.Role, Prefixes: e.Prefixes, Sessions: e.Sessions, Models: e.Models}
	return te, nil
}

// lookup returns the entry of token, or nil: one hash and one map read
// per request (it compared every entry's hash, 10,000 for a full file).
func (t *Tokens) lookup(token string) *tokenEntry {
	if t == nil || token == "" || len(token) > maxTokenLen {
		return nil
	}
	i, ok := t.bySum[sha256.Sum256([]byte(token))]
	if !ok {
		return nil
	}
	return &t.entries[i]
}

// NewToken returns a fresh random token and its hash as a token file
// stores it.
func NewToken() (token, hash string) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	token = TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return token, HashToken(token)
}

// HashToken returns the hash a token file stores for token.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}
