package kvstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet/events"
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
	State     *events.SessionState // the newest record's session state; nil = none
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
		return Cursor{}, nil // the transcript was deleted
	}
	var r Record
	if err := decode(strings.TrimPrefix(raw.Subject, l.prefix), raw.Sequence, raw.Data, &r); err != nil {
		seq, ok := recordSeq(raw.Subject)
		if !ok {
			return Cursor{}, fmt.Errorf("kvstore: cursor %s: %w", token, err)
		}
		return Cursor{Seq: seq}, err
	}
	return Cursor{Seq: r.InboundSeq, SessionID: r.SessionID, State: r.State}, nil
}

// PutRecord writes a turn record under the fence.
func (s *Lease) PutRecord(ctx context.Context, r Record) error {
	data, err := msgpack.Marshal(&r)
	if err != nil {
		return fmt.Errorf("kvstore: encode record: %w", err)
	}
	return s.put(ctx, recordKey(s.token, r.InboundSeq), data)
}

// Records reads a lane's transcript records in the order they were written.
// Records that do not decode are skipped: the others are returned along
// with a *CorruptError for each skipped one (joined), so a caller that can
// go on without them does. It walks the stream with leader reads (next message by subject filter), one
// request per record: plain request/response survives leader changes, where
// an ordered consumer created during a failover can wait forever.
func (l *Lanes) Records(ctx context.Context, token string) ([]Record, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Minute)
		defer cancel()
	}
	filter := l.prefix + token + ".tx.>"
	var (
		out     []Record
		corrupt []error
	)
	for seq := uint64(1); ; {
		// Each read gets its own short deadline: a request lost in a leader
		// change is retried by the caller instead of waiting out the minute.
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		raw, err := l.stream.GetMsg(rctx, seq, jetstream.WithGetMsgSubject(filter))
		cancel()
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, errors.Join(corrupt...)
		}
		if err != nil {
			return nil, fmt.Errorf("kvstore: records %s: %w", token, err)
		}
		seq = raw.Sequence + 1
		if len(raw.Data) == 0 || raw.Header.Get("KV-Operation") != "" {
			continue // a delete or purge marker
		}
		var r Record
		if err := decode(strings.TrimPrefix(raw.Subject, l.prefix), raw.Sequence, raw.Data, &r); err != nil {
			corrupt = append(corrupt, err)
			continue
		}
		out = append(out, r)
	}
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
	return lease.PutRecord(ctx, Record{InboundSeq: 0, RunID: "import", SessionID: header.ID, Header: &header, Entries: entries})
}
