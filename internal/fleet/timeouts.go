package fleet

import "time"

// The member's bounds on its own waits, in one place. The lane's (lease
// renewals, event acks, commits) follow from LeaseTTL and AckWait and live
// in package lanes. These stay well inside the defaults of both
// (kvstore.DefaultLeaseTTL and lanes.DefaultAckWait, 30 s): a turn that
// waits on one of them still renews its lease and is still acked in time
// (TestTimeoutsInsideLease).
const (
	// stateTimeout bounds each write of fleet state a run makes besides
	// its transcript (the run registry, auth profiles): a store in
	// failover costs a run a registry entry or a cooldown record, never
	// the run.
	stateTimeout = 5 * time.Second
	// publishAsyncTimeout ends an async publish lost in a reconnect:
	// nothing else would ever answer it.
	publishAsyncTimeout = 10 * time.Second
	// listAttemptTimeout bounds one listing of the --openai-compatible
	// server's models (at start, before any lease).
	listAttemptTimeout = 10 * time.Second
	// closeTimeout bounds each step of a member's close: the metrics
	// listener's shutdown, the connection's drain.
	closeTimeout = 5 * time.Second
)
