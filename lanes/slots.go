package lanes

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/lanes/internal/slots"
	"github.com/lanefleet/lanefleet/lanes/queue"
)

// Fair scheduling (see the package doc, "Scheduling"): a worker's slots are
// handed to the lanes that wait for one in the order they began to wait,
// and an owner that has used its budget yields its slot at a turn boundary
// when a lane waits.

// DefaultLaneTurnBudget is how many turns a lane runs before it yields its
// slot to a waiting lane.
const DefaultLaneTurnBudget = 1

// lineWait is how long a waiting delivery stays on this worker before it is
// handed back (a worker with room may take its lane; if it comes back here
// it keeps its place). It stays well under AckWait, so a waiting delivery
// needs no keep-alive.
func (w *Worker) lineWait() time.Duration {
	return min(time.Second, w.streams.cfg.AckWait/3)
}

// fair reports whether lanes yield their slots (Config.LaneTurnBudget ≥ 0).
func (w *Worker) fair() bool { return w.cfg.LaneTurnBudget >= 0 }

// shouldYield reports whether an owner of the lane token that has run
// turns since it took its slot at since, the last of them taking last,
// yields the slot before its next turn: it has used its turn or time
// budget, and its slot would go to a lane in line (slots.Scheduler.Yield):
// at once when its tenant is at or over its share and one under its share
// waits, else once the lane first in line has waited at least as long as
// that last turn took (so a lane that waits a moment while slots turn over
// does not make every owner yield, and one that keeps waiting gets the
// slot within two turns). An owner whose tenant is under its share, with
// only tenants at or over theirs in line, keeps its slot (it would stay
// its tenant's). Only an owner with a trigger can yield (the trigger,
// handed back, brings the lane back); a lane the sweep took drains on.
// Every owner runs at least one turn.
func (w *Worker) shouldYield(token string, turns int, since time.Time, last time.Duration, trigger jetstream.Msg) bool {
	if !w.fair() || trigger == nil || turns == 0 || w.sched.Waiting() == 0 {
		return false
	}
	if turns < w.cfg.LaneTurnBudget && (w.cfg.LaneTimeBudget <= 0 || w.now().Sub(since) < w.cfg.LaneTimeBudget) {
		return false
	}
	switch w.sched.Yield(token) {
	case slots.YieldNone:
		return false
	case slots.YieldNow:
		return true
	}
	first, ok := w.sched.First()
	return ok && w.now().Sub(first) >= last
}

// waitForSlot lets a delivery that found every slot busy (or its payload
// over the byte budget) wait for one, in line, for up to lineWait; then it
// is handed back (Nak), keeping its lane's place for its redelivery. It
// reports whether the delivery got a slot, and the bytes charged to it
// (the caller runs it and puts both back); if not, the delivery is settled.
//
// Another delivery of a lane that waits here is acked (its owner-to-be
// drains it) and counted as the waiter's dependent. A waiter with
// dependents is handed back only if its own message still exists once it
// has left the line: if an owner elsewhere processed and deleted it, its
// redelivery would never come and the dependents' messages would be
// stranded, so it stays in line (kept alive) until it gets a slot here. A
// message found there can only be deleted later by an owner that takes
// the lane after the dependents' messages were stored, and drains them.
func (w *Worker) waitForSlot(msg jetstream.Msg, token string) (int64, bool) {
	n := len(msg.Data())
	wt, b, got := w.joinLine(msg, token, n, false)
	if wt == nil {
		return b, got
	}
	w.stats.Waited.Add(1)
	t := time.NewTimer(w.lineWait())
	defer t.Stop()
	for {
		shutdown := false
		select {
		case <-wt.Granted():
			return wt.Charged(), true
		case <-t.C:
		case <-w.shutdown:
			shutdown = true
		}
		deps, left := w.sched.Leave(wt, w.now())
		if !left {
			return wt.Charged(), true // granted meanwhile
		}
		if shutdown || deps == 0 || w.messageExists(msg) {
			w.stats.HandedBack.Add(1)
			w.settleDelivery(msg, settleHandBack)
			return 0, false
		}
		// Its message is gone: wait on here, in the same place.
		if err := msg.InProgress(); err != nil {
			w.log.Debug().Err(err).Msg("waiting delivery in progress")
		}
		if wt, b, got = w.joinLine(msg, token, n, true); wt == nil {
			return b, got
		}
		t.Reset(w.lineWait())
	}
}

// joinLine puts a delivery of lane token, n payload bytes, in line (again,
// with rejoin: see slots.Scheduler.Wait) and returns its place in line. It
// returns none when the delivery got a slot at once (got, charged b bytes)
// or was settled: acked when a delivery of its lane waits already (it
// drains this one), handed back when the line is full.
func (w *Worker) joinLine(msg jetstream.Msg, token string, n int, rejoin bool) (wt *slots.Waiter, b int64, got bool) {
	wt, b, res := w.sched.Wait(token, n, w.now(), rejoin)
	switch res {
	case slots.JoinSlot:
		return nil, b, true
	case slots.JoinSame:
		w.settleDelivery(msg, settleFollower)
		return nil, 0, false
	case slots.JoinFull:
		w.settleDelivery(msg, settleBusy)
		return nil, 0, false
	}
	return wt, 0, false
}

// messageExists reports whether a delivery's message is still in the
// inbound stream (a read error says yes: the delivery is handed back as
// before).
func (w *Worker) messageExists(msg jetstream.Msg) bool {
	md, err := msg.Metadata()
	if err != nil {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	_, err = w.streams.Inbound.GetMsg(ctx, md.Sequence.Stream)
	return !errors.Is(err, jetstream.ErrMsgNotFound)
}

// yieldsBefore reports whether the owner may yield before the lane's next
// message raw. Not before a message whose plan depends on when this
// owner's last turn ended (reject refuses and a heartbeat is dropped when
// it arrived while a turn ran, a collect batch queued behind a turn waits
// out its debounce): the lane's next owner would not know that time.
func (o *owner) yieldsBefore(raw *jetstream.RawStreamMsg) bool {
	m := o.read(raw).msg
	return m.Mode != queue.ModeReject && m.Mode != queue.ModeCollect && !m.Heartbeat
}
