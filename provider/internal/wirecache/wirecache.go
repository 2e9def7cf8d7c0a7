// Package wirecache keeps, per session, the wire messages of the session's
// last request to a model and their JSON, so that the next request of a
// long session encodes only the messages that are new: a turn's encoding
// cost does not grow with the session's length. It is the one home of
// that policy for the adapters that send the whole history every turn
// (Chat Completions, Responses, Anthropic Messages, Gemini); each adapter brings its wire
// message type M, the comparison that proves two of them encode the same,
// and what it keeps per history message (C). Cache.Prepare is where a
// request starts: the session's transform.Appender prepares its messages
// for the model (only those after the ones the caller promised never to
// write again, provider.Request.Immutable), and the session's JSON is kept
// joined, so a body copies what it repeats of it in one piece, or sends it
// from where it is kept (Forms.MarshalParts). A request
// that repeats the last request's first messages takes their wire
// messages and JSON whole (Forms.Skip): it walks, converts and encodes only
// the messages after them.
//
// Nothing is assumed about what changed. A message of the history that is
// the same as one of the last request's (message.Snapshot: its fields,
// blocks and maps), for the same model, may take the wire form and JSON
// that one got (Forms); every other wire message is compared with the
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
	"math"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"

	"github.com/lanefleet/lanefleet/internal/bytelru"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/bodybuf"
	"github.com/lanefleet/lanefleet/provider/transform"
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
	// Skipped counts the wire messages Skip took whole (tests).
	Skipped atomic.Int64
	// PartsFrom is the size from which MarshalParts sends a body in parts
	// (New: bodybuf.MinPooled; tests lower it). Set it before any use.
	PartsFrom int
}

// New returns a cache of at most maxBytes, the adapters' setting: 0 means
// BytesDefault, and below 0 it is nil (keeps nothing). equal(a, b) must
// report whether json.Marshal makes the same bytes of a and b (it is the
// proof the cache reuses JSON on).
func New[M, C any](maxBytes int, equal func(a, b *M) bool) *Cache[M, C] {
	switch {
	case maxBytes < 0:
		return nil
	case maxBytes == 0:
		maxBytes = BytesDefault
	}
	return &Cache[M, C]{sessions: bytelru.New[*Session[M, C]](maxBytes), equal: equal, PartsFrom: bodybuf.MinPooled}
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
	// joined is the JSON of msgs joined by commas, jend[i] where that of
	// msgs[i] ends in it: the next request's body copies the part of it
	// that it repeats whole (one copy, not one per message), and appends
	// what follows in place.
	joined []byte
	jend   []int
	// pins counts the bodies in flight that read joined's array in place
	// (MarshalParts; nil: none yet): while one does, the next request
	// writes no byte of the array below its length (join).
	pins  *atomic.Int32
	convs *convs[C]
	size  int // what the cache counts it for, besides its id and bytelru.EntryOverhead
}

// Charged returns what the cache charges s for (besides its id and a
// fixed overhead) and the bytes of JSON s keeps: the first must cover the
// second (tests).
func (s *Session[M, C]) Charged() (charged, json int) {
	for _, b := range s.enc {
		json += len(b)
	}
	return s.size, json
}

// Past returns how many entries past the request's length the arrays of
// its wire messages and their JSON still hold (tests): what no request
// reads, which the cache must not keep alive.
func (s *Session[M, C]) Past() int {
	n := 0
	for i := len(s.msgs); i < cap(s.msgs); i++ {
		if !reflect.ValueOf(&s.msgs[:cap(s.msgs)][i]).Elem().IsZero() {
			n++
		}
	}
	for _, b := range s.enc[len(s.enc):cap(s.enc)] {
		if b != nil {
			n++
		}
	}
	return n
}

// convs are what the messages of a request (as the model gets them,
// before they become wire messages) became on the wire, kept to take a
// message's wire form and JSON from the last request when it is the same
// message for the same model.
type convs[C any] struct {
	key string            // what the forms depend on besides the messages (the model)
	src message.Snapshots // of the request's messages
	// conv[i] is what the i-th of them became, at[i] the index of the
	// wire message it became (its first), -1: none.
	conv []C
	at   []int
	// start[i] is how many wire messages came before the i-th message's
	// (when Form was asked for it): a request that repeats the first i
	// messages starts with the last request's first start[i] (Skip).
	start []int
	// noted is the first message whose form was noted (Note), -1: none.
	noted int
	// clean is how many of the request's first wire messages are the
	// forms Add was given (none changed after: Unmark).
	clean int
	// hint[j] is the message of the last request that the request's j-th
	// wire message repeats, -1 when not known.
	hint []int
	// first is the request's first message and immutable the count of
	// them its caller promised never to write again
	// (provider.Request.Immutable): a next request over the same array
	// repeats at least the first min(immutable, its own) unchanged. The
	// pointer is weak: the cache does not keep the caller's array alive
	// (an array collected since cannot be the next request's).
	first     weak.Pointer[message.Message]
	immutable int
	// tr is the request's messages as the model gets them
	// (transform.Messages), kept for the next request of the session.
	tr transform.Appender
}

// key names what a message's wire form depends on besides the message: the
// model (its provider, API, endpoint and id: transform.SameModel) and
// whether it takes images. The API is fixed per adapter but the Responses
// adapter's forms depend on it.
func key(m provider.Model, images bool) string {
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

// messages returns an empty wire message list with room for n, in the
// spare array of the session's request before when s has one.
func (s *Session[M, C]) messages(n int) []M {
	if s == nil {
		return make([]M, 0, n)
	}
	return slices.Grow(s.spareMsgs[:0], n)
}

// takeConvs removes and returns the wire forms s keeps, new ones when it
// keeps none (nil s: none). The request then owns them.
func (s *Session[M, C]) takeConvs() *convs[C] {
	if s == nil || s.convs == nil {
		return &convs[C]{}
	}
	w := s.convs
	s.convs = nil
	return w
}

// lineUp lines w's forms up with msgs, the messages of a request for key
// (of which the first immutable are never written again): the first same
// of conv are those of msgs[:same] (unchanged since the last request, for
// the same key, which had off messages before them), the rest to be
// added in order. Forms kept for another key are dropped.
func (w *convs[C]) lineUp(key string, msgs []message.Message, immutable int) (off, same int) {
	if w.key != key {
		w.key = key
		w.src.Reset()
		clear(w.conv)
		w.conv, w.at, w.start, w.noted = w.conv[:0], w.at[:0], w.start[:0], -1
	}
	w.hint = w.hint[:0]
	known := 0
	if len(msgs) > 0 && w.first.Value() == &msgs[0] {
		known = min(immutable, w.immutable)
	}
	w.first, w.immutable = weak.Pointer[message.Message]{}, immutable
	if len(msgs) > 0 {
		w.first = weak.Make(&msgs[0])
	}
	off, same = w.src.UpdateKnown(msgs, known)
	if off > 0 {
		copy(w.conv, w.conv[off:off+same])
		copy(w.at, w.at[off:off+same])
		copy(w.start, w.start[off:off+same])
	}
	clear(w.conv[same:])
	w.conv, w.at, w.start = w.conv[:same], w.at[:same], w.start[:same]
	if w.noted -= off; w.noted < 0 || w.noted >= same {
		w.noted = -1
	}
	return off, same
}

// bytes estimates the memory w holds besides the strings it shares with
// the messages.
func (w *convs[C]) bytes() int {
	var c C
	return w.src.Bytes() + cap(w.conv)*int(unsafe.Sizeof(c)) + (cap(w.at)+cap(w.hint)+cap(w.start))*int(unsafe.Sizeof(0)) + w.tr.Bytes()
}

// Forms is one request's wire messages in the making (Out), lined up with
// the history's messages they are made of (the msgs of Cache.Forms): a
// message's wire form (C) is the last request's when the message is the
// same (Form), and each wire message records the last request's one it
// repeats (Add), for Marshal to reuse its JSON. A Forms of no cache or no
// session keeps nothing: Form builds every form, and nothing is recorded.
type Forms[M, C any] struct {
	// Out is the request's wire messages. The caller may change those
	// Add put there before Marshal; a message changed is Unmark'ed.
	Out     []M
	c       *Cache[M, C]
	id      string
	prev    *Session[M, C] // the session's last request, nil: none
	w       *convs[C]      // nil: nothing kept
	same    int            // msgs[:same] are the last request's messages
	dropped bool           // the last request had messages before them
	scratch C              // the form built last when nothing is kept
	// base is how many wire messages Skip took whole from the last
	// request (Out[:base] is its array, their JSON its JSON); tail and
	// tailEnc are copies of the last request's wire messages after those
	// and their JSON, which Out overwrites.
	base    int
	tail    []M
	tailEnc [][]byte
	clean   int // the last request's clean
	// changed are the wire messages Skip took that the caller changed
	// since (Unmark).
	changed []int
}

// Prepare prepares req's messages for model m (images: m takes images)
// as transform.Messages does with normalizeID (the adapter's, a function
// of m), and starts their wire messages, with room for extra more. It
// takes the session's entry (Take): the session's transform.Appender
// prepares only the messages after those req and the session's last
// request promised never to write again (provider.Request.Immutable),
// and the wire forms of the messages that are the last request's, for
// the same model, are reused (those of the prepared messages that are
// never written again, over the same array, without comparing them). A
// nil c or no session id keeps nothing.
func (c *Cache[M, C]) Prepare(req *provider.Request, m provider.Model, images bool, normalizeID func(string) string, extra int) ([]message.Message, Forms[M, C]) {
	if c == nil || req.SessionID == "" {
		msgs := transform.Messages(req.Messages, m, normalizeID)
		return msgs, Forms[M, C]{Out: make([]M, 0, len(msgs)+extra)}
	}
	prev := c.Take(req.SessionID)
	w := prev.takeConvs()
	k := key(m, images)
	msgs, immutable := w.tr.Messages(req.Messages, req.Immutable, k, m, normalizeID)
	return msgs, c.forms(req.SessionID, prev, w, k, msgs, immutable, len(msgs)+extra)
}

// Skip lets a request that repeats the last request's first messages
// take their wire messages and JSON whole instead of making them again:
// it returns i, and the caller goes on with msgs[i:] (Form is asked for
// those only). Out then holds the wire messages of msgs[:i] as the last
// request had them, after the ones Add put there before Skip (the
// request's own, as i < 0), which must be the last request's first ones
// (else i is 0). i is the largest below the count of msgs that are the
// last request's first ones, for the same model (never written again,
// provider.Request.Immutable, or compared: Prepare), for which ok(i)
// holds, ok(i) saying that what msgs[i:] become does not depend on
// msgs[:i] beyond Out (0: nothing skipped, the caller makes every form).
// A wire message of Out[:i] the caller changes after is Unmark'ed as any
// other. Note records what the caller needs to know of the skipped
// messages' forms (Noted).
func (f *Forms[M, C]) Skip(ok func(i int) bool) int {
	w, prev := f.w, f.prev
	if w == nil || prev == nil || f.dropped || f.base > 0 {
		return 0
	}
	// msgs[:same] are the last request's first messages, for the same
	// model (their forms are the last request's); msgs[i] must have been
	// asked for by the last request (its start is known): at most same-1.
	i := min(f.same-1, len(w.start)-1)
	for i > 0 && !ok(i) {
		i--
	}
	if i <= 0 {
		return 0
	}
	j := w.start[i]
	// The last request's had as many of the request's own messages
	// before msgs[0]'s as this one (start[0]), the same ones (below).
	if w.start[0] != len(f.Out) || j > f.clean || j > len(prev.msgs) || j > len(prev.jend) {
		return 0
	}
	for k := range f.Out {
		if !f.c.equal(&f.Out[k], &prev.msgs[k]) {
			return 0
		}
	}
	// Out's array (the spare one) takes the copies of the last request's
	// messages after j; the last request's array holds the rest.
	f.tail = append(f.Out[:0], prev.msgs[j:]...)
	f.tailEnc = append(prev.spareEnc[:0], prev.enc[j:]...)
	f.Out = prev.msgs[:j]
	f.base = j
	w.hint = w.hint[:0]
	f.c.Skipped.Add(int64(j))
	return i
}

// AfterNoToolResult is Skip's ok for an adapter whose wire messages of a
// run of tool results depend on the whole run (one message for the run,
// or its images sent after it): msgs[i:] become the same whatever came
// before unless msgs[i-1] is a tool result.
func AfterNoToolResult(msgs []message.Message) func(i int) bool {
	return func(i int) bool { return msgs[i-1].Role != message.RoleToolResult }
}

// Note records that msgs[i]'s form has what the caller notes (Noted).
func (f *Forms[M, C]) Note(i int) {
	if w := f.w; w != nil && (w.noted < 0 || i < w.noted) {
		w.noted = i
	}
}

// Noted reports whether Note was called for a message Skip skipped (in
// this request or, for the same message, an earlier one).
func (f *Forms[M, C]) Noted() bool {
	return f.w != nil && f.base > 0 && f.w.noted >= 0
}

// forms starts the wire messages of session id's request of msgs (the
// history as the model gets them, before they become wire messages; the
// first immutable never written again) for key, with room for n, from
// the session's last request prev (nil: none) and its forms w.
func (c *Cache[M, C]) forms(id string, prev *Session[M, C], w *convs[C], key string, msgs []message.Message, immutable, n int) Forms[M, C] {
	immutable = min(immutable, len(msgs))
	f := Forms[M, C]{c: c, id: id, prev: prev, w: w}
	f.Out = prev.messages(n)
	off, same := w.lineUp(key, msgs, immutable)
	f.same, f.dropped = same, off > 0
	f.clean, w.clean = w.clean, math.MaxInt
	return f
}

// Keeping reports whether f keeps the forms for the next request.
func (f *Forms[M, C]) Keeping() bool { return f.w != nil }

// Form returns the wire form of msgs[i] and h, the index of the wire
// message it became in the last request (-1: none known). The form is the
// last request's when msgs[:i+1] are; else build makes it (nil: the zero
// form, of a message that sends nothing). The forms are asked for in
// order, each once; when nothing is kept, the next Form overwrites the
// form returned. (build returns the form rather than filling one in: a
// pointer into f given to it would move f to the heap.)
func (f *Forms[M, C]) Form(i int, build func() C) (cv *C, h int) {
	if f.w == nil {
		if build != nil {
			f.scratch = build()
		}
		return &f.scratch, -1
	}
	w := f.w
	if i < f.same {
		h, w.at[i] = w.at[i], -1
		w.start[i] = len(f.Out)
		return &w.conv[i], h
	}
	var zero C
	w.conv = append(w.conv, zero)
	w.at = append(w.at, -1)
	w.start = append(w.start, len(f.Out))
	if build != nil {
		w.conv[i] = build()
	}
	return &w.conv[i], -1
}

// Dropped reports whether the last request's messages that msgs begin
// with came after others (the history limit dropped those): a form that
// depends on the messages before its own (Form keeps it as it was) may
// then have to be made anew.
func (f *Forms[M, C]) Dropped() bool { return f.dropped }

// Kept returns the form of msgs[i] that Form returned, kept for the next
// request; nil when nothing is kept.
func (f *Forms[M, C]) Kept(i int) *C {
	if f.w == nil {
		return nil
	}
	return &f.w.conv[i]
}

// Add appends m to Out. m is (the first of) what msgs[i]'s form became
// (i < 0: m is no form's) and h the last request's wire message it
// repeats (-1: none known); Form asked for msgs[i] before.
func (f *Forms[M, C]) Add(i int, m M, h int) {
	f.Out = append(f.Out, m)
	if w := f.w; w != nil {
		w.hint = append(w.hint, h)
		if i >= 0 && w.at[i] < 0 {
			w.at[i] = len(f.Out) - 1
		}
	}
}

// Unmark records that Out[j] is not the form it was made of any more (the
// caller changed it): its JSON is not that form's.
func (f *Forms[M, C]) Unmark(j int) {
	w := f.w
	if w == nil {
		return
	}
	w.clean = min(w.clean, j)
	if j < f.base {
		// One of those Skip took: its JSON is made anew (Marshal).
		f.changed = append(f.changed, j)
	} else {
		w.hint[j-f.base] = -1
	}
	for i := len(w.at) - 1; i >= 0; i-- {
		if w.at[i] == j {
			w.at[i] = -1
			return
		}
	}
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

// Marshal sets *msgs, body's message list (a field of body named field,
// written before any other field of that name), to f.Out and returns
// json.Marshal(body), reusing the JSON of the messages of the session's
// last request: Out[j] is the last request's message that Add was told it
// repeats, else it is looked for (equal). When f keeps, the cache keeps
// Out and the forms afterwards: the caller must not modify them.
func (f *Forms[M, C]) Marshal(body any, msgs *[]M, field string) ([]byte, error) {
	p, err := f.marshal(body, msgs, field, false)
	return p.Body, err
}

// Parts is a request body in parts: Body, then each of More, in order.
// Done, when set, must be called once nothing reads them any more
// (send.Request.Done); until then the cache writes none of their bytes.
type Parts struct {
	Body []byte
	More [][]byte
	Done func()
}

// MarshalParts is Marshal, but a body of Cache.PartsFrom bytes or more
// comes in parts: the session's kept JSON of its messages is sent where
// it is, not copied into one buffer with the rest (a long session's
// body, hundreds of kilobytes, is not written again each turn). A
// smaller body, or one the cache does not keep, is one part in a buffer
// Done gives back (bodybuf.Release).
func (f *Forms[M, C]) MarshalParts(body any, msgs *[]M, field string) (Parts, error) {
	return f.marshal(body, msgs, field, true)
}

// marshal is Marshal (parts false) and MarshalParts.
func (f *Forms[M, C]) marshal(body any, msgs *[]M, field string, parts bool) (Parts, error) {
	*msgs = f.Out
	whole := func() (Parts, error) {
		b, err := json.Marshal(body)
		if err != nil || !parts {
			return Parts{Body: b}, err
		}
		return Parts{Body: b, Done: bodybuf.Release(b)}, nil
	}
	if f.w == nil {
		return whole()
	}
	list := *msgs
	*msgs = nil
	head, err := json.Marshal(body)
	*msgs = list
	if err != nil {
		return Parts{}, err
	}
	at := bytes.Index(head, []byte(`"`+field+`":null`))
	if at < 0 {
		return whole()
	}
	return f.c.encode(f, head, at+len(field)+3, list, parts)
}

// encode is Marshal's body: head with its null at index at replaced by
// the JSON array of msgs; in parts (MarshalParts) when parts is set.
func (c *Cache[M, C]) encode(f *Forms[M, C], head []byte, at int, msgs []M, parts bool) (Parts, error) {
	prev, w, base := f.prev, f.w, f.base
	next := &Session[M, C]{id: f.id, msgs: msgs, convs: w, size: w.bytes()}
	last := view[M]{msgs: prev.wire(), enc: prev.json()}
	switch {
	case base > 0:
		// Skip: msgs[:base] are the last request's, in its array, and so
		// is their JSON; the copies of its later ones are the spares.
		last = view[M]{msgs: prev.msgs[:base], enc: prev.enc[:base], tail: f.tail, tailEnc: f.tailEnc}
		next.enc = slices.Grow(prev.enc[:base], len(msgs)-base)[:len(msgs)]
		// Past the last request's length these arrays hold nothing (it
		// cleared them, or they are new): only what it had past this
		// one's is cleared, not the whole spare room each turn (a
		// quarter of a long session's array).
		clear(next.enc[len(msgs):max(len(msgs), min(len(prev.enc), cap(next.enc)))])
		clear(msgs[len(msgs):max(len(msgs), min(len(prev.msgs), cap(msgs)))])
		// Their JSON, with the commas between: on the safe side.
		next.size += prev.jend[base-1] + base*overhead[M]()
	case prev != nil:
		// This request's JSON goes in the spare array; the last request's
		// arrays are the next one's spares.
		next.enc = slices.Grow(prev.spareEnc[:0], len(msgs))[:len(msgs)]
		clear(next.enc[len(msgs):cap(next.enc)])
		clear(msgs[len(msgs):cap(msgs)])
		next.spareMsgs, next.spareEnc = prev.msgs, prev.enc
	default:
		next.enc = make([][]byte, len(msgs))
	}
	hint := func(j int) int {
		if j-base < len(w.hint) {
			return w.hint[j-base]
		}
		return -1
	}
	m := matcher[M]{prev: last, next: base, lo: base, equal: c.equal}
	if slices.ContainsFunc(w.hint, func(h int) bool { return h >= 0 }) {
		// The messages lined up with the last request's: the others are
		// new or changed, not moved (no whole-request searches).
		m.searches = maxSearches
	}
	overhead := overhead[M]()
	reused := base
	p := base // msgs[:p] are the last request's first p, the JSON in its joined
	var err error
	if len(f.changed) > 0 {
		// Wire messages Skip took and the caller changed since: their
		// JSON anew, the last request's joined kept only before them.
		p = slices.Min(f.changed)
		for _, j := range f.changed {
			if next.enc[j], err = json.Marshal(&msgs[j]); err != nil {
				return Parts{}, err
			}
			reused--
		}
		// What the size above does not count.
		for j := p; j < base; j++ {
			next.size += len(next.enc[j])
		}
	}
	for i := base; i < len(msgs); i++ {
		h := hint(i)
		if h >= 0 {
			m.next = h + 1
		} else {
			h = m.find(&msgs[i])
		}
		if h >= 0 {
			next.enc[i] = last.json(h)
			reused++
			if h == i && p == i && i < len(prev.jend) {
				p++
			}
		} else if next.enc[i], err = json.Marshal(&msgs[i]); err != nil {
			return Parts{}, err
		}
		// About as much as the JSON for the strings the wire forms hold
		// of their own (an image's data URL is a copy): an estimate, on
		// the safe side for text; the JSON itself is joined's.
		next.size += len(next.enc[i]) + overhead
	}
	c.Reused.Add(int64(reused))
	var same bool
	next.joined, next.jend, same = join(prev, p, next.enc)
	if same {
		next.pins = prev.pins // the bodies in flight read this array still
	}
	next.size += cap(next.joined) + cap(next.jend)*int(unsafe.Sizeof(0))
	var out Parts
	if n := len(head) + len(next.joined) + 2 - len("null"); parts && n >= c.PartsFrom {
		// The kept JSON as it is: pinned (before the session is kept
		// again, for its next request to see) until the body is sent.
		if next.pins == nil {
			next.pins = new(atomic.Int32)
		}
		pins := next.pins
		pins.Add(1)
		out = Parts{Body: head[:at], More: [][]byte{openBracket, next.joined, closeBracket, head[at+len("null"):]},
			Done: sync.OnceFunc(func() { pins.Add(-1) })}
	} else {
		out.Body = splice(head, at, next.joined)
		if parts {
			out.Done = bodybuf.Release(out.Body)
		}
	}
	if base > 0 {
		clear(f.tail)
		clear(f.tailEnc)
		next.spareMsgs, next.spareEnc = f.tail[:0], f.tailEnc[:0]
	} else if prev != nil {
		// The last request's arrays become the spares of the next one:
		// they must not keep its messages and JSON alive uncharged (after
		// a compaction or a rollback, most of a session's bytes).
		clear(prev.msgs)
		clear(prev.enc)
	}
	c.put(next)
	return out, nil
}

// openBracket and closeBracket enclose a body's message list (Parts).
var openBracket, closeBracket = []byte("["), []byte("]")

// join returns enc joined by commas and where each ends in that, and
// makes every enc[i] the part of it that is msgs[i]'s (the JSON is kept
// once: no enc[i] keeps an array of an earlier request alive). It builds
// on the last request prev's joined JSON, whose first p messages are
// enc's: those are taken as they are, and the array is written only past
// them (the JSON of prev's later messages that enc reuses is copied out
// first), unless a body in flight still reads the array (prev.pins) and
// that would write below its length: then the JSON goes into a new array.
// same reports whether joined is in prev's array.
func join[M, C any](prev *Session[M, C], p int, enc [][]byte) (joined []byte, jend []int, same bool) {
	pinned := false
	if prev != nil {
		joined, jend = prev.joined, prev.jend[:p]
		prev.joined, prev.jend = nil, nil
		cut := 0
		if p > 0 {
			cut = jend[p-1]
		}
		// A body in flight reads joined[:len(joined)]: nothing below
		// that may change while it does.
		pinned = cut < len(joined) && prev.pins != nil && prev.pins.Load() > 0
		if !pinned {
			free := joined[cut:cap(joined)]
			for i := p; i < len(enc); i++ {
				if overlaps(enc[i], free) {
					enc[i] = bytes.Clone(enc[i])
				}
			}
		}
		joined = joined[:cut]
	}
	was := unsafe.SliceData(joined)
	n := len(joined)
	for _, b := range enc[p:] {
		n += len(b) + 1
	}
	switch {
	case pinned:
		joined = append(make([]byte, 0, n+n/4), joined...)
	case cap(joined) < n && len(joined) > 0:
		// A growing session: room for its next turns too.
		joined = slices.Grow(joined, n-len(joined)+n/4)
	case cap(joined) < n || cap(joined) > 4*n+4096:
		// A new session, or one that shrank (a compaction, a rollback):
		// an array of its size.
		joined = append(make([]byte, 0, n), joined...)
	}
	jend = slices.Grow(jend, len(enc)-len(jend))
	for i := p; i < len(enc); i++ {
		if i > 0 {
			joined = append(joined, ',')
		}
		joined = append(joined, enc[i]...)
		jend = append(jend, len(joined))
	}
	same = was != nil && unsafe.SliceData(joined) == was
	from := p
	if !same {
		// A new array (once per growth of a quarter, or a change): the
		// first p move to it too.
		from = 0
	}
	for i := from; i < len(enc); i++ {
		enc[i] = joined[jend[i]-len(enc[i]) : jend[i] : jend[i]]
	}
	return joined, jend, same
}

// overlaps reports whether a's bytes are in b's.
func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return a0 < b0+uintptr(len(b)) && b0 < a0+uintptr(len(a))
}

// splice writes head with the 4 bytes "null" at index at replaced by the
// JSON array whose elements joined holds, in a buffer a long session's
// earlier body may have released (bodybuf: the adapter gives it back once
// the request is sent).
func splice(head []byte, at int, joined []byte) []byte {
	out := bodybuf.Get(len(head) + len(joined) + 2 - len("null"))
	out = append(out, head[:at]...)
	out = append(out, '[')
	out = append(out, joined...)
	out = append(out, ']')
	return append(out, head[at+len("null"):]...)
}

// view is the last request's wire messages and their JSON as a request
// that Skip'ed some sees them: the first len(msgs) in the last request's
// arrays, the rest copied out (tail, tailEnc).
type view[M any] struct {
	msgs, tail   []M
	enc, tailEnc [][]byte
}

func (v *view[M]) len() int { return len(v.msgs) + len(v.tail) }

func (v *view[M]) at(j int) *M {
	if j < len(v.msgs) {
		return &v.msgs[j]
	}
	return &v.tail[j-len(v.msgs)]
}

func (v *view[M]) json(j int) []byte {
	if j < len(v.enc) {
		return v.enc[j]
	}
	return v.tailEnc[j-len(v.enc)]
}

// wire returns s's wire messages (nil s: none).
func (s *Session[M, C]) wire() []M {
	if s == nil {
		return nil
	}
	return s.msgs
}

// json returns the JSON of s's wire messages (nil s: none).
func (s *Session[M, C]) json() [][]byte {
	if s == nil {
		return nil
	}
	return s.enc
}

// overhead is what the cache counts per wire message besides its JSON:
// two wire messages and a slice header.
func overhead[M any]() int {
	var zero M
	return 2 * (int(unsafe.Sizeof(zero)) + 24)
}

// matcher lines the messages of a request up with the previous request's.
// Each message is first compared with the one after the last match; on a
// miss, while that is not past the previous request's end, it is looked
// for through the whole previous request (the history limit dropped turns
// at the front, a compaction replaced them) at most maxSearches times,
// and, not found, taken to replace the one it was compared with.
type matcher[M any] struct {
	prev     view[M]
	equal    func(a, b *M) bool
	next     int // the previous request's message the next one lines up with
	lo       int // the first the searches look at (Skip took those before)
	searches int
}

// maxSearches bounds the whole-request searches of one request: a history
// that changed everywhere costs a few passes, not one per message.
const maxSearches = 4

// find returns the index of the last request's message equal to cm, -1
// if none.
func (m *matcher[M]) find(cm *M) int {
	p := &m.prev
	n := p.len()
	if m.next >= n {
		return -1 // nothing cached, or past its end: a new message
	}
	if m.equal(p.at(m.next), cm) {
		m.next++
		return m.next - 1
	}
	if m.searches < maxSearches {
		m.searches++
		// Not among those Skip took: the request has them where they
		// were (and one the caller changed since keeps its old JSON).
		for j := m.lo; j < n; j++ {
			if j != m.next && m.equal(p.at(j), cm) {
				m.next = j + 1
				return j
			}
		}
	}
	m.next++
	return -1
}

// ContentEqual reports whether two wire contents of the form nil, a
// string or a []P encode the same: of the same kind, equal strings, or
// parts of the same count, equal one by one (eq) and both nil or neither
// (a nil list is null, an empty one [] in JSON).
func ContentEqual[P any](a, b any, eq func(x, y *P) bool) bool {
	switch a := a.(type) {
	case nil:
		return b == nil
	case string:
		s, ok := b.(string)
		return ok && a == s
	case []P:
		p, ok := b.([]P)
		if !ok || len(a) != len(p) || (a == nil) != (p == nil) {
			return false
		}
		for i := range a {
			if !eq(&a[i], &p[i]) {
				return false
			}
		}
		return true
	}
	return false
}

// SameMap reports whether two maps of a wire message encode the same as
// far as the cache can tell cheaply: the very same map (maps in messages
// are never changed in place: message.Snapshot), both nil (omitted) or
// both empty and not nil ({}).
func SameMap[K comparable, V any](a, b map[K]V) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b) && (a == nil) == (b == nil)
	}
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}
