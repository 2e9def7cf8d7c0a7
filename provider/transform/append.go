package transform

import (
	"maps"
	"slices"
	"unsafe"
	"weak"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// Appender keeps what Messages made of the first messages of a list that
// its caller promises never to write again, and the pass's state after
// them, so that the same list followed by more messages is prepared by
// preparing only those: a long session's request does not walk its whole
// history again (Messages' result for a list followed by more is its
// result for the list followed by theirs).
//
// What it keeps is used only for the very array it was made of (the same
// first message in memory, which a weak pointer identifies without
// keeping the array alive), as long as it is at least as long, for the
// same key (the target and normalizeID); anything else — another array
// (a compaction, a rollback, a branch, the history limit), another model,
// a shorter promise — starts over with the whole list. The zero value is
// empty; an Appender is used by one caller at a time.
type Appender struct {
	key   string
	first weak.Pointer[message.Message] // the kept source array's first message
	n     int                           // source messages kept
	// out is the result kept for src[:n] when it is owned; else that
	// result is src[:n] itself. No array out names is written again below
	// len(out): later results go beyond it.
	out   []message.Message
	owned bool
	p     pass
	// Starts counts the calls that kept nothing usable and prepared the
	// whole list (tests).
	Starts int
}

// Reset empties a.
func (a *Appender) Reset() {
	a.key, a.first, a.n, a.out, a.owned, a.p = "", weak.Pointer[message.Message]{}, 0, nil, false, pass{}
}

// Bytes estimates the memory a holds besides what it shares with the
// messages: its array of results and its map of rewritten ids.
func (a *Appender) Bytes() int {
	n := cap(a.out)*int(unsafe.Sizeof(message.Message{})) + cap(a.p.pending)*int(unsafe.Sizeof(call{}))
	for k, v := range a.p.idMap {
		n += len(k) + len(v) + 48
	}
	return n + len(a.p.answered)*48
}

// appendRoom is the spare room kept after the results for a turn's
// messages.
const appendRoom = 16

// Messages returns Messages(msgs, target, normalizeID) and how many of its
// first messages are never written again (provider.Request.Immutable of
// the result; a next call that keeps them returns the same array):
// msgs[:immutable] are never
// written again by the caller, and key names target and normalizeID
// (normalizeID must be a function of key). The result of msgs[:immutable]
// is kept, and a later call with the same array and key prepares only the
// messages after what it keeps. The result is valid until the next call:
// the results of messages past immutable go in the spare capacity of a's
// array.
func (a *Appender) Messages(msgs []message.Message, immutable int, key string, target provider.Model, normalizeID func(string) string) (out []message.Message, kept int) {
	immutable = min(max(immutable, 0), len(msgs))
	// What a keeps is msgs' only if msgs are the array it was made of
	// (a compaction, a rollback, a branch, the history limit or a re-read
	// make another), still promised at least as far (which a list
	// shorter than a's is not), for the same target.
	if a.n == 0 || key != a.key || immutable < a.n || a.first.Value() != &msgs[0] {
		a.Reset()
		a.Starts++
	}
	if immutable == 0 {
		return Messages(msgs, target, normalizeID), 0
	}
	a.key = key
	a.first = weak.Make(&msgs[0])
	// The messages the caller now promises: kept.
	l := list{src: msgs, n: a.n, out: a.out, owned: a.owned}
	if l.owned && cap(l.out)-len(l.out) < immutable-a.n+appendRoom {
		l.out = slices.Grow(l.out, immutable-a.n+appendRoom+len(l.out)/4)
	}
	for i := a.n; i < immutable; i++ {
		a.p.step(&l, i, target, normalizeID)
	}
	a.n, a.out, a.owned = immutable, l.out, l.owned
	if l.owned && cap(l.out)-len(l.out) < len(msgs)-immutable+1 {
		a.out = slices.Grow(l.out, len(msgs)-immutable+appendRoom)
	}
	if immutable == len(msgs) {
		if a.owned {
			return a.out, len(a.out)
		}
		return msgs, a.n
	}
	// The rest, from a copy of the pass: the rewritten ids it adds go in
	// a map of their own over the kept one.
	p := pass{base: a.p.idMap, pending: slices.Clone(a.p.pending), answered: maps.Clone(a.p.answered)}
	l = list{src: msgs, n: a.n, out: a.out, owned: a.owned}
	for i := a.n; i < len(msgs); i++ {
		p.step(&l, i, target, normalizeID)
	}
	if !l.owned {
		return msgs, a.n
	}
	if !a.owned {
		// The rest needed a copy of the kept messages (one result each):
		// the kept result is that copy from now on, one copy rather than
		// one a call.
		a.out, a.owned = l.out[:a.n], true
	}
	return l.out, len(a.out)
}
