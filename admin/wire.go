package admin

import (
	"fmt"

	"github.com/lanefleet/lanefleet/events"
)

// The service and its subjects.
const (
	// Name is the micro service name every worker serves.
	Name = "lanefleet-admin"
	// Version is the service's version (of this wire format).
	Version = "1.0.0"
	// Prefix starts every subject: agent.admin.<op>.
	Prefix = "agent.admin."
	// QueueGroup is the queue group of every endpoint: one worker answers
	// each request.
	QueueGroup = "lanefleet-admin"
)

// Operations: the subject is Prefix + op.
const (
	OpSessions   = "sessions"    // SessionsRequest → SessionsReply
	OpDeadList   = "dlq.list"    // DeadListRequest → DeadListReply
	OpDeadShow   = "dlq.show"    // DeadShowRequest → DeadLetter (with Headers and Data)
	OpDeadReplay = "dlq.replay"  // DeadSelect → DeadReplayReply
	OpDeadPurge  = "dlq.purge"   // DeadSelect → DeadPurgeReply
	OpAuthStatus = "auth.status" // empty → AuthStatusReply
	OpAuthReset  = "auth.reset"  // AuthResetRequest → AuthResetReply
)

// Subject returns the subject of op.
func Subject(op string) string { return Prefix + op }

// CodeNotFound is the error code of a request naming a dead letter or an
// auth profile that does not exist. The other codes are the lane service's
// (service.CodeBadRequest, ...).
const CodeNotFound = "404"

// Bounds.
const (
	// LimitDefault is how many items a listing returns by default;
	// LimitMax the most a request may ask for.
	LimitDefault = 100
	LimitMax     = 1000
	// ReplayMax is the most dead letters one replay request replays.
	ReplayMax = 100
)

// SessionsRequest asks for the sessions with recent activity, newest
// first.
type SessionsRequest struct {
	Limit int `json:"limit,omitempty"` // LimitDefault when 0, at most LimitMax
}

// SessionsReply lists sessions: those with run events still stored (the
// event stream keeps them for its max age, 24 hours by default), with
// messages stored on their lane, or with a run running now.
type SessionsReply struct {
	Sessions []Session `json:"sessions" msgpack:"sessions"`
	// Total counts the sessions found, before the limit.
	Total int `json:"total" msgpack:"total"`
}

// Session is one session in a listing.
type Session struct {
	Key         string `json:"key" msgpack:"key"`
	Fingerprint string `json:"fingerprint" msgpack:"fp"` // what the workers' log lines name it by
	// LastActivity is when its newest run last published an event, or its
	// newest message was stored (Unix ms).
	LastActivity int64  `json:"lastActivity" msgpack:"last"`
	LastRun      string `json:"lastRun,omitempty" msgpack:"lastRun,omitempty"`
	// Runs counts its runs whose events are still stored.
	Runs int `json:"runs" msgpack:"runs"`
	// Stored counts the messages stored on its lane: waiting, running, or
	// processed and not purged yet (backlog --session gives the exact
	// backlog).
	Stored int `json:"stored" msgpack:"stored"`
	// Running is the run a worker runs now, on Worker.
	Running string `json:"running,omitempty" msgpack:"running,omitempty"`
	Worker  string `json:"worker,omitempty" msgpack:"worker,omitempty"`
	// Holding says how Worker holds the session's lane (kvstore.Holding):
	// live; unresponsive, its lease lapsing in LapsesInMs unless renewed,
	// then another worker takes the run over; or lapsed, the run starts
	// again when a worker takes the lane. "" when not known.
	Holding    string `json:"holding,omitempty" msgpack:"holding,omitempty"`
	LapsesInMs int64  `json:"lapsesInMs,omitempty" msgpack:"lapsesIn,omitempty"`
}

// DeadListRequest asks for dead letters in stream order after After,
// optionally of one reason.
type DeadListRequest struct {
	Reason string `json:"reason,omitempty"` // e.g. poison, invalid, bad-lane
	After  uint64 `json:"after,omitempty"`  // the previous page's Next
	Limit  int    `json:"limit,omitempty"`  // LimitDefault when 0, at most LimitMax
}

// DeadListReply is a page of dead letters (without their data).
type DeadListReply struct {
	Letters []DeadLetter `json:"letters" msgpack:"letters"`
	More    bool         `json:"more,omitempty" msgpack:"more,omitempty"` // ask again with After = Next
	Next    uint64       `json:"next,omitempty" msgpack:"next,omitempty"`
}

// DeadLetter is a message the fleet could not process, as the dead-letter
// stream keeps it.
type DeadLetter struct {
	Seq    uint64 `json:"seq" msgpack:"seq"`       // its sequence in the dead-letter stream: its id
	Reason string `json:"reason" msgpack:"reason"` // poison, invalid, bad-lane
	Time   int64  `json:"time" msgpack:"time"`     // when it was dead-lettered (Unix ms)
	// Subject is the inbound subject it was published on; Session its
	// session key when that subject is a lane's.
	Subject     string `json:"subject" msgpack:"subject"`
	Session     string `json:"session,omitempty" msgpack:"session,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty" msgpack:"fp,omitempty"`
	InboundSeq  uint64 `json:"inboundSeq,omitempty" msgpack:"inboundSeq,omitempty"` // its run id
	Error       string `json:"error,omitempty" msgpack:"error,omitempty"`           // why
	Size        int    `json:"size" msgpack:"size"`                                 // bytes of data
	// Headers and Data are set by dlq.show only. Data is cut to fit a
	// reply when it does not (Truncated).
	Headers   map[string][]string `json:"headers,omitempty" msgpack:"headers,omitempty"`
	Data      []byte              `json:"data,omitempty" msgpack:"data,omitempty"`
	Truncated bool                `json:"truncated,omitempty" msgpack:"truncated,omitempty"`
}

// DeadShowRequest names one dead letter.
type DeadShowRequest struct {
	Seq uint64 `json:"seq"`
}

// DeadSelect picks the dead letters a replay or purge applies to: exactly
// one of Seqs, Reason or All.
type DeadSelect struct {
	Seqs   []uint64 `json:"seqs,omitempty"`
	Reason string   `json:"reason,omitempty"`
	All    bool     `json:"all,omitempty"`
	// Keep leaves replayed dead letters in the stream (replay only).
	Keep bool `json:"keep,omitempty"`
}

// DeadReplayReply says what a replay did. A replayed message is published
// again on its lane (a new run) and its dead letter deleted; a message
// whose subject is no lane's cannot be replayed.
type DeadReplayReply struct {
	Replayed []Replayed `json:"replayed" msgpack:"replayed"`
	Skipped  []Skipped  `json:"skipped,omitempty" msgpack:"skipped,omitempty"`
	// More means the request selected more than ReplayMax letters: ask
	// again.
	More bool `json:"more,omitempty" msgpack:"more,omitempty"`
}

// Replayed is one replayed dead letter and the run it became.
type Replayed struct {
	Seq     uint64 `json:"seq" msgpack:"seq"`
	Session string `json:"session" msgpack:"session"`
	Run     string `json:"run" msgpack:"run"`
}

// Skipped is a selected dead letter that was not replayed, and why.
type Skipped struct {
	Seq uint64 `json:"seq" msgpack:"seq"`
	Why string `json:"why" msgpack:"why"`
}

// DeadPurgeReply says how many dead letters a purge removed.
type DeadPurgeReply struct {
	Purged uint64 `json:"purged" msgpack:"purged"`
}

// AuthStatusReply is the auth profiles of the answering worker and their
// fleet-wide state (cooldowns live in the auth bucket, shared by every
// worker; the profiles are the worker's configuration). No key or token
// is ever part of it.
type AuthStatusReply struct {
	Worker   string            `json:"worker" msgpack:"worker"`
	Now      int64             `json:"now" msgpack:"now"` // the worker's clock (Unix ms)
	Profiles []AuthProfile     `json:"profiles" msgpack:"profiles"`
	LastGood map[string]string `json:"lastGood,omitempty" msgpack:"lastGood,omitempty"` // provider → profile id
}

// AuthProfile is one auth profile's state.
type AuthProfile struct {
	ID       string `json:"id" msgpack:"id"`
	Provider string `json:"provider" msgpack:"provider"`
	Type     string `json:"type" msgpack:"type"`
	// Cooling is true while the profile is in cooldown or disabled for
	// every model; Models lists per-model cooldowns (model → until).
	Cooling        bool             `json:"cooling" msgpack:"cooling"`
	CooldownUntil  int64            `json:"cooldownUntil,omitempty" msgpack:"cooldownUntil,omitempty"`
	DisabledUntil  int64            `json:"disabledUntil,omitempty" msgpack:"disabledUntil,omitempty"`
	DisabledReason string           `json:"disabledReason,omitempty" msgpack:"disabledReason,omitempty"`
	RetryUntil     int64            `json:"retryUntil,omitempty" msgpack:"retryUntil,omitempty"`
	ErrorCount     int              `json:"errorCount,omitempty" msgpack:"errorCount,omitempty"`
	FailureCounts  map[string]int   `json:"failureCounts,omitempty" msgpack:"failureCounts,omitempty"`
	Models         map[string]int64 `json:"models,omitempty" msgpack:"models,omitempty"`
	LastUsed       int64            `json:"lastUsed,omitempty" msgpack:"lastUsed,omitempty"`
	LastFailureAt  int64            `json:"lastFailureAt,omitempty" msgpack:"lastFailureAt,omitempty"`
}

// AuthResetRequest names the profile whose cooldowns to clear.
type AuthResetRequest struct {
	Profile string `json:"profile"`
}

// AuthResetReply says whether there was anything to clear.
type AuthResetReply struct {
	Profile string `json:"profile" msgpack:"profile"`
	Cleared bool   `json:"cleared" msgpack:"cleared"`
}

// checkReason validates a reason given in a request: empty (any) or one
// of events.DeadReasons.
func checkReason(r string) error {
	if r == "" {
		return nil
	}
	if err := events.CheckDeadReason(r); err != nil {
		return fmt.Errorf("reason %w", err)
	}
	return nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
