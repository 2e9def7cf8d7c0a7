// Package redact masks the fleet's configured secrets (provider keys, auth
// profile tokens, NATS passwords and seeds) in bytes on their way out of a
// process: every payload a worker publishes (events, transcript records,
// dead letters) and every log line pass through one Redactor, so a provider
// error body that echoes its key, a tool that prints a token or a URL with a
// password in it never carries the secret further.
//
// A secret is masked in place, keeping its byte length, so masking a
// msgpack or JSON payload never breaks its framing: the first 3 and last 4
// bytes stay and the rest become '*' ("sk-****…****cdef"), enough to tell
// keys apart in a log and useless to anyone who reads it. Secrets shorter
// than MinLen are not masked (they would mask ordinary words); Add reports
// them.
package redact

import (
	"bytes"
	"encoding/json"
	"io"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// MinLen is the shortest secret masked.
const MinLen = 8

// keep is how many bytes of a long secret stay visible at each end.
const (
	keepHead = 3
	keepTail = 4
	// longFrom is the length from which the ends stay visible.
	longFrom = 16
)

// Redactor masks a set of secrets. The zero value masks nothing; it is safe
// for concurrent use, and Add may run while other goroutines mask.
type Redactor struct {
	mu  sync.Mutex // serialises Add
	set atomic.Pointer[secretSet]
}

// secretSet is an immutable set of secrets to look for, longest first so a
// secret that contains another is masked whole.
type secretSet struct {
	needles []needle
}

// needle is one byte sequence to find and the mask that replaces it.
type needle struct {
	find, mask []byte
}

// New returns a Redactor of the given secrets.
func New(secrets ...string) *Redactor {
	r := &Redactor{}
	r.Add(secrets...)
	return r
}

// Add adds secrets to the set and returns those too short to be masked
// (non-empty and shorter than MinLen), for the caller to warn about.
// Surrounding spaces are trimmed; duplicates and empty strings are ignored.
func (r *Redactor) Add(secrets ...string) (tooShort []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var old []needle
	if s := r.set.Load(); s != nil {
		old = s.needles
	}
	needles := slices.Clone(old)
	// Every form of a secret is masked like the secret itself: its ends
	// stay only when the secret is long enough.
	var long bool
	add := func(find []byte) {
		for _, n := range needles {
			if bytes.Equal(n.find, find) {
				return
			}
		}
		m := bytes.Repeat([]byte{'*'}, len(find))
		if long {
			m = Mask(find)
		}
		needles = append(needles, needle{find: find, mask: m})
	}
	for _, s := range secrets {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if len(s) < MinLen {
			tooShort = append(tooShort, s)
			continue
		}
		long = len(s) >= longFrom
		add([]byte(s))
		// The same secret inside a JSON string (encoding/json escapes
		// quotes, backslashes, control characters and <, >, &) or a URL
		// (a password in nats://user:pass@host).
		if js, err := json.Marshal(s); err == nil {
			add(js[1 : len(js)-1])
		}
		add([]byte(url.QueryEscape(s)))
		add([]byte(url.PathEscape(s)))
	}
	slices.SortStableFunc(needles, func(a, b needle) int { return len(b.find) - len(a.find) })
	r.set.Store(&secretSet{needles: needles})
	return tooShort
}

// Len returns how many byte sequences the Redactor looks for.
func (r *Redactor) Len() int {
	if r == nil {
		return 0
	}
	if s := r.set.Load(); s != nil {
		return len(s.needles)
	}
	return 0
}

// Bytes returns b with every secret masked. When b holds none it returns b
// itself (no copy); otherwise a masked copy, so the caller's buffer is never
// changed.
func (r *Redactor) Bytes(b []byte) []byte {
	s := r.load()
	if s == nil {
		return b
	}
	var out []byte
	for _, n := range s.needles {
		src := b
		if out != nil {
			src = out
		}
		i := bytes.Index(src, n.find)
		if i < 0 {
			continue
		}
		if out == nil {
			out = slices.Clone(b)
		}
		for i >= 0 {
			copy(out[i:], n.mask)
			j := bytes.Index(out[i+len(n.find):], n.find)
			if j < 0 {
				break
			}
			i += len(n.find) + j
		}
	}
	if out == nil {
		return b
	}
	return out
}

// String returns s with every secret masked.
func (r *Redactor) String(s string) string {
	set := r.load()
	if set == nil {
		return s
	}
	for _, n := range set.needles {
		if strings.Contains(s, string(n.find)) {
			return string(r.Bytes([]byte(s)))
		}
	}
	return s
}

// Contains reports whether b holds a secret.
func (r *Redactor) Contains(b []byte) bool {
	set := r.load()
	if set == nil {
		return false
	}
	for _, n := range set.needles {
		if bytes.Contains(b, n.find) {
			return true
		}
	}
	return false
}

func (r *Redactor) load() *secretSet {
	if r == nil {
		return nil
	}
	s := r.set.Load()
	if s == nil || len(s.needles) == 0 {
		return nil
	}
	return s
}

// Writer returns a writer that masks what it writes to w. Every Write is
// masked on its own, so a secret split across two writes is not found: use
// it where each write is a whole record, as zerolog writes each log line.
func (r *Redactor) Writer(w io.Writer) io.Writer { return &writer{r: r, w: w} }

type writer struct {
	r *Redactor
	w io.Writer
}

func (w *writer) Write(p []byte) (int, error) {
	q := w.r.Bytes(p)
	n, err := w.w.Write(q)
	if n > len(p) {
		n = len(p)
	}
	return n, err
}

// Mask returns the mask of a secret: as long as the secret, its first 3 and
// last 4 bytes kept when it has at least 16, '*' everywhere else.
func Mask(secret []byte) []byte {
	m := bytes.Repeat([]byte{'*'}, len(secret))
	if len(secret) >= longFrom {
		copy(m, secret[:keepHead])
		copy(m[len(m)-keepTail:], secret[len(secret)-keepTail:])
	}
	return m
}

// Fingerprint is a short name of a secret for messages that mention one
// ("sk-…cdef"): its first 3 and last 4 characters, or "…" alone for a
// secret shorter than 16 bytes.
func Fingerprint(secret string) string {
	if len(secret) < longFrom {
		return "…"
	}
	return secret[:keepHead] + "…" + secret[len(secret)-keepTail:]
}
