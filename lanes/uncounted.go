package lanes

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/backoff"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes/internal/fenced"
)

// UncountedToken ends the subject of a run's uncounted-attempt notes,
// agent.ev.<lane>.<run>.uncounted, in the event stream next to the run's
// events. A message is dead-lettered as poison after Config.MaxAttempts
// attempts that count: attempts whose handler failed, and attempts that
// never ended (their worker died mid-turn). An attempt that ended for no
// fault of the message is noted there instead, by the worker that ran it:
// one that ended on a transient store error (kvstore.Transient: its step
// journal or its turn's record found no stream leader or got no answer),
// and one whose worker, alive, lost the lane mid-turn (its lease lapsed
// while the store did not answer its renewals, or the process was paused
// past it). Such a worker can no longer publish the run's events (the next
// owner fenced them), so the note is not fenced: it only ever excuses an
// attempt its writer ran. A note carries the header Lanefleet-Stream:
// uncounted and the decimal attempt number as payload; it is not an event.
const UncountedToken = "uncounted"

// FenceToken ends the subject of a run's fence markers,
// agent.ev.<lane>.<run>.fence, in the event stream next to the run's
// events (see package lanes/internal/fenced): an owner about to publish a
// run's events first stores a marker there naming its lease revision, and
// every event it publishes expects that marker to be the subject's last
// message, so once the lane's next owner stores its marker the server
// refuses every event of the older owner. Markers carry the header
// Lanefleet-Stream: fence; they are not events.
const FenceToken = fenced.Token

// uncountedStream is the Lanefleet-Stream header of uncounted-attempt notes.
const uncountedStream = "uncounted"

// maxUncountedReads bounds the notes one look at a run reads: a store
// outage that outlasts that many retries (hours, at the retry delay's
// bound) starts counting them.
const maxUncountedReads = 1024

// uncountedSubject is the subject of the notes of run on lane token.
func uncountedSubject(token, run string) string {
	return events.EventPrefix + token + "." + run + "." + UncountedToken
}

// noteGrace is how long an owner that finds a message's attempts spent,
// the last one ended without a word, waits for that attempt's worker to
// note it before it dead-letters the message: the worker finds its lease
// lost within a third of the lease TTL of reaching the store again, then
// stores the note (noteUncounted's tries).
func (o *owner) noteGrace() time.Duration {
	return max(2*o.store.LeaseTTL(), 15*time.Second)
}

// noteUncounted notes that attempt of the run of inbound seq ended for no
// fault of the message (why says how), so that it does not count toward
// MaxAttempts: in the owner's memory, and for the lane's next owners in a
// note on the run (see UncountedToken), unless that is stored already. A
// note that cannot be stored now is tried again when the owner's work on
// the lane ends (noteExcused); until it is stored the attempt counts for
// other owners.
func (o *owner) noteUncounted(seq uint64, attempt int, why string) {
	e := o.tried(seq).excuse(attempt, why)
	if e.noted {
		return
	}
	run := strconv.FormatUint(seq, 10)
	m := nats.NewMsg(uncountedSubject(o.token, run))
	m.Data = strconv.AppendInt(nil, int64(attempt), 10)
	m.Header.Set(events.HeaderStream, uncountedStream)
	m.Header.Set(events.HeaderError, failureText(errors.New(e.why)))
	// The lane may be lost and the store slow: a few tries, off the drain's
	// context.
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
		_, err := o.js.PublishMsg(ctx, m)
		cancel()
		if err == nil {
			e.noted = true
			o.log.Warn().Str("run_id", run).Int("attempt", attempt).Str("why", e.why).Msg("an attempt that does not count toward the message's attempts")
			return
		}
		if !kvstore.Transient(err) || try >= 3 {
			o.log.Warn().Err(err).Str("run_id", run).Int("attempt", attempt).Msg("note of an attempt that does not count")
			return
		}
		select {
		case <-time.After(backoff.Policy{Base: 200 * time.Millisecond, Linear: true}.Delay(try + 1)):
		case <-o.shutdown:
			return
		}
	}
}

// noteExcused stores the notes of the attempts this owner excused whose
// notes could not be stored before: its work on the lane ends, and the
// lane's next owner knows only what the notes say.
func (o *owner) noteExcused() {
	for seq, t := range o.failures {
		for n, e := range t.excused {
			if !e.noted {
				o.noteUncounted(seq, n, e.why)
			}
		}
	}
}

// uncounted returns the attempts of the run of inbound seq that do not
// count: those this owner excused itself, and those noted on the run (see
// UncountedToken), up to attempt below (exclusive).
func (o *owner) uncounted(ctx context.Context, seq uint64, below int) (map[int]bool, error) {
	out := map[int]bool{}
	for n := range o.tried(seq).excused {
		if n < below {
			out[n] = true
		}
	}
	subj := uncountedSubject(o.token, strconv.FormatUint(seq, 10))
	for from, reads := uint64(1), 0; reads < maxUncountedReads; reads++ {
		rctx, cancel := context.WithTimeout(ctx, readTimeout)
		raw, err := o.streams.Events.GetMsg(rctx, from, jetstream.WithGetMsgSubject(subj))
		cancel()
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, err
		}
		from = raw.Sequence + 1
		if n, err := strconv.Atoi(string(raw.Data)); err == nil && n > 0 && n < below {
			out[n] = true
		}
	}
	return out, nil
}
