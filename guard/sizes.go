package guard

import (
	"unsafe"

	"github.com/lanefleet/lanefleet/message"
)

// Sizes keeps the estimates (EstimateChars) of one session's messages
// between its requests, so that the guard of a long session's request
// measures only the messages that are new: a request whose messages are
// the last request's followed by new ones costs one cheap comparison per
// old message (message.Snapshot) instead of re-measuring it.
//
// Messages are lined up with the last request's by message.Match (at the
// same position, or from where the last request holds the first one when
// the history limit dropped turns at the front); a message that is not
// the same (replaced, changed in place) is measured again, and so is every
// message after it. The zero value is ready; a Sizes is used by one
// request at a time.
type Sizes struct {
	snaps message.Snapshots
	est   []int // est[i] is the estimate of the i-th snapshot's message
	work  []int // the guard's estimates of the request in progress
	// Measured and Reused count the messages measured and the ones whose
	// estimate was reused.
	Measured, Reused int
}

// Guard runs GuardContext over msgs with the estimates s keeps and returns
// its messages: the very same result, without the per-message outcomes.
// s keeps msgs' estimates for the next request.
func (s *Sizes) Guard(msgs []message.Message, contextTokens int) []message.Message {
	return s.GuardKnown(msgs, contextTokens, 0)
}

// GuardKnown is Guard for msgs whose first known messages the caller knows
// to be the very ones, unchanged, of s's last request (the same memory,
// never written since): they are not compared again
// (message.Snapshots.UpdateKnown).
func (s *Sizes) GuardKnown(msgs []message.Message, contextTokens, known int) []message.Message {
	s.update(msgs, known)
	s.work = append(s.work[:0], s.est...)
	var res ContextResult
	return guardContext(msgs, contextTokens, s.work, &res)
}

// update makes s the snapshots and estimates of msgs, reusing those of the
// messages it already has (the first known not compared).
func (s *Sizes) update(msgs []message.Message, known int) {
	off, same := s.snaps.UpdateKnown(msgs, known)
	if off > 0 {
		copy(s.est, s.est[off:off+same])
	}
	s.est = s.est[:same]
	for i := same; i < len(msgs); i++ {
		s.est = append(s.est, EstimateChars(msgs[i]))
	}
	s.Reused += same
	s.Measured += len(msgs) - same
}

// Bytes estimates the memory s holds.
func (s *Sizes) Bytes() int {
	return s.snaps.Bytes() + (cap(s.est)+cap(s.work))*int(unsafe.Sizeof(0))
}
