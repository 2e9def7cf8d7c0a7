package kvstore

import (
	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/mpw"
	"github.com/lanefleet/lanefleet/message"
)

// encodeRecord is msgpack.Marshal(r), the same bytes: every turn writes a
// record, and the library's reflection over it (its omitempty check boxes
// each field, then each of up to 64 message ids) cost a turn tens of
// allocations. A record of the usual shape is written by hand; one with
// an import's header or an outbox goes through the library
// (TestEncodeRecordAsLibrary).
func encodeRecord(r *Record) ([]byte, error) {
	if r.Header != nil || r.Outbox != nil {
		return msgpack.Marshal(r)
	}
	b := make([]byte, 0, 256+256*len(r.Entries)+len(r.Final)+36*len(r.IDs)) // an id: a map of three 9-byte numbers
	m := mpw.Begin(b)
	b = mpw.Uint64(m.Key(b, "inboundSeq"), r.InboundSeq)
	b = mpw.Str(m.Key(b, "runId"), r.RunID)
	b = m.OptStr(b, "sessionId", r.SessionID)
	b = m.OptBool(b, "reset", r.Reset)
	b = m.OptUint64(b, "start", r.Start)
	b = m.Key(b, "entries")
	if r.Entries == nil {
		b = mpw.Nil(b)
	} else {
		b = mpw.ArrayLen(b, len(r.Entries))
		for i := range r.Entries {
			var err error
			if b, err = message.AppendEntry(b, &r.Entries[i]); err != nil {
				return nil, err
			}
		}
	}
	if len(r.Final) > 0 {
		b = mpw.Bin(m.Key(b, "final"), r.Final)
	}
	if r.State != nil {
		b = events.AppendSessionState(m.Key(b, "state"), r.State)
	}
	b = m.OptArrayLen(b, "ids", len(r.IDs))
	for _, id := range r.IDs {
		im := mpw.Begin(b)
		b = mpw.Uint64(im.Key(b, "h"), id.Hash)
		b = mpw.Uint64(im.Key(b, "s"), id.Seq)
		b = mpw.Int64(im.Key(b, "t"), id.At)
		b = im.End(b)
	}
	return m.End(b), nil
}
