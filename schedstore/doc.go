// Package schedstore stores schedules and fires them: the NATS adapter of
// package schedule.
//
// A schedule is a record in the KV bucket "schedules" (key: its id) and a
// one-shot server message schedule (nats-server 2.12+ message schedules,
// "@at <time>") on agent.sched.at.<id> in the stream AGENT_SCHED. At the
// schedule's next due time the server publishes agent.sched.fire.<id>;
// the workers share one durable consumer of those, so exactly one worker
// handles each: it plans the due times since the last one handled
// (schedule.Plan: overlap, catch-up), sends each firing to its session's
// lane with a deterministic message id (a second send of the same firing
// is a duplicate the stream drops), records the firings in the record's
// history with a compare-and-set write, arms the next @at and acks. No
// worker polls: between firings a schedule costs a timer in the server.
//
//   - store.go: the bucket and stream, and the operations on records
//     (Add, Get, List, SetPaused, Remove) with arming.
//   - fire.go: the Firer, which consumes the firing messages and runs
//     one firing (Handle), and Reconcile, which re-arms at start-up.
package schedstore
