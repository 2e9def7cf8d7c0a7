package runner

import (
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"

	"github.com/lanefleet/lanefleet/compaction"
	"github.com/lanefleet/lanefleet/ecmatext"
	"github.com/lanefleet/lanefleet/guard"
	"github.com/lanefleet/lanefleet/internal/bytelru"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/sanitize"
	"github.com/lanefleet/lanefleet/sessionfile"
)

// ContextCacheBytesDefault bounds the history contexts a Runner keeps
// (see contextCache).
const ContextCacheBytesDefault = 16 << 20

// contextCache keeps, per session, the context its last run built from the
// stored history (the branch's messages converted for the model, images the
// model answered pruned), so that the next run converts only the entries
// added since: a turn's cost does not grow with its session's length.
//
// The cached context is only used for a history that starts with the very
// entries it was built from (same ids, same message values in memory, as
// the lane's transcript cache hands them on) and goes on with message
// entries chained one to the next; anything else — a compaction, a
// rollback, a rewritten or re-read transcript, a branch — is converted
// whole. Those entries are compared one by one, unless the history is
// over the same array as the one the context was built from and its
// caller promised (Input.HistoryAppendOnly) never to write that array
// below its length: then only the last entry the context was built from
// is compared, and the entries added after it checked (a turn's cost
// does not grow with the session's length there either). Sessions are dropped least recently used first when the kept
// bytes exceed max; an entry is in use by one run at a time (a concurrent
// run of the same session converts its history whole).
type contextCache struct {
	mu       sync.Mutex
	sessions *bytelru.Cache[*sessionContext]
	// extended counts the runs that converted only their history's new
	// entries.
	extended atomic.Int64
	// compared counts the entries of the histories compared with the
	// ones their cached context was built from (tests).
	compared atomic.Int64
}

// sessionContext is one session's cached context.
type sessionContext struct {
	key string
	// ids and msgs identify the history the context was built from: each
	// entry's id and message pointer (nil for other entries).
	ids  []string
	msgs []*message.Message
	// first is the first entry of the history's array when its caller
	// promised never to write that array below len(ids) again
	// (Input.HistoryAppendOnly), else nil. The pointer is weak: the cache
	// does not keep the caller's array alive (an array collected since
	// cannot be the next history's).
	first weak.Pointer[message.Entry]
	base  []message.Message
	// answered is the index of base's last reply (0: none): the user
	// messages before it have had their images pruned.
	answered int
	text     int // bytes of the history's ids and texts
	size     int // what the cache counts it for, besides its key and bytelru.EntryOverhead
	// sizes are the guard's estimates of the session's last request.
	sizes guard.Sizes
	// prepared is base (a prefix of it) prepared for the model of the
	// session's last request (sanitize.Appender): a run prepares only
	// the messages added since. It is reset when base's messages change.
	prepared sanitize.Appender
	// guarded is the first message of the session's last request when
	// its first guardedKept messages were prepared's (Kept), nil when
	// not: messages of that array below that length are never written
	// again, so the guard need not compare them again.
	guarded     *message.Message
	guardedKept int
}

func newContextCache(maxBytes int) *contextCache {
	return &contextCache{sessions: bytelru.New[*sessionContext](maxBytes)}
}

// ContextCache returns the bytes the Runner's cache of converted histories
// charges them, and its budget (0, 0 without one).
func (r *Runner) ContextCache() (charged, max int) {
	if r.contexts == nil {
		return 0, 0
	}
	r.contexts.mu.Lock()
	defer r.contexts.mu.Unlock()
	return r.contexts.sessions.Size()
}

// contextOf is the context of a stored history, uncached.
func contextOf(history []message.Entry) []message.Message {
	// Images of user turns the model has answered are not sent again
	// (runtime spec §10.3): the stored history keeps them.
	base, _ := sanitize.PruneHistoryImages(compaction.ConvertToLLM(sessionfile.MessagesShared(history)))
	return base
}

// acquire returns the session's context for history, converting only what
// the cached one lacks (key "" or a nil cache: all of it). The run holds
// it until release: it may append to base in place (beyond its length, in
// its spare capacity), and no other run gets it meanwhile (a concurrent
// run of the same session converts its history whole). Nothing may
// modify base[:len(base)].
// appendOnly is the caller's promise about history's array
// (Input.HistoryAppendOnly).
func (c *contextCache) acquire(key string, history []message.Entry, appendOnly bool) *sessionContext {
	var sc *sessionContext
	if c != nil && key != "" {
		sc = c.take(key)
	}
	if c == nil || key == "" {
		return &sessionContext{base: contextOf(history)}
	}
	if sc == nil || !sc.extends(history, c.compare) {
		// Room for the turn's messages (its prompt and reply) and then
		// some (appended in place until it is full, then grown as
		// append grows: a tool round's messages move to a new array
		// once). A fresh session's context had room for 16 more
		// Messages (~3 KB, 10% of a turn's heap with 1,000 in flight),
		// then 4 (896 bytes held while the model answered).
		base := contextOf(history)
		old := sc
		sc = &sessionContext{key: key, ids: make([]string, 0, len(history)), msgs: make([]*message.Message, 0, len(history)),
			base: slices.Grow(base[:len(base):len(base)], 3+len(base)/4)}
		if old != nil {
			// The guard's estimates are checked message by message: they
			// hold whatever the history became.
			sc.sizes = old.sizes
		}
		sc.add(history)
		sc.promised(history, appendOnly)
		sc.answered = lastReply(sc.base, 0)
		return sc
	}
	if c.extended.Add(1); len(history) > len(sc.ids) {
		tail := history[len(sc.ids):]
		msgs := make([]message.Message, len(tail))
		for i := range tail {
			msgs[i] = *tail[i].Message
		}
		// Appending overwrites what the last run appended past the
		// cached length: that run is over.
		base := append(sc.base, compaction.ConvertToLLM(msgs)...)
		// The user messages before the base's last reply had their
		// images pruned already: only those after it are looked at,
		// and the base is pruned whole (a new array) only when one of
		// them has an image its model has now answered.
		if _, pruned := sanitize.PruneHistoryImages(base[sc.answered:]); pruned {
			base, _ = sanitize.PruneHistoryImages(base)
			// Messages the preparation was made of changed.
			sc.prepared.Reset()
		}
		sc.base = base
		sc.add(tail)
	}
	sc.answered = lastReply(sc.base, sc.answered)
	sc.promised(history, appendOnly)
	return sc
}

// lastReply returns the index of the last assistant message of msgs at
// or after from, from when there is none.
func lastReply(msgs []message.Message, from int) int {
	for i := len(msgs) - 1; i > from; i-- {
		if msgs[i].Role == message.RoleAssistant {
			return i
		}
	}
	return from
}

// promised records history as the array sc was built from when its caller
// promised never to write it again below its length (appendOnly).
func (sc *sessionContext) promised(history []message.Entry, appendOnly bool) {
	switch {
	case !appendOnly || len(history) == 0:
		sc.first = weak.Pointer[message.Entry]{}
	case sc.first.Value() != &history[0]:
		sc.first = weak.Make(&history[0])
	}
}

// release keeps sc for the session's next run, dropping the least
// recently used sessions beyond the budget; a session over half the
// budget is not kept.
func (c *contextCache) release(sc *sessionContext) {
	if c == nil || sc == nil || sc.key == "" {
		return
	}
	sc.size = sc.text + len(sc.ids)*contextEntryOverhead + cap(sc.base)*int(unsafe.Sizeof(message.Message{})) + sc.sizes.Bytes() + sc.prepared.Bytes()
	c.mu.Lock()
	defer c.mu.Unlock()
	// A concurrent run of the session may have put its own: this one is newer.
	c.sessions.Put(sc.key, sc, sc.size)
}

// extends reports whether history is the history sc was built from
// followed by message entries, each the child of the entry before it.
// The last entry sc was built from is always compared (a history rolled
// back and grown again, whatever was promised, has another entry there);
// the entries before it only when history is not over the array sc was
// built from under the promise never to write it again (sc.first), each
// counted by compare.
func (sc *sessionContext) extends(history []message.Entry, compare func(n int)) bool {
	n := len(sc.ids)
	if n == 0 || len(history) < n {
		return false
	}
	if history[n-1].ID != sc.ids[n-1] || history[n-1].Message != sc.msgs[n-1] {
		return false
	}
	if sc.first.Value() != &history[0] {
		compare(n - 1)
		for i := range n - 1 {
			if history[i].ID != sc.ids[i] || history[i].Message != sc.msgs[i] {
				return false
			}
		}
	}
	for i := n; i < len(history); i++ {
		e, prev := &history[i], &history[i-1]
		if e.Type != message.EntryMessage || e.Message == nil || e.ParentID == nil || prev.ID == "" || *e.ParentID != prev.ID {
			return false
		}
	}
	return true
}

// add records entries as part of sc's history and counts what they hold:
// texts, and the JSON of tool-call arguments and details (a file written
// by a tool call can be megabytes), so the cache's budget bounds them.
func (sc *sessionContext) add(entries []message.Entry) {
	for i := range entries {
		e := &entries[i]
		sc.ids = append(sc.ids, e.ID)
		sc.msgs = append(sc.msgs, e.Message)
		sc.text += len(e.ID)
		m := e.Message
		if m == nil {
			continue
		}
		for _, b := range m.Content.Blocks {
			sc.text += len(b.Text) + len(b.Thinking) + len(b.Data)
			if b.Arguments != nil {
				sc.text += len(ecmatext.AppendJSON(nil, b.Arguments))
			}
		}
		if m.Details != nil {
			sc.text += len(ecmatext.AppendJSON(nil, m.Details))
		}
	}
}

// contextEntryOverhead is what a kept entry costs besides its text and
// its message in the context: the id and pointer that identify it.
const contextEntryOverhead = 48

// compare counts n entries compared (contextCache.compared).
func (c *contextCache) compare(n int) { c.compared.Add(int64(n)) }

// take removes and returns the session's entry, nil if none.
func (c *contextCache) take(key string) *sessionContext {
	c.mu.Lock()
	defer c.mu.Unlock()
	sc, _ := c.sessions.Take(key)
	return sc
}
