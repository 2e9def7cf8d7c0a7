package sessionsvc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/message"
)

// The service and its subjects.
const (
	// Name is the micro service name every worker serves.
	Name = "lanefleet-lanes"
	// Version is the service's version (of this wire format).
	Version = "1.0.0"
	// Prefix starts every subject: agent.svc.<lane token>.<op>.
	Prefix = "agent.svc."
	// QueueGroup is the queue group of every endpoint: one worker answers
	// each request.
	QueueGroup = "lanefleet-lanes"
)

// Operations, the last token of the subject.
const (
	OpHistory  = "history"  // HistoryRequest → HistoryReply
	OpImport   = "import"   // a pi session file (JSON Lines) → ImportReply
	OpEvents   = "events"   // EventsRequest → EventsReply
	OpSettings = "settings" // empty → SettingsReply (queue and run settings, session state)
	OpBacklog  = "backlog"  // empty → BacklogReply
	OpRuns     = "runs"     // RunsRequest → RunsReply
)

// Subject returns the subject of op on the lane of token (see
// events.KeyToken).
func Subject(token, op string) string { return Prefix + token + "." + op }

// MaxRequestBytes bounds every request body but an import's (which the
// server's max payload bounds).
const MaxRequestBytes = 4 << 10

// Error codes, in the micro error reply's Nats-Service-Error-Code header.
// The description (Nats-Service-Error) says what happened.
const (
	CodeBadRequest  = "400" // the request is malformed: retrying it cannot help
	CodeBusy        = "409" // import: a worker is running the session
	CodeNotEmpty    = "412" // import: the session already has a transcript
	CodeTooLarge    = "413" // an import or a stored item does not fit a message
	CodeInternal    = "500" // stored data is corrupt
	CodeUnavailable = "503" // JetStream did not answer (leader election, shutdown): retry
)

// HistoryRequest asks for a page of a session's transcript. The zero value
// asks for the first page; a later page repeats the previous reply's Next
// and Skip.
type HistoryRequest struct {
	From uint64 `json:"from,omitempty"` // stream sequence to resume at
	Skip int    `json:"skip,omitempty"` // entries of the record at From already returned
	// Raw asks for the lines imported entries were read from
	// (message.Entry.Raw), for an export that gives them back byte for
	// byte. A service older than this field refuses it (CodeBadRequest).
	Raw bool `json:"raw,omitempty"`
}

// HistoryReply is a page of a transcript: pi session entries in order.
// Keys are short: a page must fit the server's max payload, and a record
// that did must fit a page of its own.
type HistoryReply struct {
	Entries []message.Entry `msgpack:"e"`
	// SessionID is the pi session id of the newest record of the page that
	// has one (the id an export's header carries).
	SessionID string `msgpack:"s,omitempty"`
	// Header is the session header of an imported file, on the page that
	// holds the import (the first); nil for a session that was not
	// imported.
	Header *message.Entry `msgpack:"h,omitempty"`
	More   bool           `msgpack:"m,omitempty"` // ask again with Next and Skip
	Next   uint64         `msgpack:"n,omitempty"`
	Skip   int            `msgpack:"k,omitempty"`
}

// EventsRequest asks for a run's stored events from event sequence From.
// After, the previous reply's Next, lets the service resume its walk of the
// stream where the previous one stopped.
//
// Open says the caller's last event of the run (seq From-1) is one that
// leaves the run running (see Open): when the walk finds nothing new, the
// service answers running as if it had read that event itself, without
// looking for the run's final in its committed turn's record. A caller
// that is not sure leaves it false and costs the service that read.
//
// Lease asks, when the run is running, how the worker holding its lane
// keeps the lane's lease (EventsReply.Lease): a follower that has seen no
// event for a while learns whether the run's worker stopped answering. A
// service older than the field refuses it (CodeBadRequest).
type EventsRequest struct {
	Run   string `json:"run"`
	From  uint64 `json:"from,omitempty"`  // first event seq wanted; default 1
	After uint64 `json:"after,omitempty"` // stream sequence to resume at
	Open  bool   `json:"open,omitempty"`  // event From-1 left the run running
	Lease bool   `json:"lease,omitempty"` // say how the lane's holder keeps its lease
}

// Open reports whether ev, as a run's last stored event, leaves the run
// running: anything but a final event and a lifecycle end or error (after
// which the run's final may be in its committed turn's record only).
func Open(ev *events.Event) bool {
	return !ev.Terminal() && !(ev.Stream == events.StreamLifecycle && (ev.Data.Phase == events.PhaseEnd || ev.Data.Phase == events.PhaseError))
}

// Run states, in EventsReply.State.
const (
	StateUnknown = "unknown" // no event, no waiting message, no record: no such run of this session (or it expired)
	StateQueued  = "queued"  // no event yet; the message waits on its lane
	StateRunning = "running" // events but no final event yet
	StateDone    = "done"    // the final event is stored (or the committed turn's record holds it)
)

// EventsReply carries stored events of a run, in the order they were stored.
// Each is the message as the worker published it, decoded by the client
// with events.DecodeEvent. When the stream holds no final event but the
// run's committed turn record does (the final's publish failed, or the
// run's events expired), that final comes last.
type EventsReply struct {
	Events []StoredEvent `msgpack:"v"`
	Next   uint64        `msgpack:"n"`           // resume here (EventsRequest.After)
	More   bool          `msgpack:"m,omitempty"` // cut at the reply's size or time budget: ask again
	State  string        `msgpack:"s"`
	// Lease is the lane's lease, when the request asked (Lease) and the
	// run is running; nil when no lease is in force and none lapsed.
	Lease *Lease `msgpack:"l,omitempty"`
}

// Lease says how the worker holding a lane keeps the lane's lease, as the
// answering worker reads it; the durations are by its clock, so a client's
// own clock does not matter.
type Lease struct {
	// Worker holds the lane since Since (Unix ms); "" when no lease is in
	// force.
	Worker string `json:"worker,omitempty" msgpack:"w,omitempty"`
	Since  int64  `json:"since,omitempty" msgpack:"s,omitempty"`
	// RenewedAgoMs is how long ago the holder last renewed the lease,
	// LapsesInMs how long until it lapses unless renewed.
	RenewedAgoMs int64 `json:"renewedAgoMs,omitempty" msgpack:"r,omitempty"`
	LapsesInMs   int64 `json:"lapsesInMs,omitempty" msgpack:"x,omitempty"`
	// Unresponsive: the holder missed its renewals
	// (kvstore.LeaseState.Overdue): it stopped answering, and another
	// worker takes the lane once the lease lapses, within LapsesInMs.
	Unresponsive bool `json:"unresponsive,omitempty" msgpack:"u,omitempty"`
	// Lapsed: no lease is in force because the last one lapsed
	// unreleased, LapsedAgoMs ago: its worker stopped without releasing
	// the lane, and the next worker that takes the lane runs what waits.
	Lapsed      bool  `json:"lapsed,omitempty" msgpack:"l,omitempty"`
	LapsedAgoMs int64 `json:"lapsedAgoMs,omitempty" msgpack:"a,omitempty"`
}

// LeaseOf returns the wire form of a lane's lease state at now: nil when
// no lease is in force and none lapsed.
func LeaseOf(st kvstore.LeaseState, now time.Time) *Lease {
	switch {
	case st.Held:
		l := &Lease{Worker: st.Holder.Worker, Since: st.Holder.Acquired, RenewedAgoMs: max(now.Sub(st.Renewed), 0).Milliseconds(),
			LapsesInMs: max(st.Expires().Sub(now), 0).Milliseconds(), Unresponsive: st.Overdue(now)}
		if l.Worker == "" {
			l.Worker = "(unreadable lease)"
		}
		return l
	case !st.Lapsed.IsZero():
		return &Lease{Lapsed: true, LapsedAgoMs: max(now.Sub(st.Lapsed), 0).Milliseconds()}
	}
	return nil
}

// StoredEvent is one stored event message.
type StoredEvent struct {
	JSON bool   `msgpack:"j,omitempty"` // encoded as JSON, else msgpack
	Data []byte `msgpack:"d"`
}

// ContentType returns the event's content type for events.DecodeEvent.
func (e StoredEvent) ContentType() string {
	if e.JSON {
		return events.ContentJSON
	}
	return events.ContentMsgpack
}

// ImportReply says what an import stored.
type ImportReply struct {
	SessionID string `msgpack:"id"`
	Entries   int    `msgpack:"n"`
	Skipped   int    `msgpack:"skipped,omitempty"` // malformed lines left out
	// Closed counts the tool calls the file left unanswered, each stored
	// with a "not run" error result (TextImportNotRun); in Entries.
	Closed int `msgpack:"closed,omitempty"`
}

// SettingsReply carries a session's stored queue and run settings (nil
// when none are stored) and its state: the auth profile its next turn
// starts on and the running total of its usage (nil when no turn has
// reported any).
//
// A stored settings record that does not read (corrupt, invalid or
// oversized) is answered as the worker treats it: the session runs on the
// defaults, so Settings and Run are nil, State is as usual, and
// Unreadable says what is wrong with the record. The session's next
// settings change (a reset, or any value set) replaces it.
type SettingsReply struct {
	Settings   *events.QueueSettings `msgpack:"settings"`
	Run        *events.RunSettings   `msgpack:"run,omitempty"`
	State      *events.SessionState  `msgpack:"state,omitempty"`
	Unreadable string                `msgpack:"unreadable,omitempty"`
}

// BacklogReply says what waits on a session's lane: the messages not yet
// answered by a committed turn (the one running now included), the oldest
// of them, and the worker that holds the lane.
type BacklogReply struct {
	// Waiting counts the lane's messages after its last committed turn.
	Waiting int `json:"waiting" msgpack:"w"`
	// More means the count stopped at its bound (MaxBacklogWalk stored
	// messages already processed and not yet purged): Waiting is then an
	// upper bound.
	More bool `json:"more,omitempty" msgpack:"m,omitempty"`
	// OldestRun is the run id of the oldest waiting message, OldestAt when
	// it was stored (Unix ms).
	OldestRun string `json:"oldestRun,omitempty" msgpack:"o,omitempty"`
	OldestAt  int64  `json:"oldestAt,omitempty" msgpack:"t,omitempty"`
	// Processed is the inbound sequence of the last committed turn.
	Processed uint64 `json:"processed,omitempty" msgpack:"p,omitempty"`
	// Holder is the worker holding the lane's lease (running its turns),
	// HeldSince when it took the lane (Unix ms); empty when idle.
	Holder    string `json:"holder,omitempty" msgpack:"h,omitempty"`
	HeldSince int64  `json:"heldSince,omitempty" msgpack:"s,omitempty"`
	// Lease says how the holder keeps the lease (Holder and HeldSince
	// repeat its Worker and Since, for a client that predates it), or
	// that the last lease lapsed; nil when idle.
	Lease *Lease `json:"lease,omitempty" msgpack:"l,omitempty"`
}

// MaxBacklogWalk bounds the processed messages a backlog request steps
// over (they are purged when the lane's owner releases it).
const MaxBacklogWalk = 1000

// Error is an error reply of the service.
type Error struct {
	Code        string // one of the Code constants
	Description string
}

func (e *Error) Error() string { return "lane service: " + e.Code + ": " + e.Description }

// RefusedNewField reports whether err is a service's refusal of a request
// as malformed: what a worker of an older version answers a request that
// carries a field it does not know. A client that set such a field asks
// again without it.
func RefusedNewField(err error) bool {
	se, ok := errors.AsType[*Error](err)
	return ok && se.Code == CodeBadRequest
}

// Temporary reports whether retrying the request may succeed.
func (e *Error) Temporary() bool { return e.Code == CodeUnavailable }

// parseSubject returns the lane token and session key of a request
// subject agent.svc.<token>.<op>. Only canonical tokens are accepted, so a
// token names exactly one session.
func parseSubject(subject, op string) (token, key string, err error) {
	rest, ok := strings.CutPrefix(subject, Prefix)
	if !ok {
		return "", "", fmt.Errorf("subject %q is not %s<token>.%s", clip(subject), Prefix, op)
	}
	token, ok = strings.CutSuffix(rest, "."+op)
	if !ok || token == "" || strings.Contains(token, ".") {
		return "", "", fmt.Errorf("subject %q is not %s<token>.%s", clip(subject), Prefix, op)
	}
	key, err = events.TokenKey(token)
	if err != nil {
		return "", "", err
	}
	return token, key, nil
}

// DecodeRequest decodes a JSON request body into v: empty means the zero
// value; unknown fields, trailing data and bodies over MaxRequestBytes are
// refused. The admin service reads its requests with it too.
func DecodeRequest(data []byte, v any) error { return DecodeRequestMax(data, v, MaxRequestBytes) }

// DecodeRequestMax is DecodeRequest with another bound: for requests that
// carry a caller's scope (admin's sessions and approvals).
func DecodeRequestMax(data []byte, v any, maxBytes int) error {
	if len(data) > maxBytes {
		return fmt.Errorf("request of %d bytes is larger than %d", len(data), maxBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("malformed JSON request: %w", err)
	}
	if dec.More() {
		return errors.New("malformed JSON request: data after the object")
	}
	return nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// Bounds of a runs request.
const (
	RunsLimitDefault = 20
	RunsLimitMax     = 100
)

// RunsRequest asks for a page of a session's runs, newest first.
type RunsRequest struct {
	// Limit is the page's size: RunsLimitDefault when 0, at most
	// RunsLimitMax.
	Limit int `json:"limit,omitempty"`
	// Before is the previous page's Next: the page starts at the run
	// before it.
	Before string `json:"before,omitempty"`
}

// RunsReply is a page of a session's runs whose events are still stored
// (the event stream keeps them for its max age, 24 hours by default, as
// long as the session is listed), newest first.
type RunsReply struct {
	Runs []RunSummary `json:"runs" msgpack:"r"`
	// Total counts the session's runs with stored events.
	Total int `json:"total" msgpack:"t"`
	// Next continues the listing (RunsRequest.Before); "" on the last
	// page.
	Next string `json:"next,omitempty" msgpack:"n,omitempty"`
}

// Run states of a listing (RunSummary.State).
const (
	RunRunning = "running" // no final event yet
	RunDone    = "done"    // answered
	RunFailed  = "failed"  // ended with an error (RunSummary.Error says which kind)
	RunWaiting = "waiting" // ended with tool calls waiting for a result or an approval
	RunMerged  = "merged"  // answered by another run (RunSummary.MergedInto)
)

// RunSummary is one run of a listing, read from its first and last
// stored events.
type RunSummary struct {
	RunID string `json:"runId" msgpack:"id"`
	State string `json:"state" msgpack:"s"`
	// StartedAt is when its first event was published, EndedAt when its
	// final was (Unix ms; 0 while it runs).
	StartedAt int64 `json:"startedAt" msgpack:"st"`
	EndedAt   int64 `json:"endedAt,omitempty" msgpack:"e,omitempty"`
	// DurationMs is the run's own (the final result's), 0 while it runs.
	DurationMs int64 `json:"durationMs,omitempty" msgpack:"d,omitempty"`
	// Attempt is how many times the fleet started the run (a hand-over
	// after a crash starts it again).
	Attempt int `json:"attempt,omitempty" msgpack:"a,omitempty"`
	// Provider and Model answered it; CostUSD is what its model calls
	// cost (0 when nothing was priced).
	Provider string  `json:"provider,omitempty" msgpack:"p,omitempty"`
	Model    string  `json:"model,omitempty" msgpack:"m,omitempty"`
	CostUSD  float64 `json:"costUsd,omitempty" msgpack:"c,omitempty"`
	// Error is the error kind of a failed run.
	Error      string `json:"error,omitempty" msgpack:"x,omitempty"`
	MergedInto string `json:"mergedInto,omitempty" msgpack:"i,omitempty"`
}
