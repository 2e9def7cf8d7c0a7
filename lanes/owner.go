package lanes

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes/internal/slots"
	"github.com/lanefleet/lanefleet/lanes/queue"
)

// owner drains one lane while it holds the lease. Its state comes in three
// parts, each with its own lifetime: the lease (this owner's claim on the
// lane and the delivery that brought it), the lane (what the drain knows of
// the lane's stream and record), and the slot (what this owner has used of
// the worker's slot it runs in).
type owner struct {
	ownerDeps
	// w is asked only for what is the worker's to do or decide: settle
	// the trigger (handBack, ackTrigger), mark the lane held here (hold),
	// wake it when its lane's messages reach the worker (watchStored),
	// store dead letters, deliver completions, delete inbound messages and
	// drop step journals (on its goroutines), a new lease's terms
	// (leaseInfo), whether to yield (shouldYield), and the context turns
	// run under (turnCtx).
	w          *Worker
	token, key string
	subject    string
	log        zerolog.Logger

	lease ownerLease
	lane  laneState
	slot  slotUse

	failures map[uint64]*tried // this owner's attempts, per inbound seq
	// inFlight is the attempt this owner started whose end is not on
	// record yet (nil: none): if the owner loses the lane, the attempt is
	// noted as one that does not count (see UncountedToken).
	inFlight *flight
	// notDead: the drain ended at a message whose dead letter could not
	// be stored (errNotDeadLettered).
	notDead bool
	// quiet is the drain's watch of the lane (see watchCuts) and what it
	// knows; nil until a turn of the drain starts one.
	quiet *quietWatch
	// setUp gives back the owner's place in the worker's set-up gate once
	// its first turn reaches the handler (or the owner ends); nil for an
	// owner the sweep started, which never entered it.
	setUp func()
}

// ownerDeps are the parts of its worker an owner uses, set once when it is
// made (newOwner) and shared with the worker's other owners.
type ownerDeps struct {
	cfg     *Config // the worker's configuration; read only once Run began
	store   *kvstore.Lanes
	streams *Streams
	js      jetstream.JetStream
	nc      *nats.Conn
	handler Handler
	stats   *Stats
	sched   *slots.Scheduler
	// transcripts is the worker's transcript cache; notices its paused
	// lanes' noticed messages.
	transcripts *transcripts
	notices     *pauseNotices
	// shutdown is closed, and shuttingDown set just before, when the
	// worker starts to shut down.
	shutdown     <-chan struct{}
	shuttingDown *atomic.Bool
	lingering    *atomic.Int64 // owners lingering now (Worker.lingering)
}

// newOwner returns the owner of lane token (session key, inbound subject)
// under lease, in a slot charged charged bytes and taken now.
func (w *Worker) newOwner(token, key, subject string, lease ownerLease, charged int64) *owner {
	deps := ownerDeps{cfg: &w.cfg, store: w.lanes, streams: w.streams, js: w.js, nc: w.nc, handler: w.handler, stats: &w.stats,
		sched: w.sched, transcripts: w.transcripts, notices: &w.notices, shutdown: w.shutdown, shuttingDown: &w.shuttingDown, lingering: &w.lingering}
	return &owner{ownerDeps: deps, w: w, token: token, key: key, subject: subject, log: w.log.With().Str("lane", token).Logger(),
		lease: lease, slot: slotUse{since: w.now(), charged: charged}}
}

// now reads the worker's clock (Config.Now).
func (o *owner) now() time.Time { return o.cfg.Now() }

// ownerLease is the owner's claim on its lane: the lease (renewed by the
// heartbeat, see lease.go), the trigger delivery that brought the lane
// here (nil for a lane the sweep took), and the lane's mark as held here.
type ownerLease struct {
	*kvstore.Lease
	// life is the worker's life the lease names (nil: none): when it
	// ends, the lease is being taken over, and the drain stops at once.
	life       *life
	trigger    jetstream.Msg
	triggerSeq uint64
	cancel     context.CancelCauseFunc // ends the current drain (the lease was lost, or a newer owner fenced its events)
	// marked: the lane is marked held by this worker (see markHeld), so its
	// other deliveries are acked without a slot. Unmarked before every
	// release of the lease.
	marked bool
	// triggerGone: the trigger's message was deleted (an earlier owner
	// processed it), so the trigger cannot be handed back: no yield.
	triggerGone, triggerChecked bool
	// ahead is the trigger's run, opened while the drain began (see
	// openAhead); nil once taken or dropped. aheadTried: it was started.
	ahead      *aheadOpen
	aheadTried bool
}

// laneState is what the owner's drain knows of its lane: where its cursor
// stands, its stored settings, its recent message ids and transcript, and
// what this owner processed and still owes.
type laneState struct {
	cursor kvstore.Cursor
	// left is the lane's cursor as the store has it, while this owner
	// knows it for certain: as read when the drain began, then as its own
	// records moved it. A record write that failed (its outcome unknown:
	// the record may be stored all the same) makes it nil until the next
	// read. The release names it (kvstore.Lease.ReleaseAt), so that this
	// worker, taking the lane back over that release, need not read it.
	left     *kvstore.Cursor
	settings *events.Settings // the lane's stored queue and run settings; nil = none
	// ids are the lane's message ids for de-duplication: the newest
	// record's, then those of every message this drain read.
	ids *queue.IDs
	// first is the lane's first message, read with its cursor when the
	// drain began (firstLook); the drain's first look takes it. nil = none.
	first *jetstream.RawStreamMsg
	// tx is the lane's transcript as this drain knows it; nil = not read
	// yet (see readHistory).
	tx *transcript
	// checked is the inbound seq of the newest record whose final events
	// this owner found stored (0: none yet). A drain whose cursor names
	// another record checks it again: a record write whose answer was
	// lost may have been stored, and the owner that retries the lane
	// finds it only then.
	checked uint64
	lastEnd time.Time // when this owner's last turn ended (reject, collect debounce)
	// processed lists the inbound messages of committed turns this owner
	// has not deleted yet.
	processed []uint64
	// stopped is what the lane's last stop command cut.
	stopped stopped
	// owed is the inbound sequence of a committed turn whose final events
	// are not all stored yet; 0 = none. While it is set the owner neither
	// moves on nor releases the lane, and it never deletes that message:
	// the lane's next owner (or the sweep) keeps the promise.
	owed uint64
}

// slotUse is what the owner has used of its slot: since is when it took
// the slot, turns the turns it has run since (the last taking lastTurn);
// yielded says the drain ended to give the slot to a lane waiting for one
// (see slots.go).
type slotUse struct {
	since    time.Time
	turns    int
	lastTurn time.Duration
	yielded  bool
	// charged is what the slot is charged of the byte budget; it grows to the
	// largest message the owner runs (fits), and goes back with the slot.
	// overBudget: the drain ended because the lane's next message,
	// charged this many bytes, did not fit; 0 = it did not.
	charged    int64
	overBudget int64
	// paused: the drain ended at a message of a paused session
	// (Config.Paused).
	paused bool
}

// run drains the lane, then releases it (lease-and-drain). Each lease gets
// its own heartbeat, stopped before the lease is released so a renewal never
// races the release. How the drain ended decides, in settleTrigger, what becomes
// of the trigger delivery.
func (o *owner) run() {
	for {
		ctx, cancel := context.WithCancelCause(o.w.turnCtx)
		o.lease.cancel = cancel
		stopLife := o.lease.life.bind(cancel)
		hb := o.startHeartbeat(ctx, cancel, o.lease.Lease)
		lostInDrain := o.drain(ctx)
		lost := lostInDrain || errors.Is(context.Cause(ctx), kvstore.ErrLeaseLost)
		cancelled := ctx.Err() != nil
		stopLife()
		cancel(nil)
		hb.stop()
		if f := o.inFlight; lost && f != nil {
			// This worker is alive: the turn it was running did not kill
			// it, so the attempt does not count against the message.
			o.inFlight = nil
			why := "its worker lost the session's lane mid-turn"
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				why += ": " + cause.Error()
			}
			o.noteUncounted(f.seq, f.attempt, why)
		}
		// The lane's next owner knows only what the runs' notes say.
		o.noteExcused()
		var end ending
		switch {
		case lost:
			// Someone else may own the lane now, or nobody: let the trigger
			// be redelivered to whoever needs it.
			end = endLost
			if errors.Is(context.Cause(ctx), kvstore.ErrDeclaredDead) {
				o.releaseDeadLease()
			}
		case cancelled || o.lane.owed != 0:
			// Shutting down, or a committed turn's final events could not be
			// stored before the worker began to shut down: hand the lane over
			// with its trigger, and the next owner keeps the promise.
			end = endHandOver
		case o.slot.yielded:
			end = endYield
		case o.slot.overBudget > 0:
			end = endOverBudget
		case o.slot.paused:
			end = endPaused
		case o.notDead:
			end = endNotDead
		default:
			end = o.release()
		}
		if end == endAgain {
			continue
		}
		o.settleTrigger(end)
		return
	}
}

// ending is how an owner's work on its lane ended; settleTrigger acts on it.
type ending uint8

const (
	// endReleased: the lane was drained and released (or another owner took
	// it right after): ack the trigger, delete what was processed.
	endReleased ending = iota
	// endAgain: a message arrived during the release and the lease was
	// taken again: drain once more.
	endAgain
	// endLost: the lease was lost: hand the trigger back at once.
	endLost
	// endHandOver: the worker shuts down mid-drain, or a committed turn's
	// final events are not stored: release the lease and hand the
	// trigger back at once; the next owner continues.
	endHandOver
	// endShutdown: released with messages left while the worker shuts down:
	// hand the trigger back at once.
	endShutdown
	// endRetry: the release, the re-check or the re-acquire failed: the
	// trigger comes back in a second, to whoever can take the lane then.
	endRetry
	// endOverBudget: the lane's next message does not fit the byte
	// budget: release the lease and hand the trigger back; it is charged
	// what that message needs (slots.overBudget), so it waits in line
	// here until the payloads in flight leave room.
	endOverBudget
	// endYield: the owner gives its slot to a lane that waits for one,
	// with messages left: release the lease and hand the trigger back at
	// once; it waits in line (at the end) to drain the rest.
	endYield
	// endNotDead: the lane's next message must be dead-lettered and its
	// dead letter could not be stored: release the lease and hand the
	// trigger back after deadRetryDelay; the message stays.
	endNotDead
	// endPaused: the session is paused (Config.Paused): release the lease
	// and ack the trigger; the lane's messages stay until Wake (or the
	// sweep, once it is no longer paused) takes the lane up again. If the
	// pause ended meanwhile, hand the trigger back at once instead.
	endPaused
)

// handBack hands the trigger back (Nak), to come again after delay (0: at
// once); ackTrigger acks it. Neither does anything for a lane the sweep
// took (no trigger).
func (o *owner) handBack(delay time.Duration) { o.w.nak(o.lease.trigger, delay) }

func (o *owner) ackTrigger(ctx context.Context) { o.w.ack(ctx, o.lease.trigger) }

// settleTrigger is the one place that acks or naks the trigger delivery, and
// deletes the messages of committed turns, for how the owner's work ended.
// The trigger's own message stays whenever the trigger is handed back (a
// Nak'd trigger whose message is gone is never redelivered), and so does
// the message of a turn whose final events are not stored yet.
func (o *owner) settleTrigger(end ending) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch end {
	case endReleased:
		if o.shuttingDown.Load() && o.lease.trigger != nil && o.lease.triggerSeq > o.lane.cursor.Seq {
			o.handBack(0)
			return
		}
		o.ackTrigger(ctx)
		if o.lease.trigger != nil && o.lease.triggerSeq <= o.lane.cursor.Seq && !slices.Contains(o.lane.processed, o.lease.triggerSeq) {
			// A trigger an earlier owner handed back after processing
			// its message (a yield): that message goes too.
			o.lane.processed = append(o.lane.processed, o.lease.triggerSeq)
		}
		o.deleteProcessed(ctx, false)
	case endHandOver:
		o.letGo(ctx, "on stop")
		o.handBack(0)
	case endLost:
		// Nothing is deleted: another owner may hold the lane, with the
		// delivery of one of these messages as its trigger. The sweep
		// deletes them once the lane is idle.
		o.handBack(0)
	case endShutdown:
		o.handBack(0)
		o.deleteProcessed(ctx, true)
	case endRetry:
		o.handBack(time.Second)
	case endOverBudget:
		o.letGo(ctx, "over the byte budget")
		o.stats.OverBudget.Add(1)
		// Before the trigger goes back: its redelivery is charged what
		// the lane needs.
		o.sched.OverBudget(o.token, o.slot.overBudget, o.now())
		o.handBack(busyNakDelay)
	case endPaused:
		o.letGo(ctx, "while its session is paused")
		o.stats.Paused.Add(1)
		if o.cfg.paused(o.key) {
			o.ackTrigger(ctx)
		} else {
			o.handBack(0)
		}
	case endNotDead:
		o.letGo(ctx, "while a dead letter cannot be stored")
		o.handBack(o.cfg.deadRetry)
	case endYield:
		// Released before the trigger goes back, so its redelivery can
		// take the lane.
		o.letGo(ctx, "to yield")
		o.stats.Yields.Add(1)
		o.sched.Requeue(o.token, o.now())
		o.handBack(0)
	}
}
