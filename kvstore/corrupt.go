package kvstore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/lanefleet/lanefleet/events"
)

// ErrCorrupt is wrapped by the error of a stored value that does not decode:
// written by something other than a worker, or damaged. Only workers write
// the lanes bucket, so a corrupt value is never a reason to stop a lane:
//
//   - a transcript record that does not decode is skipped: Records returns
//     the others along with the error, the turn's entries are missing from
//     the history the model sees, and the value stays in the bucket for an
//     operator to inspect;
//   - when the newest record is corrupt, Cursor still returns the lane's
//     position (the turn's inbound sequence is the record's key), without a
//     session id, along with the error;
//   - a lease whose value does not decode is still a lease: Holder reports
//     it held (by an unknown owner) along with the error.
//
// Callers that can go on (the lane owner) log the error and continue with
// what they got; readers that cannot (a client printing a transcript)
// return it.
var ErrCorrupt = errors.New("kvstore: stored value does not decode")

// CorruptError is a stored value that does not decode.
type CorruptError struct {
	Key string // the value's key in the bucket
	Seq uint64 // its stream sequence (revision); 0 when unknown
	Err error  // the decoder's error (an *events.MsgpackError)
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("kvstore: %s (stream seq %d) does not decode: %v", e.Key, e.Seq, e.Err)
}

// Unwrap returns ErrCorrupt and the decoder's error.
func (e *CorruptError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }

// decode decodes a msgpack value of the bucket through the bounded decoder:
// a value declaring more than it holds, or nested too deep, is an error, not
// an allocation or a stack overflow.
func decode(key string, seq uint64, data []byte, v any) error {
	if err := events.UnmarshalMsgpack(data, v); err != nil {
		return &CorruptError{Key: key, Seq: seq, Err: err}
	}
	return nil
}

// recordSeq returns the inbound sequence a transcript record's subject
// (…<token>.tx.<seq>) names.
func recordSeq(subject string) (uint64, bool) {
	i := strings.LastIndexByte(subject, '.')
	if i < 0 || !strings.HasSuffix(subject[:i], ".tx") {
		return 0, false
	}
	seq, err := strconv.ParseUint(subject[i+1:], 10, 64)
	return seq, err == nil
}
