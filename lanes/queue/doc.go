// Package queue is the queue policy of one session lane, as one pure
// planner that the lane owner runs:
//
//   - PlanTurn decides the lane's next turn from the messages at its head:
//     run one prompt, merge a collect batch (after its debounce, under its
//     cap and drop policy), store a settings message, end a stop command's
//     run, refuse a reject-mode prompt or drop a heartbeat that arrived
//     while the session was busy, dead-letter a message that does not
//     decode, or drop a batch a cut is queued behind. When it needs more it
//     says so (read the next message, wait until a time) and is asked
//     again.
//   - OnArrival says what a message arriving while a turn runs does at once:
//     interrupt, rollback and stop cut the turn; a heartbeat is dropped;
//     everything else waits on the lane.
//   - Steer picks what a running turn takes at a model-call boundary
//     (steer joins it, steer-backlog is shown and stays).
//   - AfterCut says what happens to each message queued behind a cut turn.
//   - IDs (ids.go) say which messages duplicate an earlier one of the lane
//     (the same message id within the de-duplication window): such a
//     message ends pointing at the first, and cuts nothing.
//
// It reproduces the reply queue of the reference runtime (spec §19; the
// queue.json conformance cases pin Pending, CollectPrompt, the mode and drop
// names and OnArrival) and accepts the LangGraph multitask names too:
// enqueue (= followup), reject (refuse while busy) and rollback (interrupt
// and discard the interrupted turn). The lane's stream is the queue: the
// planner holds no state between calls; its caller passes the messages, the
// settings and the time (IDs keep the ids the caller noted, and the lane's
// records carry them between owners).
//
// The package is pure: no NATS, no clocks, no goroutines.
package queue
