package queue

// Action is what the lane owner does with an arriving message.
type Action string

// Actions.
const (
	// ActionRunNow runs the message as the lane's next turn.
	ActionRunNow Action = "run-now"
	// ActionEnqueue queues the message as a follow-up (Lane.Enqueue).
	ActionEnqueue Action = "enqueue-followup"
	// ActionDrop drops the message; Decision.Reason says why.
	ActionDrop Action = "drop"
	// ActionSteer injects the message into the running turn; if the run
	// cannot take it, the owner enqueues it instead.
	ActionSteer Action = "steer"
	// ActionSteerAndEnqueue injects the message into the running turn and
	// also queues it as a follow-up (steer-backlog).
	ActionSteerAndEnqueue Action = "steer-and-enqueue"
	// ActionInterrupt aborts the running turn (if any), drops everything
	// queued and runs the message next.
	ActionInterrupt Action = "interrupt"
	// ActionReject refuses the message because the session is busy.
	ActionReject Action = "reject"
)

// ActiveRunQuery is the input of ActiveRunAction.
type ActiveRunQuery struct {
	// IsActive is true while a run of the session is in flight.
	IsActive bool
	// HasQueuedFollowups is true when follow-ups are waiting.
	HasQueuedFollowups bool
	// IsHeartbeat marks a heartbeat poll rather than a user message.
	IsHeartbeat bool
	// ShouldFollowup is true when the mode keeps busy-time messages
	// (followup, collect, steer-backlog, or steer whose injection failed).
	ShouldFollowup bool
	// Mode is the lane's queue mode.
	Mode Mode
}

// ActiveRunAction is the reference's decision for a message that was not
// steered into the running turn: run now when the session is idle, drop a
// heartbeat while busy, queue a follow-up when the mode keeps messages (or
// is steer), else run now (behind the busy run, in lane order).
func ActiveRunAction(q ActiveRunQuery) Action {
	if !q.IsActive && !q.HasQueuedFollowups {
		return ActionRunNow
	}
	if q.IsHeartbeat {
		return ActionDrop
	}
	if q.ShouldFollowup || q.Mode == ModeSteer {
		return ActionEnqueue
	}
	return ActionRunNow
}

// Busy describes the lane when a message arrives.
type Busy struct {
	// Active is true while a turn runs.
	Active bool
	// Streaming is true while the running turn can take steered input.
	Streaming bool
	// Queued is true when follow-ups are waiting.
	Queued bool
}

// Decision is what Decide chose.
type Decision struct {
	// Action is what to do with the message.
	Action Action
	// Abort asks the owner to cancel the running turn (interrupt, rollback).
	Abort bool
	// Discard asks the owner to discard the aborted turn's transcript
	// writes (rollback).
	Discard bool
	// ClearQueue asks the owner to drop every queued follow-up (with
	// ReasonInterrupted) before running the message.
	ClearQueue bool
	// Reason explains ActionDrop and ActionReject.
	Reason Reason
}

// Decide chooses what to do with a message arriving in a lane whose queue
// mode is mode (an empty mode means ModeDefault):
//
//  1. interrupt/rollback with a turn running or messages queued: abort the
//     turn, clear the queue, run the message next;
//  2. reject while busy: refuse it;
//  3. steer/steer-backlog while the turn streams: inject it (steer-backlog
//     also queues it);
//  4. otherwise ActiveRunAction.
func Decide(mode Mode, busy Busy, heartbeat bool) Decision {
	if mode == "" {
		mode = ModeDefault
	}
	if mode.interrupts() && (busy.Active || busy.Queued) && !heartbeat {
		return Decision{Action: ActionInterrupt, Abort: busy.Active, Discard: busy.Active && mode == ModeRollback, ClearQueue: busy.Queued}
	}
	if mode == ModeReject && (busy.Active || busy.Queued) {
		if heartbeat {
			return Decision{Action: ActionDrop, Reason: ReasonHeartbeatBusy}
		}
		return Decision{Action: ActionReject, Reason: ReasonRejectedBusy}
	}
	if mode.steers() && busy.Active && busy.Streaming && !heartbeat {
		if mode == ModeSteerBacklog {
			return Decision{Action: ActionSteerAndEnqueue}
		}
		return Decision{Action: ActionSteer}
	}
	a := ActiveRunAction(ActiveRunQuery{
		IsActive:           busy.Active,
		HasQueuedFollowups: busy.Queued,
		IsHeartbeat:        heartbeat,
		ShouldFollowup:     mode.queues() || mode == ModeSteer,
		Mode:               mode,
	})
	d := Decision{Action: a}
	if a == ActionDrop {
		d.Reason = ReasonHeartbeatBusy
	}
	return d
}
