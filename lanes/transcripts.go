package lanes

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/bytelru"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/message"
)

// transcriptCacheBytes bounds the transcripts a worker keeps, by the
// memory their decoded entries hold (message.Entry.Bytes) plus what the
// cache charges each lane besides (its token and bytelru.EntryOverhead):
// about 30,000 turns of short messages. A record's encoded size is no
// measure of that: most of a busy session's record is its de-duplication
// ids and final event, which the cache does not keep (charged by it, 64
// sessions of a few hundred turns overflowed the cache), and a quiet
// session's decoded entries take about three times their encoding
// (charged by it, the cache held some 50 MB of heap). A session too long
// to be kept (over half of it) is read whole, in batches, at each owner's
// first turn.
const transcriptCacheBytes = 32 << 20

// transcripts keeps the transcripts of the lanes this worker ran lately,
// so that the lane's next owner on this worker reads only what it lacks: a
// turn's cost does not grow with its session's length. An entry is only
// trusted against the store: a lane's owner reads its cursor, whose Stored
// names the newest transcript message, and uses the entry only up to that
// (see history). Least recently used entries go first when the encoded
// bytes exceed max.
type transcripts struct {
	mu    sync.Mutex
	lanes *bytelru.Cache[*transcript]
	// How owners got their transcripts: the cached copy as it was, the
	// copy and the records added since, a whole read.
	hits, tails, reads atomic.Int64
}

// transcript is one lane's cached transcript.
type transcript struct {
	token   string
	entries []message.Entry
	first   uint64 // stream sequence of its first record; 0 = none
	// origin is the stream sequence of the lane's first transcript
	// message when this copy was read (first, unless markers or records
	// a reset hides come before it); 0 = none.
	origin  uint64
	last    uint64 // stream sequence of the newest transcript message read
	inbound uint64 // the inbound sequence of its newest record
	size    int    // memory its entries hold (message.EntriesBytes)
	// settings are the lane's stored settings as of the record at stream
	// sequence settingsAt (0 = not known): this worker committed that
	// record, after any settings it stored. Settings change only under
	// the lease, followed by a record, so while the newest transcript
	// message is still that record they are still these.
	settings   *events.Settings
	settingsAt uint64
	// finalsStoredAt is the connection's reconnect count when this worker
	// stored the final events its newest record owes, plus one; 0 = not
	// known to be stored.
	finalsStoredAt uint64
}

func newTranscripts(maxBytes int) *transcripts {
	return &transcripts{lanes: bytelru.New[*transcript](maxBytes)}
}

// get returns the lane's cached transcript, nil if none.
func (c *transcripts) get(token string) *transcript {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.lanes.Get(token)
	if !ok {
		return nil
	}
	t := *e
	return &t
}

// put stores t as its lane's transcript, replacing what was cached, and
// evicts the least recently used ones beyond the budget. A transcript
// larger than half the budget is not kept: it would evict nearly every
// other lane on each of its turns.
func (c *transcripts) put(t *transcript) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(t)
}

func (c *transcripts) putLocked(t *transcript) {
	cp := *t
	c.lanes.Put(t.token, &cp, t.size)
}

// drop forgets the lane's transcript.
func (c *transcripts) drop(token string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lanes.Remove(token)
}

// loadHistory gets the transcript once per drain, before the turn counts as
// an attempt: a store that is briefly unavailable delays the lane but never
// dead-letters a message. The worker's copy from an earlier turn is used
// as far as it goes (readHistory).
func (o *owner) loadHistory(ctx context.Context) error {
	if o.lane.tx != nil {
		return nil
	}
	tx, err := o.readHistory(ctx, o.lane.cursor)
	if errors.Is(err, kvstore.ErrCorrupt) {
		o.log.Error().Err(err).Msg("transcript records unreadable: the turn runs without them")
	} else if err != nil {
		return err
	}
	o.lane.tx = tx
	return nil
}

// readHistory returns the lane's transcript as its owner (holding the
// lease, having read cursor c) must see it, reading from the store only
// what the cache lacks:
//   - no transcript message stored: none, without a read;
//   - the cached copy ends at the newest message: the copy;
//   - newer records were added (by another worker's turns): those, when the
//     copy's first record is still stored and the new ones only append;
//   - anything else (nothing cached, records removed or rewritten): the
//     whole transcript, read in batches.
//
// A record that does not decode is left out, with the *CorruptError.
func (o *owner) readHistory(ctx context.Context, c kvstore.Cursor) (*transcript, error) {
	cache := o.transcripts
	if c.Stored == 0 {
		cache.drop(o.token)
		return &transcript{token: o.token}, nil
	}
	if t := cache.get(o.token); t != nil && t.first != 0 {
		switch {
		case t.last == c.Stored:
			cache.hits.Add(1)
			return t, nil
		case t.last < c.Stored:
			tail, err := o.store.ReadTranscript(ctx, o.token, t.last+1)
			if err != nil && !errors.Is(err, kvstore.ErrCorrupt) {
				return nil, err
			}
			if err == nil && !tail.Removed && appends(t, tail) && o.stillStored(ctx, t.origin) {
				cache.tails.Add(1)
				return cache.extend(t, tail), nil
			}
		}
	}
	cache.reads.Add(1)
	all, err := o.store.ReadTranscript(ctx, o.token, 1)
	if err != nil && !errors.Is(err, kvstore.ErrCorrupt) {
		cache.drop(o.token)
		return nil, err
	}
	entries := kvstore.Entries(all.Records)
	t := &transcript{token: o.token, entries: entries, first: all.First, origin: all.Begin, last: all.Last, size: message.EntriesBytes(entries)}
	if n := len(all.Records); n > 0 {
		t.inbound = all.Records[n-1].InboundSeq
	}
	if err == nil && t.first != 0 {
		cache.put(t)
	} else {
		cache.drop(o.token)
	}
	return t, err
}

// appends reports whether tail's records all come after t's newest: a
// record written again (a turn re-run after its record was stored) replaces
// one t has, and a reset record hides it, which only a whole read gets
// right.
func appends(t *transcript, tail kvstore.Transcript) bool {
	prev := t.inbound
	for _, r := range tail.Records {
		if r.InboundSeq <= prev || r.Reset {
			return false // a reset hides what t has: a whole read starts at it
		}
		prev = r.InboundSeq
	}
	return true
}

// stillStored reports whether the lane's first transcript message is still
// the one at stream sequence first (a copy's origin): records removed since (a retention
// pass forgot the session, and the markers saying so expired) make a
// cached copy wrong even when the newest records only append.
func (o *owner) stillStored(ctx context.Context, first uint64) bool {
	seq, err := o.store.FirstStored(ctx, o.token)
	return err == nil && seq == first
}

// committed returns t with a turn's record, stored at w, appended, and
// caches it.
func (c *transcripts) committed(t *transcript, rec kvstore.Record, w kvstore.Written) *transcript {
	if rec.Reset {
		t = &transcript{token: t.token, origin: t.origin} // the record starts the transcript anew
	}
	return c.extend(t, kvstore.Transcript{Records: []kvstore.Record{rec}, First: w.Seq, Last: w.Seq, Size: w.Size})
}

// extend returns base with the records of tail appended, and caches it.
// The entries are appended in place when base is the lane's cached copy
// (nobody reads past a copy's end, and base's owner is the only one
// extending it); any other base is copied first, so two copies never grow
// into the same array.
func (c *transcripts) extend(base *transcript, tail kvstore.Transcript) *transcript {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := *base
	entries := t.entries
	if e, ok := c.lanes.Peek(base.token); !ok || !sameCopy(e, base) {
		entries = entries[:len(entries):len(entries)]
	}
	for _, r := range tail.Records {
		entries = append(entries, r.Entries...)
		t.size += message.EntriesBytes(r.Entries)
		t.inbound = r.InboundSeq
	}
	t.entries = entries
	if t.first == 0 {
		t.first = tail.First
	}
	if t.origin == 0 {
		t.origin = tail.First
	}
	t.last = max(t.last, tail.Last)
	t.finalsStoredAt = 0 // until markFinalsStored says its newest record's finals are stored
	c.putLocked(&t)
	return &t
}

// markFinalsStored notes that this worker stored the final events the lane's
// record at stream sequence seq owes, its connection having reconnected
// reconnects times before they were published.
func (c *transcripts) markFinalsStored(token string, seq, reconnects uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.lanes.Peek(token); ok && t.last == seq {
		t.finalsStoredAt = reconnects + 1
	}
}

// noteSettings records the lane's settings as of its newest record, at
// stream sequence seq, which this worker just committed.
func (c *transcripts) noteSettings(token string, seq uint64, s *events.Settings) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.lanes.Peek(token); ok && t.last == seq {
		t.settings, t.settingsAt = s, seq
	}
}

// settingsOf returns the lane's settings and the stream sequence of the
// record they are known as of (0 = not known).
func (c *transcripts) settingsOf(token string) (*events.Settings, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.lanes.Peek(token)
	if !ok {
		return nil, 0
	}
	return t.settings, t.settingsAt
}

// inboundOf returns the inbound sequence of the lane's newest record this
// worker knows (0: none): a guess at the lane's cursor, for firstLook.
func (c *transcripts) inboundOf(token string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.lanes.Peek(token); ok {
		return t.inbound
	}
	return 0
}

// finalsStored reports whether the lane's newest transcript message is still
// the record at stream sequence stored whose final events this worker
// stored, and the connection has not reconnected since: then a new owner
// need not check them. A reconnect may mean a server that restarted and
// lost events it had acknowledged (the event stream of a single server
// acknowledges before its writes reach the disk), so after one the check
// is made.
func (c *transcripts) finalsStored(token string, stored, reconnects uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.lanes.Peek(token)
	if !ok {
		return false
	}
	return t.last == stored && t.finalsStoredAt == reconnects+1
}

// sameCopy reports whether a and b are the same version of a lane's
// transcript over the same array.
func sameCopy(a, b *transcript) bool {
	if a.last != b.last || len(a.entries) != len(b.entries) {
		return false
	}
	return len(a.entries) == 0 || &a.entries[0] == &b.entries[0]
}
