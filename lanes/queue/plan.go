package queue

import "time"

// Kind is what a message on the lane asks for.
type Kind uint8

// Message kinds.
const (
	// KindPrompt is a prompt, run in its Mode.
	KindPrompt Kind = iota
	// KindSettings changes the session's stored queue settings.
	KindSettings
	// KindStop ends the running turn without a new prompt.
	KindStop
	// KindInvalid does not decode: it is dead-lettered.
	KindInvalid
	// KindDuplicate uses the id of an earlier message of the lane within
	// the de-duplication window (IDs): it is not run, and its run points
	// at that message's.
	KindDuplicate
)

// FleetDefault is the mode of a prompt that names none in a session with no
// stored mode. (The reference's default, ModeDefault, is collect; the fleet
// runs one turn per message unless a session or message asks otherwise.)
const FleetDefault = ModeFollowup

// ModeOf is the mode a prompt runs in: its own, else the session's stored
// mode, else FleetDefault.
func ModeOf(own, stored Mode) Mode {
	switch {
	case own != "":
		return own
	case stored != "":
		return stored
	}
	return FleetDefault
}

// Msg is what the planner knows of one message on the lane.
type Msg struct {
	// Seq is the message's inbound stream sequence.
	Seq uint64
	// At is when it arrived: its stream time, never later than when the
	// owner read it (so a skewed clock cannot stretch a debounce).
	At time.Time
	// Kind says what it asks for.
	Kind Kind
	// Mode is the mode a prompt runs in (ModeOf); empty for other kinds.
	Mode Mode
	// Prompt is a prompt's text.
	Prompt string
	// Heartbeat marks a heartbeat prompt: it runs on an idle lane and is
	// dropped when it arrives while the lane is busy (VerbDrop).
	Heartbeat bool
}

// cuts reports whether m cancels the turn running ahead of it: an
// interrupt, a rollback or a stop. A heartbeat never does.
func (m Msg) cuts() bool {
	return m.Kind == KindStop || (m.Kind == KindPrompt && !m.Heartbeat && (m.Mode == ModeInterrupt || m.Mode == ModeRollback))
}

// Verb is what a Plan asks the lane owner to do.
type Verb string

// Verbs.
const (
	// VerbRead: read the message after Pending's last one and plan again.
	VerbRead Verb = "read"
	// VerbWait: the collect batch waits for quiet; plan again at Until or
	// when a message arrives, after reading it.
	VerbWait Verb = "wait"
	// VerbRun: run the handler on the turn (Run, Merged).
	VerbRun Verb = "run"
	// VerbSettings: store the settings message's change; its run ends
	// with the settings in force.
	VerbSettings Verb = "settings"
	// VerbStop: the stop message's turn (the turn it stopped has ended).
	VerbStop Verb = "stop"
	// VerbReject: refuse the prompt: it arrived while the session was busy
	// (mode reject).
	VerbReject Verb = "reject"
	// VerbDrop: drop the heartbeat: it arrived while the session was busy.
	VerbDrop Verb = "drop"
	// VerbInvalid: dead-letter the message and end its run with an error.
	VerbInvalid Verb = "invalid"
	// VerbDuplicate: end the run of a duplicate message pointing at the
	// run of the message it duplicates; nothing runs.
	VerbDuplicate Verb = "duplicate"
	// VerbInterrupted: a message that cancels turns is queued behind the
	// collect batch: the batch is dropped as if its turn had been cut
	// (see AfterCut).
	VerbInterrupted Verb = "interrupted"
)

// Input is what PlanTurn knows at a turn boundary.
type Input struct {
	// Pending are the messages at the head of the lane read so far, oldest
	// first, in stream order without gaps; at least one.
	Pending []Msg
	// Complete is true when no message followed Pending's last one at the
	// last read.
	Complete bool
	// Settings are the session's resolved settings (collect's debounce,
	// cap and drop policy).
	Settings Settings
	// LastEnd is when the lane's previous turn ended (zero: none since
	// this owner took the lane).
	LastEnd time.Time
	// Now is the current time.
	Now time.Time
}

// Plan is the next turn of a lane.
type Plan struct {
	// Verb is what to do.
	Verb Verb
	// Run is the message whose run carries the turn.
	Run Msg
	// Merged are the other messages the turn answers (a collect batch).
	Merged []Msg
	// Dropped are messages the turn consumes without answering them.
	Dropped []Dropped
	// Prompt is the merged prompt when Merge is set.
	Prompt string
	// Merge is set when the turn runs Prompt (a collect batch of more than
	// one message, or with an overflow summary) instead of Run's message.
	Merge bool
	// Through is the last sequence the turn consumes.
	Through uint64
	// Until is when a VerbWait ends.
	Until time.Time
}

// GatherMax bounds the messages one collect batch reads off the lane.
const GatherMax = 1000

// PlanTurn decides the lane's next turn from the messages at its head:
//
//   - a message that does not decode is dead-lettered (VerbInvalid);
//   - a duplicate ends pointing at the message it duplicates
//     (VerbDuplicate);
//   - a settings message is applied (VerbSettings);
//   - a stop message ends its own run (VerbStop);
//   - a heartbeat that arrived while the previous turn ran is dropped
//     (VerbDrop), whatever its mode;
//   - a reject-mode prompt that arrived while the previous turn ran is
//     refused (VerbReject);
//   - a collect-mode prompt gathers the collect prompts right behind it
//     (VerbRead until a message of another kind or mode closes the batch or
//     the lane has no more); if the batch was queued behind a running turn
//     it waits until the lane has been quiet for the debounce time
//     (VerbWait), unless it reached the cap or is closed; an interrupt,
//     rollback or stop closing it drops it (VerbInterrupted); else the cap
//     and drop policy pick what runs, as the oldest message kept's run;
//   - any other prompt runs alone (a heartbeat too).
func PlanTurn(in Input) Plan {
	head := in.Pending[0]
	one := Plan{Run: head, Through: head.Seq}
	switch {
	case head.Kind == KindInvalid:
		one.Verb = VerbInvalid
		return one
	case head.Kind == KindDuplicate:
		one.Verb = VerbDuplicate
		return one
	case head.Kind == KindSettings:
		one.Verb = VerbSettings
		return one
	case head.Kind == KindStop:
		one.Verb = VerbStop
		return one
	case head.Heartbeat && head.At.Before(in.LastEnd):
		one.Verb = VerbDrop
		return one
	case head.Mode == ModeReject && head.At.Before(in.LastEnd):
		one.Verb = VerbReject
		return one
	case head.Mode != ModeCollect || head.Heartbeat:
		one.Verb = VerbRun
		return one
	}
	return planCollect(in)
}

func planCollect(in Input) Plan {
	s := in.Settings.normalized()
	batch := in.Pending
	var closer *Msg
	for i, m := range in.Pending {
		// A heartbeat is not collected: it runs, or is dropped, alone.
		if m.Kind != KindPrompt || m.Mode != ModeCollect || m.Heartbeat {
			batch, closer = in.Pending[:i], &in.Pending[i]
			break
		}
	}
	if len(batch) > GatherMax {
		batch = batch[:GatherMax]
	}
	closed := closer != nil || len(batch) == GatherMax
	if !closed && !in.Complete {
		return Plan{Verb: VerbRead}
	}
	head, last := batch[0], batch[len(batch)-1]
	if !closed && len(batch) < s.Cap && s.Debounce > 0 && head.At.Before(in.LastEnd) {
		if until := last.At.Add(s.Debounce); in.Now.Before(until) {
			return Plan{Verb: VerbWait, Until: until}
		}
	}
	if closer != nil && closer.cuts() {
		return Plan{Verb: VerbInterrupted, Run: head, Through: head.Seq}
	}
	p := collect(batch, s)
	p.Verb = VerbRun
	return p
}

// collect merges a collect batch under the cap and drop policy of s: the
// messages are queued one by one (Pending.Add), then every one kept is
// merged into one prompt with the overflow summary. A batch of one without
// a summary runs as the message itself.
func collect(batch []Msg, s Settings) Plan {
	var q Pending
	bySeq := make(map[uint64]Msg, len(batch))
	var dropped []Dropped
	for _, m := range batch {
		bySeq[m.Seq] = m
		it := Item{Seq: m.Seq, Prompt: m.Prompt, At: m.At}
		accepted, evicted := q.Add(it, s, m.At)
		dropped = append(dropped, evicted...)
		if !accepted {
			dropped = append(dropped, Dropped{Item: it, Reason: ReasonCapRefused})
		}
	}
	summary := q.SummaryPrompt(s)
	kept := make([]Msg, len(q.Items))
	prompts := make([]string, len(q.Items))
	for i, it := range q.Items {
		kept[i], prompts[i] = bySeq[it.Seq], it.Prompt
	}
	p := Plan{Run: kept[0], Merged: kept[1:], Dropped: dropped, Through: batch[len(batch)-1].Seq}
	if len(kept) > 1 || summary != "" {
		p.Merge, p.Prompt = true, CollectPrompt(prompts, summary)
	}
	return p
}

// Arrival is what a message arriving while a turn runs does at once.
type Arrival string

// Arrivals. The strings are the reference's active-run actions.
const (
	// ArriveRunNow: the lane is idle; the message runs next.
	ArriveRunNow Arrival = "run-now"
	// ArriveQueue: it waits on the lane for its own turn (or a steer-mode
	// prompt joins the running turn at its next boundary, see Steer).
	ArriveQueue Arrival = "enqueue-followup"
	// ArriveCut: it cancels the running turn (interrupt, rollback, stop);
	// the turn and the messages queued before it are dropped (AfterCut).
	// The reference's action for it is run-now (it runs behind the turn
	// it aborted).
	ArriveCut Arrival = "interrupt"
	// ArriveDrop: a heartbeat on a busy lane is dropped (PlanTurn drops it
	// when it reaches the head of the lane).
	ArriveDrop Arrival = "drop"
)

// OnArrival is what happens at once to m when it arrives on a lane that is
// busy (a turn runs or messages wait ahead of m) or idle. Nothing but a cut
// acts before the message's turn: every other message waits on the lane,
// which is the queue, and a heartbeat that waits is dropped.
func OnArrival(m Msg, busy bool) Arrival {
	switch {
	case !busy:
		return ArriveRunNow
	case m.Heartbeat:
		return ArriveDrop
	case m.cuts():
		return ArriveCut
	}
	return ArriveQueue
}

// SteerPlan is what a running turn takes at a model-call boundary.
type SteerPlan struct {
	// Join are the steer-mode prompts that join the turn: consumed with
	// it, their runs end pointing at it.
	Join []Msg
	// Backlog are the steer-backlog prompts shown to the turn; each stays
	// on the lane and runs as its own turn afterwards.
	Backlog []Msg
	// Scanned is the last sequence looked at (the next call reads after
	// it); unchanged when nothing was taken.
	Scanned uint64
	// BacklogShown is set once a steer-backlog prompt was shown: the
	// cursor cannot pass a message that stays, so no later steer prompt
	// may join this turn.
	BacklogShown bool
}

// Steerable reports whether m may be shown to a running turn (a steer or
// steer-backlog prompt). The owner reads the messages behind the turn while
// they are steerable: order is kept, so a steer prompt queued behind a
// follow-up waits for its own turn.
func Steerable(m Msg) bool {
	return m.Kind == KindPrompt && !m.Heartbeat && (m.Mode == ModeSteer || m.Mode == ModeSteerBacklog)
}

// Steer picks what a running turn takes from waiting, the steerable
// messages read after scanned (oldest first), given whether a steer-backlog
// prompt was shown before (reference §19: steer joins the live run;
// steer-backlog steers it and also runs as a follow-up).
func Steer(waiting []Msg, scanned uint64, backlogShown bool) SteerPlan {
	sp := SteerPlan{Scanned: scanned, BacklogShown: backlogShown}
	for _, m := range waiting {
		if !Steerable(m) {
			break
		}
		if m.Mode == ModeSteer {
			if sp.BacklogShown {
				break
			}
			sp.Join = append(sp.Join, m)
		} else {
			sp.BacklogShown = true
			sp.Backlog = append(sp.Backlog, m)
		}
		sp.Scanned = m.Seq
	}
	return sp
}

// Cut is what happens to a message queued behind a turn that was cut.
type Cut uint8

// Cuts.
const (
	// CutDrop: dropped without running (error kind interrupted).
	CutDrop Cut = iota
	// CutApply: a settings message, applied on the way and consumed.
	CutApply
	// CutEnd: the message that cut the turn (or a later one that cuts):
	// the scan ends before it and it runs next.
	CutEnd
)

// AfterCut is what happens to m, queued behind a turn that an interrupt,
// rollback or stop cut short: every message before the first that cuts is
// dropped (settings messages are applied), as the reference's interrupt and
// /stop clear the session's queue.
func AfterCut(m Msg) Cut {
	switch {
	case m.cuts():
		return CutEnd
	case m.Kind == KindSettings:
		return CutApply
	}
	return CutDrop
}
