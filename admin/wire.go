package admin

import (
	"fmt"
	"slices"

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
	OpFleet      = "fleet"       // empty → FleetReply
	OpApprovals  = "approvals"   // ApprovalsRequest → ApprovalsReply
	OpForget     = "forget"      // ForgetRequest → ForgetReply
)

// StatsEndpoint is the endpoint whose data in micro's STATS reply
// ($SRV.STATS.lanefleet-admin, which every worker answers) is the worker's
// WorkerStats; the other endpoints carry none.
const StatsEndpoint = "sessions"

// Subject returns the subject of op.
func Subject(op string) string { return Prefix + op }

// CodeBusy is the error code of a forget whose session runs a turn or has
// a message waiting.
const CodeBusy = "409"

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
// first, a page at a time.
type SessionsRequest struct {
	Limit int `json:"limit,omitempty"` // LimitDefault when 0, at most LimitMax
	// Scope, when set, lists only the sessions it allows.
	Scope *Scope `json:"scope,omitempty"`
	// Query keeps the sessions whose key contains it, case-insensitively.
	Query string `json:"q,omitempty"`
	// After is the previous page's Next: the page starts after it. Offset
	// skips that many sessions instead (with After empty).
	After  string `json:"after,omitempty"`
	Offset int    `json:"offset,omitempty"`
	// State asks for each listed session's state, turns, cost, pending
	// sub-agents, parent and schedules (one read of its newest transcript
	// record each, and one listing of the schedules).
	State bool `json:"state,omitempty"`
}

// Scope is the sessions a caller may reach: those whose key starts with
// one of Prefixes ("" = every key) or is one of Keys. It is the gateway's
// auth.Principal.AllowsSession, carried to the service that lists.
type Scope struct {
	Prefixes []string `json:"prefixes,omitempty"`
	Keys     []string `json:"keys,omitempty"`
}

// ScopeOf is the scope of a caller that reaches the keys with one of
// prefixes and the single keys: nil (every session) when a prefix is "".
func ScopeOf(prefixes, keys []string) *Scope {
	if slices.Contains(prefixes, "") {
		return nil
	}
	return &Scope{Prefixes: prefixes, Keys: keys}
}

// Allows reports whether the scope reaches key.
func (s *Scope) Allows(key string) bool {
	return s == nil || events.KeyInScope(key, s.Prefixes, s.Keys)
}

// MaxScopedRequestBytes bounds a request that carries a Scope (a token
// may list many keys); the others are bound by sessionsvc.MaxRequestBytes.
const MaxScopedRequestBytes = 64 << 10

// SessionsReply lists sessions: those with run events still stored (the
// event stream keeps them for its max age, 24 hours by default), with
// messages stored on their lane, or with a run running now.
type SessionsReply struct {
	Sessions []Session `json:"sessions" msgpack:"sessions"`
	// Total counts the sessions found (in the scope, matching the query),
	// before the page; -1 when the listing reads the session index and
	// counting them would read every one: a query or a scope other than
	// single keys (the whole index counts at no cost).
	Total int `json:"total" msgpack:"total"`
	// Next continues the listing (SessionsRequest.After); "" on the last
	// page.
	Next string `json:"next,omitempty" msgpack:"next,omitempty"`
	// Partial reports a page that stopped after reading IndexScanMax
	// index entries without filling (a query or scope matching few
	// sessions): Next goes on from there.
	Partial bool `json:"partial,omitempty" msgpack:"partial,omitempty"`
}

// Session states (Session.State, when the request asked for them).
const (
	StateIdle    = "idle"    // nothing runs, nothing waits
	StateRunning = "running" // a worker runs a turn of it
	StateQueued  = "queued"  // messages wait on its lane, none running
)

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
	// State (StateIdle, StateRunning, StateQueued), Turns (committed) and
	// CostUSD (their summed cost) are set when the request asked for
	// State.
	State   string  `json:"state,omitempty" msgpack:"state,omitempty"`
	Turns   int64   `json:"turns,omitempty" msgpack:"turns,omitempty"`
	CostUSD float64 `json:"costUsd,omitempty" msgpack:"cost,omitempty"`
	// Approvals counts the calls waiting for the user's approval.
	Approvals int `json:"approvals,omitempty" msgpack:"approvals,omitempty"`
	// Children counts its pending sub-agents (spawned, their completion
	// not received yet); Parent is, for a sub-agent, the session that
	// spawned it; Schedules counts the schedules that send to it
	// (paused ones too). Set when the request asked for State.
	Children  int    `json:"children,omitempty" msgpack:"children,omitempty"`
	Parent    string `json:"parent,omitempty" msgpack:"parent,omitempty"`
	Schedules int    `json:"schedules,omitempty" msgpack:"schedules,omitempty"`
}

// ForgetRequest names the session to forget.
type ForgetRequest struct {
	Session string `json:"session"`
}

// ForgetReply says what a forget removed: the session's transcript,
// settings and lane records (Keys of them) and its stored run events
// (Events of them). A session that never stored anything removes none.
type ForgetReply struct {
	Session string `json:"session" msgpack:"session"`
	Keys    int    `json:"keys" msgpack:"keys"`
	Events  uint64 `json:"events" msgpack:"events"`
}

// ApprovalsRequest asks for the calls waiting for approval in the
// sessions of Scope (every session when nil).
type ApprovalsRequest struct {
	Scope *Scope `json:"scope,omitempty"`
	Limit int    `json:"limit,omitempty"` // LimitDefault when 0, at most LimitMax
}

// ApprovalsReply lists pending calls, newest first.
type ApprovalsReply struct {
	Approvals []Approval `json:"approvals" msgpack:"approvals"`
	// More says there were more than the limit; Scanned counts the
	// sessions looked at (at most ApprovalScanMax, the most recent).
	More    bool `json:"more,omitempty" msgpack:"more,omitempty"`
	Scanned int  `json:"scanned" msgpack:"scanned"`
}

// ApprovalScanMax bounds the sessions one approvals request looks at: the
// most recently active of the scope.
const ApprovalScanMax = 10000

// Approval is one tool call waiting for the user's approval.
type Approval struct {
	Session string `json:"session" msgpack:"session"`
	Run     string `json:"run" msgpack:"run"` // the run that left it waiting
	Call    string `json:"call" msgpack:"call"`
	Tool    string `json:"tool" msgpack:"tool"`
	// Arguments are the call's arguments (JSON text) as the model wrote
	// them; "" when the run's record no longer says.
	Arguments string `json:"arguments" msgpack:"args"`
	// RequestedAt is when the run that asked was committed (Unix ms).
	RequestedAt int64 `json:"requestedAt" msgpack:"at"`
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

// WorkerStats is what one worker says of itself in micro's STATS reply
// (the data of StatsEndpoint): Client.Workers gathers every worker's.
type WorkerStats struct {
	Worker  string `json:"worker"`
	Version string `json:"version"` // the worker's build (lanefleet version)
	// SlotsUsed are the lanes it runs now, of SlotsTotal at once.
	SlotsUsed  int `json:"slotsUsed"`
	SlotsTotal int `json:"slotsTotal"`
	// LanesHeld are the lanes whose lease it holds, LanesWaiting those
	// waiting on it for a slot.
	LanesHeld    int `json:"lanesHeld"`
	LanesWaiting int `json:"lanesWaiting"`
	// Turns counts the turns it committed since it started; TurnsPerSec
	// is the worker's own rate of them over the last 10 s or so.
	Turns       int64   `json:"turns"`
	TurnsPerSec float64 `json:"turnsPerSec"`
	Now         int64   `json:"now"` // the worker's clock (Unix ms)
}

// FleetReply is the fleet's queue state, as the answering worker reads
// the streams (every worker reads the same).
type FleetReply struct {
	// Backlog counts the messages stored on the inbound stream: waiting
	// on their lanes or being run (owners delete processed messages as
	// their turns commit), BacklogBytes their size.
	Backlog      uint64 `json:"backlog" msgpack:"backlog"`
	BacklogBytes uint64 `json:"backlogBytes" msgpack:"backlogBytes"`
	// DeadLetters counts the dead letters stored.
	DeadLetters uint64 `json:"deadLetters" msgpack:"dead"`
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
