package openai

import (
	"bytes"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/lanefleet/lanefleet/internal/bytelru"
	"github.com/lanefleet/lanefleet/message"
)

// WireCacheBytesDefault bounds what a Chat Completions adapter keeps of its
// sessions' last requests (see wireCache).
const WireCacheBytesDefault = 16 << 20

// wireCache keeps, per session, the wire messages of the session's last
// Chat Completions request and their JSON, so that the next request of a
// long session encodes only the messages that are new: a turn's encoding
// cost does not grow with the session's length. Nothing is assumed about
// what changed. A message of the history that is the same as one of the
// last request's (message.Snapshot: its fields, blocks and maps), for the
// same model, takes the wire form and JSON that one got (wireConvs);
// every other wire message is compared with the cached one it lines up
// with, field by field, and only an equal message reuses the cached JSON.
// So a body is byte for byte what json.Marshal makes of it whatever
// happened to the history (a compaction, a rollback, a cut tool result,
// another model's turn, the history limit dropping the oldest turns, a
// message changed in place). Sessions are dropped least recently used first when the
// kept bytes exceed max; one session is in use by one request at a time
// (a concurrent request of the same session encodes everything).
type wireCache struct {
	mu       sync.Mutex
	sessions *bytelru.Cache[*wireSession]
	// reused and encoded count the messages whose JSON was reused and
	// made.
	reused, encoded atomic.Int64
}

// wireSession is one session's last request.
type wireSession struct {
	id   string
	msgs []chatMessage
	enc  [][]byte // enc[i] is the JSON of msgs[i]
	// spareMsgs and spareEnc are the arrays of the request before, which
	// the next request builds into (two requests' arrays per session, no
	// new ones per request).
	spareMsgs []chatMessage
	spareEnc  [][]byte
	// convs are the wire forms of the request's messages.
	convs *wireConvs
	size  int // what the cache counts it for, besides its id and bytelru.EntryOverhead
}

// wireConvs are what the messages of a request (as the model gets them,
// before they become wire messages) became on the wire, kept to take a
// message's wire form and JSON from the last request when it is the same
// message for the same model.
type wireConvs struct {
	key  string            // the model (convKey) the forms are for
	src  message.Snapshots // of the request's messages
	conv []wireConv        // conv[i] is what the i-th of them became
	// hint[j] is the message of the last request that the request's j-th
	// wire message repeats, -1 when not known.
	hint []int
}

// wireConv is what one message became on the wire.
type wireConv struct {
	cm   chatMessage
	ok   bool       // cm is sent (a user message may have nothing to send)
	imgs []chatPart // a tool result's images, sent after its run of results
	at   int        // cm's index in the request's wire messages, -1: not there as cm
}

// takeConvs returns the wire forms s keeps, emptied when they are not
// for key (nil s: new ones); the request then owns them.
func (s *wireSession) takeConvs(key string) *wireConvs {
	if s == nil || s.convs == nil {
		return &wireConvs{key: key}
	}
	w := s.convs
	s.convs = nil
	if w.key != key {
		w.key = key
		w.src.Reset()
		clear(w.conv)
		w.conv = w.conv[:0]
	}
	w.hint = w.hint[:0]
	return w
}

// bytes estimates the memory w holds besides the strings it shares with
// the messages.
func (w *wireConvs) bytes() int {
	return w.src.Bytes() + cap(w.conv)*int(unsafe.Sizeof(wireConv{})) + cap(w.hint)*int(unsafe.Sizeof(0))
}

// messages returns an empty message list with room for n, in the spare
// array of the session's request before when s has one.
func (s *wireSession) messages(n int) []chatMessage {
	if s == nil {
		return make([]chatMessage, 0, n)
	}
	return slices.Grow(s.spareMsgs[:0], n)
}

func newWireCache(maxBytes int) *wireCache {
	return &wireCache{sessions: bytelru.New[*wireSession](maxBytes)}
}

// take removes and returns the session's entry, nil if none.
func (c *wireCache) take(id string) *wireSession {
	if c == nil || id == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s, _ := c.sessions.Take(id)
	return s
}

// put keeps s as its session's entry (a concurrent request of the session
// may have put its own: this one is newer), dropping the least recently
// used sessions beyond the budget. A session over half the budget is not
// kept.
func (c *wireCache) put(s *wireSession) {
	if c == nil || s.id == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sessions.Put(s.id, s, s.size)
}

// wireMessageOverhead is what a kept message costs besides its JSON: two
// chatMessages and slice headers (its strings are mostly shared with the
// session's transcript).
const wireMessageOverhead = 2 * (int(unsafe.Sizeof(chatMessage{})) + 24)

// messagesField is how json.Marshal writes a chatRequest's nil Messages:
// the field right after "model", whose encoded string cannot contain it
// (its quotes are escaped).
var messagesField = []byte(`,"messages":null,`)

// encode returns json.Marshal(body), reusing the JSON of the messages that
// equal those of prev, the session's last request (taken from the cache;
// nil: no reuse): body.Messages[j] is prev's message w.hint[j] when that
// is not negative (the wire form of the same message), else it is looked
// for. The cache keeps body's messages and w afterwards: the caller must
// not modify them.
func (c *wireCache) encode(sessionID string, prev *wireSession, body *chatRequest, w *wireConvs) ([]byte, error) {
	if c == nil || sessionID == "" {
		return json.Marshal(body)
	}
	msgs := body.Messages
	body.Messages = nil
	head, err := json.Marshal(body)
	body.Messages = msgs
	if err != nil {
		return nil, err
	}
	at := bytes.Index(head, messagesField)
	if at < 0 {
		return json.Marshal(body)
	}
	next := &wireSession{id: sessionID, msgs: msgs, convs: w, size: w.bytes()}
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
	n := len(head) + 2
	m := matcher{prev: prev}
	if slices.ContainsFunc(w.hint, func(h int) bool { return h >= 0 }) {
		// The messages lined up with the last request's: the others are
		// new or changed, not moved (no whole-request searches).
		m.searches = maxSearches
	}
	reused := 0
	for i := range msgs {
		if h := w.hint[i]; h >= 0 {
			next.enc[i] = prev.enc[h]
			m.next = h + 1
			reused++
		} else if b := m.find(&msgs[i]); b != nil {
			next.enc[i] = b
			reused++
		} else if next.enc[i], err = json.Marshal(&msgs[i]); err != nil {
			return nil, err
		}
		n += len(next.enc[i]) + 1
		next.size += len(next.enc[i]) + wireMessageOverhead
	}
	c.reused.Add(int64(reused))
	c.encoded.Add(int64(len(msgs) - reused))
	out := make([]byte, 0, n)
	out = append(out, head[:at]...)
	out = append(out, `,"messages":[`...)
	for i, b := range next.enc {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, b...)
	}
	out = append(out, "],"...)
	out = append(out, head[at+len(messagesField):]...)
	c.put(next)
	return out, nil
}

// matcher lines the messages of a request up with the previous request's.
// Each message is first compared with the one after the last match; on a
// miss, while that is not past the previous request's end, it is looked
// for through the whole previous request (the history limit dropped turns
// at the front, a compaction replaced them) at most maxSearches times,
// and, not found, taken to replace the one it was compared with.
type matcher struct {
	prev     *wireSession
	next     int // the previous request's message the next one lines up with
	searches int
}

// maxSearches bounds the whole-request searches of one request: a history
// that changed everywhere costs a few passes, not one per message.
const maxSearches = 4

// find returns the cached JSON of a message equal to m, nil if none.
func (m *matcher) find(cm *chatMessage) []byte {
	p := m.prev
	if p == nil || m.next >= len(p.msgs) {
		return nil // nothing cached, or past its end: a new message
	}
	if p.msgs[m.next].equal(cm) {
		m.next++
		return p.enc[m.next-1]
	}
	if m.searches < maxSearches {
		m.searches++
		for j := range p.msgs {
			if j != m.next && p.msgs[j].equal(cm) {
				m.next = j + 1
				return p.enc[j]
			}
		}
	}
	m.next++
	return nil
}

// equal reports whether a and b encode the same: every field of
// chatMessage (TestChatMessageEqualCoversFields keeps this list whole).
func (a *chatMessage) equal(b *chatMessage) bool {
	return a.Role == b.Role && a.Name == b.Name && a.ToolCallID == b.ToolCallID &&
		a.ReasoningContent == b.ReasoningContent && a.Reasoning == b.Reasoning && a.ReasoningText == b.ReasoningText &&
		contentEqual(a.Content, b.Content) && slices.Equal(a.ToolCalls, b.ToolCalls) &&
		slices.EqualFunc(a.ReasoningDetails, b.ReasoningDetails, func(x, y json.RawMessage) bool { return bytes.Equal(x, y) })
}

// contentEqual compares a chatMessage's content: nil, a string or parts.
func contentEqual(a, b any) bool {
	switch a := a.(type) {
	case nil:
		return b == nil
	case string:
		s, ok := b.(string)
		return ok && a == s
	case []chatPart:
		p, ok := b.([]chatPart)
		return ok && slices.EqualFunc(a, p, chatPart.equal)
	}
	return false
}

func (a chatPart) equal(b chatPart) bool {
	return a.Type == b.Type && a.Text == b.Text &&
		(a.ImageURL == nil) == (b.ImageURL == nil) && (a.ImageURL == nil || *a.ImageURL == *b.ImageURL) &&
		(a.CacheControl == nil) == (b.CacheControl == nil) && (a.CacheControl == nil || *a.CacheControl == *b.CacheControl)
}
