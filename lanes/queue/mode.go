package queue

import (
	"strings"
	"time"
)

// Mode is a queue mode: what to do with a message that arrives while the
// session is busy.
type Mode string

// Queue modes.
const (
	// ModeSteer injects the message into the running turn (at the next
	// tool boundary); when the run cannot take it, it becomes a follow-up.
	ModeSteer Mode = "steer"
	// ModeFollowup queues the message and runs it as its own turn after
	// the current one (LangGraph "enqueue").
	ModeFollowup Mode = "followup"
	// ModeCollect queues the message and, after the run, merges every
	// queued message into one turn.
	ModeCollect Mode = "collect"
	// ModeSteerBacklog steers the message into the running turn and also
	// queues it as a follow-up.
	ModeSteerBacklog Mode = "steer-backlog"
	// ModeInterrupt aborts the running turn, drops what is queued and runs
	// the message next.
	ModeInterrupt Mode = "interrupt"
	// ModeReject refuses the message while the session is busy (LangGraph).
	ModeReject Mode = "reject"
	// ModeRollback is ModeInterrupt that also discards the interrupted
	// turn from the transcript (LangGraph).
	ModeRollback Mode = "rollback"
)

// DropPolicy is what happens when a message arrives at a full queue.
type DropPolicy string

// Drop policies.
const (
	// DropOld evicts the oldest queued messages to make room.
	DropOld DropPolicy = "old"
	// DropNew refuses the arriving message.
	DropNew DropPolicy = "new"
	// DropSummarize evicts the oldest messages and keeps a one-line summary
	// of each, sent with the next drained turn.
	DropSummarize DropPolicy = "summarize"
)

// Defaults of the reference runtime.
const (
	ModeDefault     = ModeCollect
	DebounceDefault = 1000 * time.Millisecond
	CapDefault      = 20
	DropDefault     = DropSummarize
)

// DebounceMax bounds a debounce: a collect batch's owner holds its lane's
// slot while it waits, so a session cannot keep one for long by asking for
// a long quiet time. A longer one (stored before this bound) counts as
// DebounceMax.
const DebounceMax = time.Minute

// ParseMode normalises a mode name or alias (case-insensitive, trimmed). It
// reports false for an empty or unknown name.
//
// Aliases: steer = steering, queue, queued; followup = follow-ups,
// followups, enqueue; collect = coalesce; steer-backlog =
// steer+backlog, steer_backlog; interrupt = interrupts, abort; reject;
// rollback.
func ParseMode(raw string) (Mode, bool) {
	switch strings.ToLower(strings.TrimSpace(raw)) {
	case "steer", "steering", "queue", "queued":
		return ModeSteer, true
	case "followup", "follow-ups", "followups", "enqueue":
		return ModeFollowup, true
	case "collect", "coalesce":
		return ModeCollect, true
	case "steer-backlog", "steer+backlog", "steer_backlog":
		return ModeSteerBacklog, true
	case "interrupt", "interrupts", "abort":
		return ModeInterrupt, true
	case "reject":
		return ModeReject, true
	case "rollback":
		return ModeRollback, true
	}
	return "", false
}

// ParseDropPolicy normalises a drop policy name or alias (old = oldest, new
// = newest, summarize = summary). It reports false for an empty or unknown
// name.
func ParseDropPolicy(raw string) (DropPolicy, bool) {
	switch strings.ToLower(strings.TrimSpace(raw)) {
	case "old", "oldest":
		return DropOld, true
	case "new", "newest":
		return DropNew, true
	case "summarize", "summary":
		return DropSummarize, true
	}
	return "", false
}
