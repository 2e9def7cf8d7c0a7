// Package queue is the queue policy of one session lane: what happens to a
// message that arrives while the lane's agent is busy (run now, steer it into
// the running turn, queue it as a follow-up, interrupt, reject or drop it),
// how the queued messages are capped (drop the oldest, refuse the newest, or
// drop and summarise) and how they are drained after the run (one turn per
// message, or every pending message merged into one collected prompt once
// the debounce time has passed).
//
// It reproduces the reply queue of the reference runtime (spec §19) and
// accepts the LangGraph multitask names too: enqueue (= followup), reject
// (refuse while busy) and rollback (interrupt and discard the interrupted
// turn).
//
// Everything is a value or a small state machine driven by its caller, with
// the current time passed in: the NATS lane owner calls Lane.Decide for each
// arriving message, Lane.Enqueue for those it queues, and Lane.Next/Commit to
// drain; or, when the stream itself holds the pending messages, Collect on
// the pending list at a turn boundary. No message is dropped silently: each
// accepted message ends in a Turn (alone or merged), or is returned with a
// Reason.
//
// The package is pure: no NATS, no clocks, no goroutines.
package queue
