// Package redact masks the fleet's configured secrets (provider keys, auth
// profile tokens, NATS passwords and seeds, skill API keys) in text the
// worker produces, replacing each with the fixed Marker.
//
// What is masked, and what never is, is the package's one rule:
//
//   - Text the worker produces is masked before it leaves the worker or
//     reaches the model: model output (streamed or whole), tool results,
//     provider errors, hook replies, logs. A Masker masks one run's text;
//     a Stream masks text that arrives in pieces (streamed deltas); a
//     Redactor's Writer masks log lines.
//   - Text the sender supplied is never masked: its message, its tool
//     results, the session it imported, its history. Masking it would
//     tell the sender which of its words are secrets (an oracle: send a
//     word list, read it back). For the same reason a run does not mask a
//     secret its sender supplied (Redactor.Masker's supplied): the sender
//     knows it, and a model or a tool that repeats the sender's words must
//     show them whatever they are.
//
// The marker is fixed, never as long as the secret nor made of its ends, so
// a masked text says nothing about the secret but that one was there.
// Secrets shorter than MinLen are not masked (they would mask ordinary
// words); Add reports them.
//
// Masking guards against accidental leaks (a provider error body that
// echoes its key, a tool that prints a token). It cannot stop a sender who
// makes the worker compute a guess (a model told to decode it, a command
// that prints it) from seeing whether the result is masked: what keeps the
// secrets from a hostile sender is that neither the model nor the tools
// are given them.
//
// redact.go holds the Redactor (the secrets and the log writer) and the
// scan every masking shares; masker.go the Masker of a run and the Stream
// of its streamed text.
package redact

import (
	"encoding/json"
	"io"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// Marker replaces every secret masked. It is what provider.Secret prints.
const Marker = "[redacted]"

// MinLen is the shortest secret masked.
const MinLen = 8

// Redactor holds a set of secrets. The zero value masks nothing; it is safe
// for concurrent use, and Add may run while other goroutines mask.
type Redactor struct {
	mu  sync.Mutex // serialises Add
	set atomic.Pointer[secretSet]
}

// secretSet is an immutable set of secrets to look for.
type secretSet struct {
	needles []needle
	// forms are the forms of each secret (the secret, JSON-escaped,
	// URL-escaped), by secret index.
	forms  [][]string
	maxLen int // the longest needle
	// lag is how many bytes at the end of a growing text are held back
	// (maxLen-1, rounded up to lagStep); spaceFree, that no needle holds
	// whitespace, so a text may also go out up to its last whitespace.
	lag       int
	spaceFree bool
}

// lagStep rounds the hold-back of a growing text up.
const lagStep = 64

// needle is one form of a secret to find.
type needle struct {
	find   string
	secret int // index in forms
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
	next := &secretSet{}
	if s := r.set.Load(); s != nil {
		next.needles = slices.Clone(s.needles)
		next.forms = slices.Clone(s.forms)
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
		// The secret itself, and as it appears inside a JSON string
		// (encoding/json escapes quotes, backslashes, control characters
		// and <, >, &) or a URL (a password in nats://user:pass@host).
		forms := []string{s}
		if js, err := json.Marshal(s); err == nil {
			forms = append(forms, string(js[1:len(js)-1]))
		}
		forms = append(forms, url.QueryEscape(s), url.PathEscape(s))
		idx := len(next.forms)
		var kept []string
		for _, f := range forms {
			if !slices.ContainsFunc(next.needles, func(n needle) bool { return n.find == f }) {
				next.needles = append(next.needles, needle{find: f, secret: idx})
				kept = append(kept, f)
			}
		}
		if len(kept) > 0 {
			next.forms = append(next.forms, kept)
		}
	}
	next.spaceFree = true
	for _, n := range next.needles {
		next.maxLen = max(next.maxLen, len(n.find))
		if strings.ContainsAny(n.find, " \t\r\n") {
			next.spaceFree = false
		}
	}
	// The lag tells the longest secret's length only to the next 64.
	next.lag = (next.maxLen - 1 + lagStep - 1) / lagStep * lagStep
	r.set.Store(next)
	return tooShort
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

// String returns s with every secret replaced by Marker: for text no
// sender can read (logs, traces). A run's text goes through its Masker.
func (r *Redactor) String(s string) string {
	out, _ := r.load().scan(s, true, nil)
	return out
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
	out, _ := w.r.load().scan(string(p), true, nil)
	if _, err := io.WriteString(w.w, out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// scan masks s: every occurrence of a needle whose secret masks reports
// true (nil: every secret) is replaced by Marker, the leftmost first and,
// of those starting at one place, the longest. A nil set masks nothing.
//
// Unless final is set, s is the start of a longer text: scan then stops
// where cut says (at most lag bytes before its end, where no needle that s
// ends too soon to tell may begin), and returns how much of s it decided;
// a scan of the rest joined to what follows goes on from there.
// What it returned is then exactly what a scan of the whole text returns
// for that part: a needle that may still complete is never cut, nor shown.
func (s *secretSet) scan(text string, final bool, masks func(secret int) bool) (out string, n int) {
	if s == nil {
		return text, len(text)
	}
	// next[k] is the position of needle k's next occurrence at or after
	// the scan's position: -1 when not searched yet, -2 when it has none
	// (or its secret is not masked).
	var buf [64]int
	next := buf[:0]
	if len(s.needles) > len(buf) {
		next = make([]int, 0, len(s.needles))
	}
	for range s.needles {
		next = append(next, -1)
	}
	var b strings.Builder
	i := 0
	for {
		p, l := -1, 0
		for k, nd := range s.needles {
			if next[k] == -2 {
				continue
			}
			if next[k] < i {
				j := strings.Index(text[i:], nd.find)
				if j < 0 || (masks != nil && !masks(nd.secret)) {
					next[k] = -2
					continue
				}
				next[k] = i + j
			}
			if p < 0 || next[k] < p || (next[k] == p && len(nd.find) > l) {
				p, l = next[k], len(nd.find)
			}
		}
		limit := len(text)
		if !final {
			limit = s.cut(text, i)
		}
		if p < 0 || p >= limit {
			if i == 0 {
				return text[:limit], limit // nothing masked: no copy
			}
			b.WriteString(text[i:limit])
			return b.String(), limit
		}
		if b.Cap() == 0 {
			b.Grow(len(text))
		}
		b.WriteString(text[i:p])
		b.WriteString(Marker)
		i = p + l
	}
}

// cut returns how much of text may go out before the rest of it is known
// (at least i): everything before its last whitespace when no needle holds
// whitespace (no needle then spans it), and everything but the last lag
// bytes (every needle that begins before them ends within text), backed
// off to a rune's start. It depends on the text and on the longest
// needle's length, never on what the needles are: a hold-back that ended
// where the text stops being a secret's prefix would tell a sender who
// streams guesses, by where the deltas split, how much of a secret each
// guess got right.
func (s *secretSet) cut(text string, i int) int {
	c := len(text) - s.lag
	if s.spaceFree {
		if k := strings.LastIndexAny(text[max(i, c, 0):], " \t\r\n"); k >= 0 {
			c = max(i, c, 0) + k + 1
		}
	}
	for c > i && c < len(text) && !utf8.RuneStart(text[c]) {
		c--
	}
	return max(c, i)
}
