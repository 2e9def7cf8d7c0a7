// Package wirecache keeps, per session, the wire messages of the session's
// last request to a model and their JSON, so that the next request of a
// long session encodes only the messages that are new: a turn's encoding
// cost does not grow with the session's length. It is the one home of
// that policy for the adapters that send the whole history every turn
// (Chat Completions, Responses, Anthropic Messages, Gemini); each adapter brings its wire
// message type M, the comparison that proves two of them encode the same,
// and what it keeps per history message (C).
//
// Nothing is assumed about what changed. A message of the history that is
// the same as one of the last request's (message.Snapshot: its fields,
// blocks and maps), for the same model, may take the wire form and JSON
// that one got (Convs); every other wire message is compared with the
// cached one it lines up with, field by field, and only an equal message
// reuses the cached JSON. So a body is byte for byte what json.Marshal
// makes of it whatever happened to the history (a compaction, a rollback,
// a cut tool result, another model's turn, the history limit dropping the
// oldest turns, a message changed in place). Sessions are dropped least
// recently used first when the kept bytes exceed the budget; one session
// is in use by one request at a time (a concurrent request of the same
// session encodes everything).
package wirecache

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/lanefleet/lanefleet/internal/bytelru"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// BytesDefault is the default budget of an adapter's cache.
const BytesDefault = 16 << 20

// Cache keeps the last request of the sessions of one adapter. A nil
// *Cache keeps nothing: Take returns nil and Encode marshals everything.
type Cache[M, C any] struct {
	mu       sync.Mutex
	sessions *bytelru.Cache[*Session[M, C]]
	equal    func(a, b *M) bool
	// Reused counts the messages whose JSON was reused (tests).
	Reused atomic.Int64
}

// New returns a cache of at most maxBytes; equal(a, b) must report
// whether json.Marshal makes the same bytes of a and b (it is the proof
// the cache reuses JSON on).
func New[M, C any](maxBytes int, equal func(a, b *M) bool) *Cache[M, C] {
	return &Cache[M, C]{sessions: bytelru.New[*Session[M, C]](maxBytes), equal: equal}
}

// Session is one session's last request.
type Session[M, C any] struct {
	id   string
	msgs []M
	enc  [][]byte // enc[i] is the JSON of msgs[i]
	// spareMsgs and spareEnc are the arrays of the request before, which
	// the next request builds into (two requests' arrays per session, no
	// new ones per request).
	spareMsgs []M
	spareEnc  [][]byte
	convs     *Convs[C]
	size      int // what the cache counts it for, besides its id and bytelru.EntryOverhead
}

// Convs are what the messages of a request (as the model gets them,
// before they become wire messages) became on the wire, kept to take a
// message's wire form and JSON from the last request when it is the same
// message for the same model.
type Convs[C any] struct {
	key string            // what the forms depend on besides the messages (the model)
	src message.Snapshots // of the request's messages
	// Conv[i] is what the i-th of them became.
	Conv []C
	// Hint[j] is the message of the last request that the request's j-th
	// wire message repeats, -1 when not known.
	Hint []int
}

// Key names what a message's wire form depends on besides the message: the
// model (its provider, API, endpoint and id: transform.SameModel) and
// whether it takes images. The API is fixed per adapter but the Responses
// adapter's forms depend on it.
func Key(m provider.Model, images bool) string {
	return m.Provider + "\x00" + m.API + "\x00" + m.BaseURL + "\x00" + m.ID + "\x00" + strconv.FormatBool(images)
}

// Take removes and returns the session's entry, nil if none (nil c, or no
// id: nil).
func (c *Cache[M, C]) Take(id string) *Session[M, C] {
	if c == nil || id == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, _ := c.sessions.Take(id)
	return s
}

// Messages returns an empty wire message list with room for n, in the
// spare array of the session's request before when s has one.
func (s *Session[M, C]) Messages(n int) []M {
	if s == nil {
		return make([]M, 0, n)
	}
	return slices.Grow(s.spareMsgs[:0], n)
}

// Convs returns the wire forms s keeps for msgs, lined up with them: the
// first same of Conv are those of msgs[:same] (unchanged since the last
// request, for the same key), the rest to be added by the caller in order.
// Forms kept for another key are dropped (nil s: new ones). The request
// then owns them.
func (s *Session[M, C]) Convs(key string, msgs []message.Message) (w *Convs[C], same int) {
	if s == nil || s.convs == nil {
		w = &Convs[C]{key: key}
	} else {
		w = s.convs
		s.convs = nil
		if w.key != key {
			w.key = key
			w.src.Reset()
			clear(w.Conv)
			w.Conv = w.Conv[:0]
		}
		w.Hint = w.Hint[:0]
	}
	off, same := w.src.Update(msgs)
	if off > 0 {
		copy(w.Conv, w.Conv[off:off+same])
	}
	clear(w.Conv[same:])
	w.Conv = w.Conv[:same]
	return w, same
}

// bytes estimates the memory w holds besides the strings it shares with
// the messages.
func (w *Convs[C]) bytes() int {
	var c C
	return w.src.Bytes() + cap(w.Conv)*int(unsafe.Sizeof(c)) + cap(w.Hint)*int(unsafe.Sizeof(0))
}

// put keeps s as its session's entry (a concurrent request of the session
// may have put its own: this one is newer), dropping the least recently
// used sessions beyond the budget. A session over half the budget is not
// kept.
func (c *Cache[M, C]) put(s *Session[M, C]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sessions.Put(s.id, s, s.size)
}

// Marshal returns json.Marshal(body), body's message list being *msgs
// (a field of body named field, written before any other field of that
// name), reusing the JSON of the messages of prev, the session's last
// request (Take; nil: none): (*msgs)[j] is prev's message w.Hint[j] when
// that is not negative (the wire form of the same message), else it is
// looked for (equal). With a nil c or no id it is json.Marshal(body) and
// nothing is kept; else the cache keeps *msgs and w afterwards: the
// caller must not modify them.
func (c *Cache[M, C]) Marshal(id string, prev *Session[M, C], body any, msgs *[]M, field string, w *Convs[C]) ([]byte, error) {
	if c == nil || id == "" {
		return json.Marshal(body)
	}
	list := *msgs
	*msgs = nil
	head, err := json.Marshal(body)
	*msgs = list
	if err != nil {
		return nil, err
	}
	at := bytes.Index(head, []byte(`"`+field+`":null`))
	if at < 0 {
		return json.Marshal(body)
	}
	return c.encode(id, prev, head, at+len(field)+3, list, w)
}

// encode is Marshal's body: head with its null at index at replaced by
// the JSON array of msgs.
func (c *Cache[M, C]) encode(id string, prev *Session[M, C], head []byte, at int, msgs []M, w *Convs[C]) ([]byte, error) {
	var w0 Convs[C]
	if w == nil {
		w = &w0
	}
	next := &Session[M, C]{id: id, msgs: msgs, convs: w, size: w.bytes()}
	if prev != nil {
		// This request's JSON goes in the spare array; the last request's
		// arrays are the next one's spares.
		next.enc = slices.Grow(prev.spareEnc[:0], len(msgs))[:len(msgs)]
		clear(next.enc[len(msgs):cap(next.enc)])
		clear(msgs[len(msgs):cap(msgs)])
		next.spareMsgs, next.spareEnc = prev.msgs, prev.enc
	} else {
		next.enc = make([][]byte, len(msgs))
	}
	hint := func(j int) int {
		if j < len(w.Hint) {
			return w.Hint[j]
		}
		return -1
	}
	m := matcher[M, C]{prev: prev, equal: c.equal}
	if slices.ContainsFunc(w.Hint, func(h int) bool { return h >= 0 }) {
		// The messages lined up with the last request's: the others are
		// new or changed, not moved (no whole-request searches).
		m.searches = maxSearches
	}
	var overhead int
	{
		var zero M
		overhead = 2 * (int(unsafe.Sizeof(zero)) + 24) // two wire messages and a slice header
	}
	reused := 0
	var err error
	for i := range msgs {
		if h := hint(i); h >= 0 {
			next.enc[i] = prev.enc[h]
			m.next = h + 1
			reused++
		} else if b := m.find(&msgs[i]); b != nil {
			next.enc[i] = b
			reused++
		} else if next.enc[i], err = json.Marshal(&msgs[i]); err != nil {
			return nil, err
		}
		// The JSON, and about as much again for the strings the wire
		// forms hold of their own (an image's data URL is a copy): an
		// estimate, on the safe side for text.
		next.size += 2*len(next.enc[i]) + overhead
	}
	c.Reused.Add(int64(reused))
	out := splice(head, at, next.enc)
	if prev != nil {
		// The last request's arrays become the spares of the next one:
		// they must not keep its messages and JSON alive uncharged (after
		// a compaction or a rollback, most of a session's bytes).
		clear(prev.msgs)
		clear(prev.enc)
	}
	c.put(next)
	return out, nil
}

// splice writes head with the 4 bytes "null" at index at replaced by the
// JSON array of enc.
func splice(head []byte, at int, enc [][]byte) []byte {
	n := len(head) + len(enc)
	for _, b := range enc {
		n += len(b)
	}
	out := make([]byte, 0, n)
	out = append(out, head[:at]...)
	out = append(out, '[')
	for i, b := range enc {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, b...)
	}
	out = append(out, ']')
	return append(out, head[at+len("null"):]...)
}

// matcher lines the messages of a request up with the previous request's.
// Each message is first compared with the one after the last match; on a
// miss, while that is not past the previous request's end, it is looked
// for through the whole previous request (the history limit dropped turns
// at the front, a compaction replaced them) at most maxSearches times,
// and, not found, taken to replace the one it was compared with.
type matcher[M, C any] struct {
	prev     *Session[M, C]
	equal    func(a, b *M) bool
	next     int // the previous request's message the next one lines up with
	searches int
}

// maxSearches bounds the whole-request searches of one request: a history
// that changed everywhere costs a few passes, not one per message.
const maxSearches = 4

// find returns the cached JSON of a message equal to cm, nil if none.
func (m *matcher[M, C]) find(cm *M) []byte {
	p := m.prev
	if p == nil || m.next >= len(p.msgs) {
		return nil // nothing cached, or past its end: a new message
	}
	if m.equal(&p.msgs[m.next], cm) {
		m.next++
		return p.enc[m.next-1]
	}
	if m.searches < maxSearches {
		m.searches++
		for j := range p.msgs {
			if j != m.next && m.equal(&p.msgs[j], cm) {
				m.next = j + 1
				return p.enc[j]
			}
		}
	}
	m.next++
	return nil
}
