package redact

import "sync"

// Masker masks the text one run produces: every secret of its Redactor
// becomes Marker, except the secrets the run's sender supplied. It is safe
// for concurrent use.
type Masker struct {
	set      *secretSet // the Redactor's secrets when the Masker was made
	supplied func(text string) bool

	mu     sync.Mutex
	masked map[int]bool // by secret: whether it is masked (asked once)
}

// Masker returns a Masker of the Redactor's secrets for one run. supplied
// reports whether the run's sender supplied a text (it occurs in the
// sender's message, its tool results, the session's history); it is asked
// only about the forms of secrets found in the run's text, once each, and
// a secret the sender supplied in any form is not masked. nil: the sender
// supplied none.
func (r *Redactor) Masker(supplied func(text string) bool) *Masker {
	return &Masker{set: r.load(), supplied: supplied}
}

// masks reports whether secret k is masked.
func (m *Masker) masks(k int) bool {
	if m.supplied == nil {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, ok := m.masked[k]; ok {
		return v
	}
	v := true
	for _, f := range m.set.forms[k] {
		if m.supplied(f) {
			v = false
			break
		}
	}
	if m.masked == nil {
		m.masked = map[int]bool{}
	}
	m.masked[k] = v
	return v
}

// Refresh tells the Masker that the sender supplied more (a steered
// message): the secrets it masked are asked about again.
func (m *Masker) Refresh() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, v := range m.masked {
		if v {
			delete(m.masked, k)
		}
	}
}

// String returns s masked. s itself comes back when it holds no secret.
func (m *Masker) String(s string) string {
	out, _ := m.set.scan(s, true, m.masks)
	return out
}

// Partial returns s, the text so far of an output still growing (a tool's
// partial result), masked and without its end when that end may be the
// start of a secret: no partial text shows a secret's first bytes.
func (m *Masker) Partial(s string) string {
	out, _ := m.set.scan(s, false, m.masks)
	return out
}

// Value returns v with its strings masked: v itself, a string, or maps and
// slices of them (decoded JSON: tool arguments, a result's details), keys
// included. What holds no secret is returned as it is; what does is
// copied, never changed in place.
func (m *Masker) Value(v any) any {
	out, _ := m.value(v)
	return out
}

func (m *Masker) value(v any) (any, bool) {
	var (
		out     any
		changed bool
	)
	switch x := v.(type) {
	case string:
		s := m.String(x)
		return s, s != x
	case map[string]any:
		out, changed = maskMap(x, m.String, m.value)
	case []any:
		out, changed = maskSlice(x, m.value)
	case []string:
		out, changed = maskSlice(x, m.changedString)
	case map[string]string:
		out, changed = maskMap(x, m.String, m.changedString)
	}
	if !changed {
		return v, false
	}
	return out, true
}

// changedString is String, and whether it changed s.
func (m *Masker) changedString(s string) (string, bool) {
	out := m.String(s)
	return out, out != s
}

// maskMap masks a map's keys with key and its values with val (key
// first): the map itself while nothing changes, a copy from the first
// change on.
func maskMap[V any](x map[string]V, key func(string) string, val func(V) (V, bool)) (map[string]V, bool) {
	var out map[string]V
	for k, e := range x {
		mk := key(k)
		me, changed := val(e)
		if (changed || mk != k) && out == nil {
			out = make(map[string]V, len(x))
			for k2, e2 := range x {
				out[k2] = e2
			}
		}
		if out != nil {
			if mk != k {
				delete(out, k)
			}
			out[mk] = me
		}
	}
	return out, out != nil
}

// maskSlice masks a slice's elements with val: the slice itself while
// nothing changes, a copy from the first change on.
func maskSlice[V any](x []V, val func(V) (V, bool)) ([]V, bool) {
	var out []V
	for i, e := range x {
		me, changed := val(e)
		if changed && out == nil {
			out = append([]V(nil), x...)
		}
		if out != nil {
			out[i] = me
		}
	}
	return out, out != nil
}

// Stream returns a Stream masking one text that arrives in pieces.
func (m *Masker) Stream() *Stream { return &Stream{m: m} }

// Stream masks a text that arrives in pieces (a model's streamed deltas).
// Each Write returns the part of the masked text that can go out now: it
// holds back at most the longest secret's length minus one byte, the end
// that may still turn out to be a secret's start, until the next piece
// tells; Flush returns what is held at the end of the text. So no piece
// returned ever holds a secret or a secret's first bytes, and the pieces
// joined are exactly the Masker's String of the whole text. A Stream is
// not safe for concurrent use.
type Stream struct {
	m    *Masker
	held string
}

// Write takes the next piece of the text and returns the masked text that
// can go out now ("" when everything is held back).
func (s *Stream) Write(piece string) string {
	text := s.held + piece
	out, n := s.m.set.scan(text, false, s.m.masks)
	s.held = text[n:]
	return out
}

// Flush ends the text: it returns what was held back, masked.
func (s *Stream) Flush() string {
	out, _ := s.m.set.scan(s.held, true, s.m.masks)
	s.held = ""
	return out
}
