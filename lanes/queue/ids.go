package queue

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"sync"
	"time"
)

// SeenID is a message id a lane has used, as the lane's turn records keep
// it (kvstore.Record.IDs): only a hash of the id, the inbound sequence (and
// run) of the first message that used it, and when the stream stored that
// message.
type SeenID struct {
	Hash uint64 `msgpack:"h"` // IDHash of the id
	Seq  uint64 `msgpack:"s"`
	At   int64  `msgpack:"t"` // Unix ms
}

// MaxRecentIDs bounds the ids a lane's turn record carries: a lane that
// took more messages than that within the window forgets the oldest ids
// early.
const MaxRecentIDs = 64

// IDs are the message ids a lane has seen, for de-duplication on the lane:
// a message whose id (its Lanefleet-Msg-Id header) an earlier message of
// the same lane used, stored at most the window before it, duplicates that
// first message and is not run (KindDuplicate). It is JetStream's
// Nats-Msg-Id de-duplication kept per lane: the stream's is stream-wide,
// so a sender could store another session's next id first and make that
// session's message vanish. A lane's owner starts from the ids its newest
// turn record carries (Recent) and notes every message it reads. The
// window is measured between the two messages' stream times, so every
// owner decides alike. Safe for concurrent use.
type IDs struct {
	window time.Duration
	mu     sync.Mutex
	first  map[uint64]SeenID // by id hash: the first message that used it
	prune  int               // forget expired ids when more than this are kept
}

// NewIDs returns the ids seen as a record carried them, with the window.
func NewIDs(window time.Duration, seen []SeenID) *IDs {
	d := &IDs{window: window, first: make(map[uint64]SeenID, len(seen))}
	for _, s := range seen {
		d.keep(s)
	}
	return d
}

// IDHash is the hash kept of a message id.
func IDHash(id string) uint64 {
	sum := sha256.Sum256([]byte(id))
	return binary.BigEndian.Uint64(sum[:8])
}

// keep records s unless an earlier message of its id is kept within the
// window before it.
func (d *IDs) keep(s SeenID) {
	if e, ok := d.first[s.Hash]; ok && e.Seq <= s.Seq && s.At-e.At <= d.window.Milliseconds() {
		return
	}
	d.first[s.Hash] = s
}

// Note records the message seq with id, stored at at, and returns the
// sequence of the message it duplicates (0: none, or no id). Noting a
// message again returns the same.
func (d *IDs) Note(id string, seq uint64, at time.Time) uint64 {
	if d == nil || id == "" {
		return 0
	}
	s := SeenID{Hash: IDHash(id), Seq: seq, At: at.UnixMilli()}
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.first[s.Hash]; ok && e.Seq < seq && s.At-e.At <= d.window.Milliseconds() {
		return e.Seq
	}
	d.keep(s)
	if len(d.first) > max(d.prune, 4*MaxRecentIDs) {
		// A long drain: forget what no later message can duplicate (the
		// owner reads in lane order, and a message read again after
		// this is noted again before any later one). The next pass
		// waits until the ids kept have doubled.
		for h, e := range d.first {
			if s.At-e.At > d.window.Milliseconds() {
				delete(d.first, h)
			}
		}
		d.prune = 2 * len(d.first)
	}
	return 0
}

// Recent returns what the record of a turn that consumed the lane through
// seq carries: the ids of its messages up to through, stored within the
// window before newest (the latest of them; no later message can
// duplicate an older one), the newest MaxRecentIDs of them.
func (d *IDs) Recent(through uint64, newest time.Time) []SeenID {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	from := newest.UnixMilli() - d.window.Milliseconds()
	var out []SeenID
	for _, s := range d.first {
		if s.Seq <= through && s.At >= from {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b SeenID) int { return cmp.Compare(a.Seq, b.Seq) })
	if len(out) > MaxRecentIDs {
		out = out[len(out)-MaxRecentIDs:]
	}
	return out
}

// Known reports whether a message with id, arriving now, would duplicate
// one seen (a message not read yet: the watch of a running turn asks).
func (d *IDs) Known(id string, now time.Time) bool {
	if d == nil || id == "" {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.first[IDHash(id)]
	return ok && now.UnixMilli()-e.At <= d.window.Milliseconds()
}

// Clone returns a copy that later notes do not change.
func (d *IDs) Clone() *IDs {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	c := &IDs{window: d.window, first: make(map[uint64]SeenID, len(d.first))}
	for k, v := range d.first {
		c.first[k] = v
	}
	return c
}
