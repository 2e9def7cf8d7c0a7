package lanes

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/lanes/internal/fenced"
	"github.com/lanefleet/lanefleet/lanes/queue"
)

// Causes of a cut turn's context.
var (
	// errInterrupted: an interrupt or rollback message arrived.
	errInterrupted = errors.New("lanes: interrupted by a newer message")
	// errStopped: a stop command arrived.
	errStopped = errors.New("lanes: stopped by a stop command")
)

// cutReasons are the errors of a turn that a message cut, and of the
// messages queued before the cut.
func cutReasons(cut *queue.Msg) (turn, queued string) {
	if cut != nil && cut.Kind == queue.KindStop {
		return "stopped: a stop command ended the session's running turn",
			"dropped: a stop command arrived after this message, before it ran"
	}
	return "interrupted: a newer message asked to interrupt the session",
		"dropped: an interrupt arrived after this message, before it ran"
}

// interrupted ends a turn cut short by an interrupt, rollback or stop (or
// a collect batch with one queued behind it): its run and every message
// queued before the cut end with an "interrupted" final event (settings
// messages among them are applied, queue.AfterCut); the cutting message
// runs next. What the cut turn did (partial, the handler's outcome of a
// cancelled turn: its prompt, completed replies and tool results) is kept
// in the transcript, as the reference and LangGraph's interrupt keep it,
// unless the cut is a rollback, which discards it. seen says the watch saw
// the cutting message arrive (see watchCuts): it is read off the lane even
// if the stream stores it a moment after the watch saw it.
func (o *owner) interrupted(ctx context.Context, em *fenced.Emitter, p *plan, attempt int, partial *Outcome, seen bool) error {
	var cut *queue.Msg
	var drops []collected
	waited := time.Duration(0)
	for cut == nil {
		next, err := o.next(ctx, p.through)
		if errors.Is(err, jetstream.ErrMsgNotFound) && seen && waited < cutStoreWait {
			// The watch's core subscription can see a message before the
			// stream has stored it: it is on its way.
			d := min(5*time.Millisecond+waited, 100*time.Millisecond)
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
			waited += d
			continue
		}
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			if seen {
				o.log.Warn().Dur("waited_ms", waited).
					Msg("the message that cut the turn was not stored (refused as a duplicate or by an expected-sequence check, or stored late): one stored later runs as the lane's next message, and a rollback then keeps the cut turn")
			}
			break
		}
		if err != nil {
			return err
		}
		c := o.read(next)
		switch queue.AfterCut(c.msg) {
		case queue.CutEnd:
			cut = &c.msg
			continue
		case queue.CutApply:
			if why := o.refuseSettings(c.in); why != "" {
				p.dropped = append(p.dropped, dropped{c: c, kind: "invalid_input", reason: why})
				break
			}
			if err := o.storeSettings(ctx, c.in); err != nil {
				return err
			}
			p.dropped = append(p.dropped, dropped{c: c, kind: kindSettings, reason: o.lane.settings.String()})
		default:
			drops = append(drops, c)
		}
		p.through = next.Sequence
	}
	why, dropWhy := cutReasons(cut)
	if cut != nil && cut.Kind == queue.KindStop {
		o.lane.stopped = stopped{seq: cut.Seq, run: em.RunID(), dropped: len(drops)}
	}
	for _, c := range drops {
		p.dropped = append(p.dropped, dropped{c: c, kind: events.KindInterrupted, reason: dropWhy})
	}
	o.endRun(em, attempt, events.EventData{Phase: events.PhaseError, Error: why})
	res := &events.Result{Payloads: []events.Payload{{Text: "Interrupted.", IsError: true}},
		Meta: events.Meta{Aborted: true, Error: &events.RunError{Kind: events.KindInterrupted, Message: why}}}
	out := &Outcome{Result: res}
	if partial != nil {
		// What the cut turn's model calls cost counts even when a
		// rollback discards what they said.
		out.Usage, out.AuthProfile, out.Spawned = partial.Usage, partial.AuthProfile, partial.Spawned
		if cut == nil || cut.Mode != queue.ModeRollback {
			out.Entries, out.Reset = partial.Entries, partial.Reset
		}
	}
	return o.commit(ctx, em, p, out)
}

// cutStoreWait bounds how long a cut turn waits for the stream to store the
// message that cut it. One the stream refuses (a duplicate Nats-Msg-Id, a
// failed Nats-Expected-* check, a full stream) never comes, and the
// owner, which sees the message on its watch but not the publisher's ack,
// cannot tell; meanwhile it holds the lane. A stream stores a message it
// accepts within milliseconds of the watch seeing it; the bound leaves
// room for a loaded or replicated stream, since a cut stored later still
// runs, after the turn, as the lane's next message (an interrupt with
// nothing to cut; a rollback then no longer discards the cut turn's
// progress), which the owner logs as a warning when it gives up.
const cutStoreWait = 2 * time.Second

// stopped remembers what the lane's last stop command cut, for its own run.
type stopped struct {
	seq     uint64 // the stop message
	run     string // the run it ended
	dropped int    // the messages queued before it that it dropped
}

// stop ends a stop command's run with a final event saying what it
// stopped. The turn it cut has ended (see interrupted); a stop that found
// no turn running (or reached a new owner after a crash) says so.
func (o *owner) stop(ctx context.Context, em *fenced.Emitter, p *plan) error {
	text := "nothing was running"
	if st := o.lane.stopped; st.seq == p.run.raw.Sequence {
		text = fmt.Sprintf("stopped run %s", st.run)
		if st.dropped > 0 {
			text += fmt.Sprintf("; dropped %d queued message(s)", st.dropped)
		}
	}
	res := &events.Result{Payloads: []events.Payload{{Text: text}}}
	o.endRun(em, 0, runEnding(res, text))
	return o.commit(ctx, em, p, &Outcome{Result: res})
}
