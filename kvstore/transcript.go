package kvstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/lanes/queue"
	"github.com/lanefleet/lanefleet/message"
)

// Record is the transcript of one turn: the pi session entries it added,
// keyed by the inbound message that started it. A turn re-run after a crash
// writes the same key, so it replaces the earlier record instead of
// duplicating it.
type Record struct {
	InboundSeq uint64 `msgpack:"inboundSeq"`
	RunID      string `msgpack:"runId"`
	SessionID  string `msgpack:"sessionId,omitempty"`
	// Reset starts the transcript anew (the chat commands /new and
	// /reset): the records written before it are no longer the session's
	// and every read of the transcript leaves them out.
	Reset bool `msgpack:"reset,omitempty"`
	// Start is the stream sequence of the reset record the session's
	// transcript starts at, on the records written after one (0 = the
	// transcript starts at the lane's first record): a reader that pages
	// through the transcript starts there.
	Start uint64 `msgpack:"start,omitempty"`
	// Header is the session header of an imported file (the import
	// record only): an export gives it back as it was.
	Header  *message.Entry  `msgpack:"header,omitempty"`
	Entries []message.Entry `msgpack:"entries"`
	// Final is the run's encoded final event, so a turn that was committed
	// just before a crash can have its final event published again without
	// running the model a second time.
	Final []byte `msgpack:"final,omitempty"`
	// State is the session's state once this turn committed (its sticky
	// auth profile, its running usage): the newest record's is the
	// session's, so it changes exactly with a committed turn.
	State *events.SessionState `msgpack:"state,omitempty"`
	// IDs are the message ids the lane used within its de-duplication
	// window up to this turn (lanes/queue.IDs): the newest record's are
	// the lane's.
	IDs []queue.SeenID `msgpack:"ids,omitempty"`
	// Outbox is a message the turn owes another session's lane (a
	// sub-agent's completion to its parent): published, by whoever
	// publishes the record's final event, before that event.
	Outbox *Outbox `msgpack:"outbox,omitempty"`
}

// Outbox is a message a committed turn owes another lane: the session
// it goes to, its message id (both Nats-Msg-Id and Lanefleet-Msg-Id, so a
// second publish is dropped) and the encoded inbound message.
type Outbox struct {
	Session string `msgpack:"session"`
	ID      string `msgpack:"id"`
	Data    []byte `msgpack:"data"`
}

// Record reads the record of one turn (leader read). A record that does not
// decode is a *CorruptError.
func (l *Lanes) Record(ctx context.Context, token string, seq uint64) (Record, bool, error) {
	var r Record
	e, err := l.kv.Get(ctx, recordKey(token, seq))
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return r, false, nil
	}
	if err != nil {
		return r, false, fmt.Errorf("kvstore: record %s/%d: %w", token, seq, err)
	}
	if err := decode(e.Key(), e.Revision(), e.Value(), &r); err != nil {
		return Record{}, false, err
	}
	return r, true, nil
}

// Cursor is a lane's progress: the inbound sequence of its last committed
// turn. It is not stored on its own: the newest record is the cursor, so a
// turn commits with one fenced write.
type Cursor struct {
	Seq       uint64
	SessionID string
	// Stored is the stream sequence of the lane's newest transcript
	// message (its newest record, or a marker that removed one); 0 = none.
	// While the lease is held only its holder adds to the transcript, so
	// a copy of the transcript read up to Stored is the whole of it.
	Stored uint64
	State  *events.SessionState // the newest record's session state; nil = none
	IDs    []queue.SeenID       // the newest record's message ids (Record.IDs)
	// Start is the stream sequence of the record the transcript starts at
	// after a reset (Record.Reset, Record.Start); 0 = the lane's first.
	Start uint64
}

// Cursor reads a lane's cursor (zero value for a new lane) from its newest
// record, on the stream leader. When that record does not decode, Cursor
// returns the position its key names, without a session id, and a
// *CorruptError: the lane can go on.
func (l *Lanes) Cursor(ctx context.Context, token string) (Cursor, error) {
	raw, err := l.stream.GetLastMsgForSubject(ctx, l.prefix+token+".tx.>")
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Cursor{}, nil
	}
	if err != nil {
		return Cursor{}, fmt.Errorf("kvstore: cursor %s: %w", token, err)
	}
	if len(raw.Data) == 0 {
		return Cursor{Stored: raw.Sequence}, nil // the transcript was deleted
	}
	var r Record
	if err := decode(strings.TrimPrefix(raw.Subject, l.prefix), raw.Sequence, raw.Data, &r); err != nil {
		seq, ok := recordSeq(raw.Subject)
		if !ok {
			return Cursor{}, fmt.Errorf("kvstore: cursor %s: %w", token, err)
		}
		return Cursor{Seq: seq, Stored: raw.Sequence}, err
	}
	c := Cursor{Seq: r.InboundSeq, SessionID: r.SessionID, Stored: raw.Sequence, State: r.State, IDs: r.IDs, Start: r.Start}
	if r.Reset {
		c.Start = raw.Sequence
	}
	return c, nil
}

// Newest reads a lane's newest transcript record and when it was stored
// (leader read); ok is false when the lane has none, or its newest was
// deleted. A record that does not decode is a *CorruptError.
func (l *Lanes) Newest(ctx context.Context, token string) (rec Record, stored time.Time, ok bool, err error) {
	raw, err := l.stream.GetLastMsgForSubject(ctx, l.prefix+token+".tx.>")
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Record{}, time.Time{}, false, nil
	}
	if err != nil {
		return Record{}, time.Time{}, false, fmt.Errorf("kvstore: newest record %s: %w", token, err)
	}
	if len(raw.Data) == 0 {
		return Record{}, time.Time{}, false, nil
	}
	if err := decode(strings.TrimPrefix(raw.Subject, l.prefix), raw.Sequence, raw.Data, &rec); err != nil {
		return Record{}, time.Time{}, false, err
	}
	return rec, raw.Time, true, nil
}

// Written says where a record was written: its stream sequence and its
// encoded size.
type Written struct {
	Seq  uint64
	Size int
}

// PutRecord writes a turn record under the fence.
func (s *Lease) PutRecord(ctx context.Context, r Record) (Written, error) {
	data, err := encodeRecord(&r)
	if err != nil {
		return Written{}, fmt.Errorf("kvstore: encode record: %w", err)
	}
	seq, err := s.put(ctx, recordKey(s.token, r.InboundSeq), data)
	return Written{Seq: seq, Size: len(data)}, err
}

// Records reads a lane's transcript records in the order they were written.
// Records that do not decode are skipped: the others are returned along
// with a *CorruptError for each skipped one (joined), so a caller that can
// go on without them does. See ReadTranscript for how it reads.
func (l *Lanes) Records(ctx context.Context, token string) ([]Record, error) {
	t, err := l.ReadTranscript(ctx, token, 1)
	if err != nil && !errors.Is(err, ErrCorrupt) {
		return nil, err
	}
	return t.Records, err
}

// Transcript is what ReadTranscript found from a stream position on.
type Transcript struct {
	Records []Record
	Size    int    // encoded bytes of Records
	First   uint64 // stream sequence of the first of Records; 0 = none
	// Begin is the stream sequence of the first transcript message read
	// (a record, a marker, or a record a reset hides); 0 = none.
	Begin uint64
	// Last is the stream sequence of the last transcript message read (a
	// record or a marker); 0 = none.
	Last uint64
	// Removed reports a delete or purge marker among the messages read: a
	// record seen before may be gone.
	Removed bool
}

// Read sizes of ReadTranscript.
const (
	// singleReads is how many records a read fetches one request each
	// before it asks for the rest in batches: a short transcript costs
	// no consumer.
	singleReads = 4
	// batchMax bounds the messages of one batch request.
	batchMax = 1024
	// readTimeout bounds one request of a read: a request lost in a
	// leader change is retried by the caller instead of waiting out the
	// read's deadline.
	readTimeout = 5 * time.Second
)

// ReadTranscript reads a lane's transcript messages stored at or after
// stream sequence from, in the order they were written (leader reads).
// Records that do not decode are skipped, with a *CorruptError each
// (joined) next to what was read.
//
// The first few records are read one request each (next message by subject
// filter); the rest in batches, through an ephemeral consumer over the
// lane's records that is deleted after the read, so a long transcript
// costs a handful of requests, not one per record. A batch that fails
// (a leader change, a consumer placed on a replica that lags) ends early
// and the read goes on one record at a time from where it stopped, which
// also always ends it: every read ends with a leader read finding nothing
// more, so a batch can never hide the newest records.
func (l *Lanes) ReadTranscript(ctx context.Context, token string, from uint64) (Transcript, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Minute)
		defer cancel()
	}
	filter := l.prefix + token + ".tx.>"
	b := &transcriptBuilder{prefix: l.prefix, at: map[string]int{}}
	next := max(from, 1)
	add := func(seq uint64, subject string, h nats.Header, data []byte) {
		next = seq + 1
		b.add(seq, subject, h, data)
	}
	for reads := 0; ; reads++ {
		if reads == singleReads {
			// A failed batch leaves next where it stopped.
			_ = l.batch(ctx, filter, next, add)
		}
		rctx, cancel := context.WithTimeout(ctx, readTimeout)
		raw, err := l.stream.GetMsg(rctx, next, jetstream.WithGetMsgSubject(filter))
		cancel()
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return b.t, errors.Join(b.corrupt...)
		}
		if err != nil {
			return Transcript{}, fmt.Errorf("kvstore: records %s: %w", token, err)
		}
		add(raw.Sequence, raw.Subject, raw.Header, raw.Data)
	}
}

// transcriptBuilder collects a read's transcript messages, in stream order,
// into a Transcript. A key's newest message wins: a batch's consumer may
// sit on a replica that lags and hand over a record's older copy, which
// the leader has replaced or deleted since and whose newer message the
// read's leader reads then bring.
type transcriptBuilder struct {
	prefix  string
	t       Transcript
	corrupt []error
	at      map[string]int // a key's record in t.Records
	sizes   []int          // each record's encoded bytes
	seqs    []uint64       // each record's stream sequence
}

func (b *transcriptBuilder) add(seq uint64, subject string, h nats.Header, data []byte) {
	b.t.Last = seq
	if b.t.Begin == 0 {
		b.t.Begin = seq
	}
	if i, ok := b.at[subject]; ok {
		b.t.Size -= b.sizes[i]
		b.t.Records, b.sizes, b.seqs = slices.Delete(b.t.Records, i, i+1), slices.Delete(b.sizes, i, i+1), slices.Delete(b.seqs, i, i+1)
		b.t.First = 0
		if len(b.seqs) > 0 {
			b.t.First = b.seqs[0] // the first record may be the one gone
		}
		delete(b.at, subject)
		for k, j := range b.at {
			if j > i {
				b.at[k] = j - 1
			}
		}
		b.t.Removed = true
	}
	if len(data) == 0 || h.Get("KV-Operation") != "" {
		b.t.Removed = true // a delete or purge marker
		return
	}
	var r Record
	if err := decode(strings.TrimPrefix(subject, b.prefix), seq, data, &r); err != nil {
		b.corrupt = append(b.corrupt, err)
		return
	}
	if r.Reset {
		// The transcript starts anew here: what came before is hidden.
		b.t.Records, b.sizes, b.seqs, b.t.Size, b.t.First = nil, nil, nil, 0, 0
		clear(b.at)
	}
	if b.t.First == 0 {
		b.t.First = seq
	}
	b.at[subject] = len(b.t.Records)
	b.t.Records, b.sizes, b.seqs = append(b.t.Records, r), append(b.sizes, len(data)), append(b.seqs, seq)
	b.t.Size += len(data)
}

// batch reads the messages of filter from stream sequence from on through
// an ephemeral consumer, handing each to add, and deletes the consumer.
func (l *Lanes) batch(ctx context.Context, filter string, from uint64, add func(seq uint64, subject string, h nats.Header, data []byte)) error {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	cons, err := l.stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from, FilterSubject: filter,
		AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true, Replicas: 1,
		// Deleted below; should that fail, the server removes it soon.
		InactiveThreshold: 30 * time.Second,
	})
	if err != nil {
		return err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
		defer cancel()
		_ = l.stream.DeleteConsumer(dctx, cons.CachedInfo().Name)
	}()
	for pending := cons.CachedInfo().NumPending; pending > 0; {
		deadline, _ := ctx.Deadline()
		b, err := cons.Fetch(int(min(pending, batchMax)), jetstream.FetchMaxWait(time.Until(deadline)))
		if err != nil {
			return err
		}
		got := 0
		for m := range b.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return err
			}
			add(md.Sequence.Stream, m.Subject(), m.Headers(), m.Data())
			pending = md.NumPending
			got++
		}
		if err := b.Error(); err != nil {
			return err
		}
		if got == 0 {
			return errors.New("kvstore: a transcript batch brought nothing")
		}
	}
	return nil
}

// FirstStored returns the stream sequence of the lane's first transcript
// message (a record or a marker), 0 when there is none (leader read).
func (l *Lanes) FirstStored(ctx context.Context, token string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	raw, err := l.stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(l.prefix+token+".tx.>"))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("kvstore: first record of %s: %w", token, err)
	}
	return raw.Sequence, nil
}

// Entries flattens records into the session's entries.
func Entries(records []Record) []message.Entry {
	var n int
	for _, r := range records {
		n += len(r.Entries)
	}
	out := make([]message.Entry, 0, n)
	for _, r := range records {
		out = append(out, r.Entries...)
	}
	return out
}

// ErrNotEmpty is returned when importing into a session that has a transcript.
var ErrNotEmpty = errors.New("kvstore: the session already has a transcript")

// Import stores entries (a pi session's entries) and their header as the
// transcript of a new, empty lane; the header's id is the session id. It
// takes the lane's lease for the write, so it fails with ErrHeld while a
// worker runs the lane and never races a turn.
func (l *Lanes) Import(ctx context.Context, token string, header message.Entry, info LeaseInfo, entries []message.Entry) error {
	lease, err := l.Acquire(ctx, token, info)
	if err != nil {
		return err
	}
	defer func() { _ = lease.Release(context.WithoutCancel(ctx)) }()
	if _, err := l.stream.GetLastMsgForSubject(ctx, l.prefix+token+".tx.>"); err == nil {
		return ErrNotEmpty
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("kvstore: import %s: %w", token, err)
	}
	_, err = lease.PutRecord(ctx, Record{InboundSeq: 0, RunID: "import", SessionID: header.ID, Header: &header, Entries: entries})
	return err
}
