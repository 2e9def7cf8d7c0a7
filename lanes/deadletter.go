package lanes

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
)

// errNotDeadLettered: a message that must be dead-lettered could not be,
// as the dead-letter stream is full or unavailable. The message stays where
// it is (its lane waits behind it) and is tried again after
// deadRetryDelay; it is never deleted without its dead letter.
var errNotDeadLettered = errors.New("lanes: dead letter not stored")

// deadRetryDelay is how soon a message whose dead letter could not be
// stored is tried again.
const deadRetryDelay = 15 * time.Second

// deadLetter stores a message that cannot be processed, with the reason.
// The sender's headers go along, except those NATS acts on (Nats-*: the
// Nats-Expected-* checks, Nats-Msg-Id, Nats-TTL, Nats-Rollup, ...): they
// were meant for the inbound stream, and the dead-letter stream would
// apply them to the dead letter and refuse it. The dead letter's own
// Nats-Msg-Id names the inbound message, so one stored by an attempt whose
// caller then failed (a poison batch's next one, a lost ack) is not stored
// twice when the message is tried again. A dead letter that is not stored
// is errNotDeadLettered: the caller keeps the message.
func (w *Worker) deadLetter(ctx context.Context, reason, subject string, seq uint64, hdr nats.Header, data []byte, cause error) error {
	m := nats.NewMsg(events.DeadPrefix + reason)
	m.Data = data
	for k, v := range hdr {
		if len(k) < 5 || !strings.EqualFold(k[:5], "nats-") {
			m.Header[k] = v
		}
	}
	m.Header.Set(events.HeaderError, cause.Error())
	m.Header.Set(events.HeaderSubject, subject)
	m.Header.Set(events.HeaderSeq, strconv.FormatUint(seq, 10))
	m.Header.Set(events.HeaderMsgID, "dead-"+strconv.FormatUint(seq, 10))
	if _, err := w.js.PublishMsg(ctx, m); err != nil {
		w.stats.DeadLetterFailures.Add(1)
		w.log.Error().Err(err).Str("reason", reason).Str("subject", subject).Uint64("seq", seq).Dur("retry_in", w.cfg.deadRetry).
			Msg("dead letter not stored: the message stays on its lane, which waits behind it, and is tried again")
		return fmt.Errorf("%w: %s message %d: %w", errNotDeadLettered, reason, seq, err)
	}
	w.stats.DeadLetters.Add(1)
	w.stats.addDeadLetter(reason)
	w.log.Warn().Str("reason", reason).Str("subject", subject).Uint64("seq", seq).Err(cause).Msg("dead-lettered")
	return nil
}

// deadLetter stores the lane's message raw as a dead letter (see
// Worker.deadLetter).
func (o *owner) deadLetter(ctx context.Context, reason string, raw *jetstream.RawStreamMsg, cause error) error {
	return o.w.deadLetter(ctx, reason, o.subject, raw.Sequence, raw.Header, raw.Data, cause)
}
