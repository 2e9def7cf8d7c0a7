// Package lanes is the NATS adapter that runs session lanes: a Worker takes
// dispatch deliveries from the AGENT_IN stream, owns a lane by its KV lease,
// drains the lane's messages in stream order through a Handler it declares,
// publishes each run's events on agent.ev.<lane>.<run>, and hands lanes over
// when it shuts down or dies (lease-and-drain, see DESIGN.md).
//
// # Glossary
//
// Each word below has one meaning in this package's names and comments
// (texts a user or an operator reads are left as they were).
//
//   - lane: a session's inbound messages, agent.in.<token>, run in
//     stream order; token is its subject token, key its session key.
//   - owner: what drains one lane on a worker while it holds the lane's
//     lease (owner.go). Its state has three parts: the lease, the lane
//     and the slot. What it uses of its worker (the configuration, the
//     lanes bucket, the streams, the counters, the slots, the transcript
//     cache) it is given when it is made (ownerDeps, newOwner); it asks the
//     worker itself only for the worker's own acts (settling its trigger,
//     the held-here mark, dead letters, completions).
//   - lease: the lanes bucket's record that gives one owner the lane
//     (kvstore.Lease); the heartbeat renews it. Held: a lane's lease is
//     taken. Held here: by an owner on this worker (markHeld, heldHere),
//     so the lane's other deliveries are acked without a slot.
//   - trigger: the dispatch delivery that brought the lane to its owner,
//     kept in progress while the owner drains; a lane the sweep took has
//     none, nor one taken over from a dead worker.
//   - life: a worker's key in the workers bucket, kept by its beat
//     (kvstore.Liveness); its leases name it. A life ends when its worker
//     is found dead (liveness.go), and the others take over its leases.
//   - settle: decide a delivery's fate, ack or hand back (Nak):
//     settleDelivery for a delivery, settleTrigger for an owner's trigger
//     (handBack, ackTrigger).
//     Nothing else is settled.
//   - drain: take the lane's messages in order until none is left.
//   - plan: what one turn takes off the lane (queue.PlanTurn's plan and
//     the messages it names).
//   - turn: one call of the Handler (or the owner's own answer, for a
//     message the handler never sees) that consumes one or more messages.
//   - run: the events of one inbound message, agent.ev.<token>.<run>,
//     named by its inbound sequence; attempt: one try at a turn's run.
//   - commit: the fenced write of a turn's record, which moves the cursor
//     past every message the turn consumed.
//   - finals: a run's final event. Owed: the finals of a committed turn
//     not stored yet (laneState.owed); keeping the promise is publishing
//     them (keepPromise, publishOwed) before the lane moves on.
//   - processed: the messages of committed turns, deleted while the lease
//     is still held.
//   - slot: one of the worker's Config.Concurrency places to run a lane;
//     line: the deliveries waiting for one; yield: an owner gives its
//     slot to the lane first in line at a turn boundary.
//   - charge: the payload bytes a slot, or a delivery in line, counts
//     against Config.MaxInflightBytes.
//   - watch: a core subscription on the lane. The debounce's (laneWatch)
//     ends a collect wait; the drain's (quietWatch) cuts a running turn,
//     wakes a lingering owner and tells the drain the lane is still empty.
//     Both are channel subscriptions: the drains' share the worker's one
//     channel and dispatcher (laneWatches), so a watch holds no goroutine.
//   - cut: end the running turn early, because an interrupt, rollback or
//     stop arrived.
//   - stop: the stop command (events.Inbound.Stop), and nothing else.
//   - shutdown: the worker's end, when Run's context is done
//     (shuttingDown, ErrShutdown). Halt: an emitter publishes nothing more.
//   - fence: the marker a run's events expect (FenceToken).
//   - paused: a session whose budget is reached (Config.Paused says so):
//     its owner runs none of its messages, lets the lane go and acks the
//     trigger (endPaused); the sweep leaves the lane alone. Wake: take a
//     lane up again, nobody holding it, once it is no longer paused.
//   - tenant: the session's tenant (Config.Tenant), named on start events.
//   - done: only a context's Done and a goroutine's exit channel.
//
// # Files
//
//	owner.go           the owner, its parts (lease, lane, slot), what it uses of its worker (ownerDeps),
//	                   its run loop and endings (settleTrigger)
//	lease.go           heartbeat, release and re-acquire, letGo, the held-here mark, deleting processed messages
//	drain.go           the drain loop: cursor and settings (readLane), owed finals (keepOwed), look at the lane,
//	                   charge the slot, leave before a message (leavesBefore), process a turn, retry a failed one
//	plan.go            read messages off the lane and name the planner's plan (collect debounce, merges, drops)
//	turn.go            Turn, Handler, Outcome, StepLog; run the handler, steering, a run's emitter
//	attempt.go         an owner's attempts: opening (the run's claim, opened ahead for the trigger) and starting
//	                   them, counting them toward MaxAttempts, ending and closing them
//	uncounted.go       the notes of attempts that do not count (UncountedToken)
//	commit.go          commit (the record, advancing past it), the finals promise, the runs a turn consumed, duplicates
//	watch.go           the debounce wait, the drain's watch (cuts, quiet), linger
//	cut.go             a cut turn (interrupted) and a stop command's run
//	settings.go        settings messages: refuse, store, apply
//	commands.go        chat commands read as stop, settings or handler commands (chatcmd)
//	slots.go           yields, and a delivery waiting in line for a slot
//	config.go          Config, its defaults, a session's tenant and chat commands, the tenants' shares of the slots
//	worker.go          Worker, Stats, Index, Run
//	delivery.go        the delivery path: take a slot, acquire the lease, run the owner; settleDelivery
//	deadletter.go      dead letters (poison, invalid, bad lane)
//	subagent.go        sub-agent lineage: completions owed to a parent, stops passed on, their delivery
//	liveness.go        the worker's life (Config.Liveness) and taking over the lanes of dead workers
//	sweep.go           the sweep: idle lanes with messages or owed finals
//	pause.go           paused sessions (Config.Paused), their notices, Wake
//	expire.go          the retention pass (Worker.ExpireIdle) and its loop
//	forget.go          forgetting one idle session under its lease (the pass's and Worker.Forget)
//	retries.go         the retention pass's retry list (lanes whose forget kept failing)
//	transcripts.go     the worker's transcript cache, and an owner's read of its lane's transcript
//	gate.go            the set-up gate
//	setup.go           the streams and the dispatch consumer (EnsureStreams, StreamConfig)
//	queue/             the pure queue planner
//	internal/slots     the scheduler: slots, the byte budget's charges, the line (pure: no NATS)
//	internal/lanestest the waits the lane's tests share (WaitFor, WaitClosed)
//	internal/fenced    the fenced event emitter of one run (see Fenced events): fence.go claims,
//	                   emitter.go coalesces and pipelines, publish.go the synchronous events
//	sessionsvc/        the per-lane read service
//
// # Scheduling
//
// A worker runs up to Config.Concurrency lanes at once, one slot each. A
// delivery of a lane an owner here holds is acked at once, without a slot
// or a lease request (the owner re-checks the lane after releasing it, so
// it drains that message). A delivery that finds every slot busy is acked
// if its lane has an owner elsewhere; otherwise it waits in line. The
// line is ordered by when the lane began to wait, and a slot that frees
// goes to the lane that has waited longest, of the waiting tenant
// (Config.Tenant) with the fewest slots in use for its weight
// (Config.TenantWeight; equal by default), so a tenant with hundreds of
// waiting sessions does not take every slot from a quiet one; a tenant
// under its share keeps as many slots as it used at once in the last 5 s
// (up to its share; such tenants together at most half the slots): the
// ones it does not use now stay free for its next messages rather than go
// to a tenant at or over its share. A waiting
// delivery is handed back (Nak) after a second, so a worker with room can
// take its lane; when it comes back here it takes its old place. Past four
// times the slots in line a delivery is handed back at once, unless its
// tenant has fewer in line than its weight's share (then up to eight
// times); it comes back after 250 ms, twice as late each time it finds no
// room again, up to 4 s (busyDelay), so a flood of lanes the line cannot
// hold does not keep the dispatch consumer busy with redeliveries (the
// server sends them before any new message).
//
// A slot is also charged its trigger's payload bytes against the worker's
// in-flight byte budget (Config.MaxInflightBytes): a delivery whose payload
// does not fit waits in line as if every slot were busy (first come, first
// served: smaller ones wait behind it), so a sender of large messages
// cannot make every slot carry one; the line itself is charged at most the
// budget's worth of payloads besides. An owner whose next message is
// larger than what its slot is charged adds the difference if the budget has
// room; if not, it lets the lane go and hands its trigger back, and the
// worker remembers what the lane needs (until a slot is handed to it, or
// its place here is forgotten): the trigger's redelivery, and the sweep,
// are charged that much, so the lane waits in line for the bytes like any
// large delivery instead of taking the lease again only to let go.
//
// Lease-and-drain keeps a lane while it has messages, so without more a
// lane that keeps sending would keep its slot and the lanes in line would
// starve. An owner therefore checks, before each next message, whether it
// has run its budget since it took the slot (Config.LaneTurnBudget turns,
// default 1, or Config.LaneTimeBudget) and the lane first in line has
// waited at least as long as its last turn took (a lane that waits a moment
// while slots turn over makes nobody yield; one that keeps waiting gets a
// slot within two turns of each owner), or at once when its tenant is at
// or over its share and a tenant under its share waits. An owner whose
// tenant is under its share, with only tenants at or over theirs in line,
// neither yields nor stops lingering: its slot would stay its tenant's. If so it yields: it deletes what it
// processed except its trigger's message, releases the lease, and hands its
// trigger back at once, taking the last place in line. The trigger's
// redelivery brings the lane back, here or on a worker with room, and its
// next owner goes on from the cursor, so the lane's order holds and nothing
// is run twice; if the worker dies first, the un-acked trigger comes back
// after AckWait as after any crash. Another delivery of a lane waiting here
// is acked: the waiting delivery will drain it (a waiting delivery whose
// own message an owner elsewhere deleted meanwhile is then not handed back,
// it waits here for its slot: see waitForSlot). When nobody waits an owner
// drains on, at no extra cost. A lane the sweep took (no trigger) does not
// yield, nor does an owner whose trigger's message an earlier owner deleted
// (its trigger could not come back), nor a lane before a reject or collect
// message (their plan depends on when this owner's last turn ended, which
// the next owner would not know). Owners delete the messages they processed
// while they still hold the lease, never after: a delivery of one of them
// may become the next owner's trigger. A negative LaneTurnBudget turns all
// this off: the lane keeps its slot and a delivery that finds every slot
// busy is handed back after a short delay.
//
// # Queue modes
//
// A message's mode is its own Mode field, else the session's stored mode,
// else followup. (The reference runtime's default is collect; the fleet runs
// one turn per message unless the session or the message asks otherwise.)
// Every decision is lanes/queue's planner (PlanTurn at a turn boundary,
// OnArrival while a turn runs, Steer at its model-call boundaries, AfterCut
// behind a cut turn); this package reads the messages it asks for, carries
// out its plan on the stream, which is the queue (nothing is held in memory
// between turns), and settles the trigger delivery in one place (settleTrigger).
//
//   - followup: one turn per message, in order.
//   - collect: at a turn boundary the collect-mode messages waiting behind
//     the first one are merged into one turn (queue.CollectPrompt). If the
//     batch was queued behind a running turn, it waits until the lane has
//     been quiet for the debounce time (reference default 1000 ms); the wait
//     ends early when the batch reaches the cap or a message that cannot
//     join arrives. Over the cap (default 20) the drop policy applies:
//     summarize (default) and old drop the oldest, new refuses the newest;
//     summarize puts a summary line of each dropped message in the prompt.
//     A batch of one without a summary runs as the message itself. The
//     turn runs as the run of the oldest message kept; the others' runs end
//     with Meta.MergedInto, the dropped ones' with an error of kind dropped.
//     An interrupt that arrives during the wait drops the batch.
//   - steer: joins the running turn at its next model-call boundary
//     (Turn.Steer) and is answered in it; its run ends with MergedInto. If
//     the turn ends first it runs as a follow-up.
//   - steer-backlog: the reference steers the live run and also enqueues a
//     follow-up (runtime spec §19), and so do we: Turn.Steer shows the
//     message to the running turn, and the message stays on the lane and
//     runs afterwards as its own turn (its run gets a lifecycle "steered"
//     event naming the turn that saw it, then its own events). The model
//     thus sees the text twice, as in the reference. Because the cursor
//     cannot pass a message that stays, a steer message behind a
//     steer-backlog one waits for a later turn.
//   - interrupt, rollback: cancel the running turn, drop every message
//     queued before the interrupt (error kind interrupted), then run it.
//     The owner watches the lane for them from before a turn's start event,
//     so an interrupt sent by a client that saw the start is never missed.
//     The cut turn then waits up to 2 s for the stream to store
//     the cutting message (the watch may see it first); one the stream
//     refuses (a duplicate, a failed expected sequence) cuts the turn all
//     the same, as if it had been stored, and the lane goes on.
//     (An interrupt queued behind a non-collect message before that message
//     started does not cut it: it runs, then the interrupt.)
//   - reject: refused (error kind rejected) if it arrived while a turn ran.
//
// A message whose id (its Lanefleet-Msg-Id header) an earlier message of
// the lane used within the stream's dedupe window is a duplicate
// (queue.IDs): it is not run, its run ends pointing at the first one's
// (Meta.MergedInto), and it cuts no turn. The owner notes the id of every
// message it reads, and each turn record carries the ids of the lane's
// recent messages, so the lane's next owner decides alike. (JetStream's own
// Nats-Msg-Id de-duplication is stream-wide: one session could make
// another's message vanish by using its id first.)
//
// Each lane holds at most StreamConfig.LaneCap messages of the inbound
// stream (waiting, running, or answered and not yet deleted: owners delete
// answered ones as they drain), so a sender who floods its lane is refused
// and nobody else.
//
// # Paused sessions
//
// With Config.Paused (tenant budgets, wired by internal/fleet) an owner
// asks before each message whether its session is paused. A paused lane's
// messages stay where they are, unconsumed: the owner lets the lane go and
// acks its trigger, a later message's delivery does the same, and the
// sweep passes the lane by. Nothing is dead-lettered or refused. When the
// pause ends (the budget raised or reset), Wake on any worker takes the
// lane up and its owner drains it from the cursor, in order; a lane Wake
// could not take (no free slot) is drained by the sweep.
//
// # Stop
//
// A stop command (events.Inbound.Stop, Client.Stop) cuts the running turn
// like an interrupt and, as the reference's /stop does, drops the messages
// queued before it; settings messages among them are applied. It runs no
// prompt: its own run ends with a final event saying which run it stopped
// and how many queued messages it dropped, or "nothing was running". (That
// is remembered by the owner that cut the turn; a stop that reaches a new
// owner after a crash says nothing was running.) Messages sent after the
// stop run as usual. The stopped turn's partial progress is discarded.
//
// # Stored settings
//
// A settings message (events.Inbound.QueueSettings and/or RunSettings) is a
// lane message like any other: when its turn comes, the owner stores the
// change under <token>.settings in the lanes bucket (one record,
// events.Settings), fenced by its lease, and the run ends with a final
// event describing the settings in force. So settings change exactly
// between the messages published before and after them, no owner ever
// reads a stale value (each owner reads the key once when it takes the
// lane, then applies the changes it processes itself), and a turn never
// pays for a settings read. The run settings reach the handler as
// Turn.Settings.
//
// # Chat commands
//
// With Config.ChatCommands a message whose text is a chat command (package
// chatcmd) is read as that command wherever the lane reads messages (the
// drain and the cut watch alike, chatCommand): /stop as a stop command,
// /queue, /model, /think, /verbose and /reasoning with a valid argument
// as a settings message (so they take those messages' paths, and their
// final event is the command's reply), and every other command as a
// follow-up prompt whatever its mode, handed to the handler as
// Turn.Command. A handler that starts the transcript anew (/new, /reset)
// says so in its Outcome (Reset): the turn's record names a new session
// id and hides the records before it (kvstore.Record.Reset), in the same
// fenced write that commits the turn.
//
// # Session state
//
// What a session carries from turn to turn besides its transcript (the
// auth profile that answered its last turn, the running total of its
// usage, the calls it left waiting for approval: events.SessionState)
// rides on every turn record the owner writes: the handler reports it in
// its Outcome (Usage, AuthProfile, the Result's pending calls), the owner
// adds it to the state of the lane's newest record and writes the sum in
// the same fenced write that commits the turn. A turn that is run again
// (a failed attempt, a crash before the commit) therefore counts once, and
// the next owner reads the state with the cursor. The handler sees it as
// Turn.State; the final event carries it as Meta.Session.
//
// # Events and attempts
//
// Every event of a run carries a per-run Seq that continues across
// attempts, so a viewer sees each event once, in order. An attempt that
// will not finish is closed with a lifecycle "aborted" event before the
// next one starts with "restart": by the owner itself when the handler
// failed, or by the lane's next owner when the worker died or lost the
// lease mid-run. See events for the sequences a viewer sees. Assistant and
// thinking deltas are coalesced into frames (Turn.Emit).
//
// A message is dead-lettered as poison after Config.MaxAttempts attempts
// that count: attempts whose handler failed, and attempts that never ended
// (a crash). An attempt that ended for no fault of the message does not
// count, and its worker notes it on the run (see UncountedToken): one that
// ended on a transient store error (kvstore.Transient: its step journal or
// its turn's record found no stream leader, or got no answer; its aborted
// event says so), and one whose worker, alive, lost the lane mid-turn (its
// lease lapsed while the store did not answer). An owner that finds an
// attempt ended without a word gives its worker twice the lease TTL (at
// least 15 s) to note it before it dead-letters the message. So a store outage delays the lane
// (the retries back off up to 30 s); it never makes a healthy message
// poison.
//
// Every message taken off the lane ends with a final event: its own turn's,
// MergedInto the turn that answered it, or an error saying why it was not
// run. One that must be dead-lettered (it does not decode, or it is
// poison) is taken off only once its dead letter is stored: while the
// dead-letter stream refuses it, the message stays, its lane waits, and the
// worker tries again later (Stats.DeadLetterFailures). A turn lists the messages it consumed in its final event's
// Meta.Consumed. A committed turn's final events are a promise: its owner
// retries them (bounded backoff) until they are stored before it takes the
// next message or releases the lane; a worker that shuts down first hands the
// lane over with its trigger un-acked, and the lane's next owner (or the
// sweep, for a lane nothing else wakes) publishes what is missing.
//
// # Step journal
//
// A turn's handler gets the run's step journal (Turn.Steps, a
// runner.StepStore): steps written to the journal stream, one journal per
// turn (kvstore.Journal: agent.steps.<lane>.<seq>.<n>), not to the lanes
// bucket, so they never wait on its fsyncs. Each write expects the
// journal's last message to be the writer's own previous one; a later
// attempt of the same message reads the journal and claims it with a
// barrier, so an older owner still running the turn can add nothing after
// that read. A committed turn's journal is purged in the background. The
// runner decides what a step is and how a re-run replays it.
//
// # Fenced events
//
// An owner claims a run before publishing any of its events: it stores a
// marker naming its lease revision on agent.ev.<lane>.<run>.fence (never
// over a newer owner's), and every event it publishes expects that marker
// to be the subject's last message. So once the lane's next owner has
// claimed the run, the stream refuses every event of the older one (a
// worker paused past its lease, say), which halts at the first refusal and
// ends its work on the lane; a run's final event is published at most once.
// A new owner claims its trigger's run while it reads the lane's cursor
// (the run it nearly always runs first), and retires that claim unused if
// another message runs first.
// Each attempt claims the run anew (the marker names its claim, too): an
// owner that retries a failed attempt under the same lease fences the
// failed attempt's emitter the same way, and retires it before the retry
// opens, so what that attempt's handler still emits is dropped.
// After a silence an owner reads the marker before publishing, so a woken
// worker shows even core subscribers of the run's subject (who see
// publishes the stream refuses) nothing. See FenceToken.
//
// # Retention
//
// With Config.SessionTTL the worker also runs the retention pass
// (Worker.ExpireIdle, policy in package retention) every second while it
// holds the pass's lease (one worker of the fleet at a time), within a
// budget of Config.RetentionRate sessions and half its time: a
// session whose transcript and settings were last written longer ago than
// the TTL is forgotten under its lease, never while it is held or a
// message waits for it, and a message that reaches it meanwhile is taken
// over at once.
package lanes
