package events

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Event streams, as in the reference runtime's agent events.
const (
	StreamLifecycle  = "lifecycle"  // Data.Phase: start, end, error, restart, aborted, merged, steered, retrying, retry, resumed
	StreamAssistant  = "assistant"  // Data.Delta, Data.Text
	StreamThinking   = "thinking"   // Data.Delta, Data.Text
	StreamTool       = "tool"       // Data.Phase: start, update, result
	StreamCompaction = "compaction" // Data.Phase: start, end (WillRetry after an overflow compaction); memory_flush before a start (runner.PhaseMemoryFlush)
	StreamBlock      = "block"      // Data.Text: one finished block of the reply (block streaming)
	// StreamAttempt: one model attempt of the run starts (see
	// EventData.Provider). Data.Attempt numbers the attempts of this run
	// from 1 (a restarted run counts again: Event.Attempt says which
	// try of the run it is), Data.Provider, Data.Model and
	// Data.AuthProfile say what it calls with, Data.Hop its place in the
	// model chain and Data.Reason why the attempt before it failed over.
	// Informational: a viewer that shows only the reply ignores it.
	StreamAttempt = "attempt"
	StreamFinal   = "final" // Data.Result; always the last event of a run
)

// Lifecycle phases. A run is tried in attempts; every event carries its
// attempt number, and Seq keeps counting across attempts, so a viewer sees
// each event once, in order, whatever happened to the workers:
//
//	start … end … final                       the usual run
//	start … error … final                     a run that failed (final carries the error)
//	start … aborted, restart … end … final    the first attempt's worker died (or the
//	                                          attempt failed) mid-run; the next attempt
//	                                          ran it again from the start
//	start, error, final                       refused before running (invalid, rejected, poison)
//	merged, final                             collect/steer: another run answered it
//	                                          (final Meta.MergedInto names that run)
//	error, final                              dropped at the queue cap or by an interrupt
//	steered, start … end … final              steer-backlog: seen by the running turn,
//	                                          then run as its own turn
//
// Text a viewer printed during an aborted attempt is superseded by the next
// attempt's (see the assistant events' Text).
//
// The lane that runs the message publishes these phases and nothing else
// does: a turn's handler (the runner) streams its content (deltas, tool
// and compaction events, retrying, retry, resumed, budget_warning,
// waiting) and reports how the turn ended; the lane turns that into the
// end or error event (Result.ErrorText).
const (
	PhaseStart   = "start"
	PhaseEnd     = "end"
	PhaseError   = "error"
	PhaseRestart = "restart" // the run's previous attempt was aborted; it starts again
	// PhaseAborted ends an attempt that will not finish: its worker died or
	// lost the lane (published by the lane's next owner), or the attempt
	// failed and is retried. Data.Attempt is the aborted attempt and
	// Data.Error says why. It is not terminal: a restart follows, or an
	// error and the final event when the message is given up. An attempt
	// that ended on a transient store error says so ("attempt N ended on
	// a store error (it does not count toward the attempt limit): …"): it
	// does not count toward the attempts after which a message is
	// dead-lettered as poison.
	PhaseAborted = "aborted"
	PhaseMerged  = "merged" // collect or steer mode: the message was answered by another run (Data.Text)
	// PhaseSteered: steer-backlog mode showed the message to another
	// running turn (Data.Text is its run id); the message still runs as
	// its own turn.
	PhaseSteered = "steered"
	// PhaseRetrying: the run waits before calling the provider again
	// (it stays in the same attempt and is not terminal). Data.DelayMs is
	// the wait and Data.Error the failure that caused it, its kind first
	// ("server error (HTTP 503): Service Unavailable"). Data.Attempt is
	// the same-key retry it precedes (1, 2, 3 after a transient failure)
	// of at most Data.MaxAttempts, or 0 when the run waits for a cooling
	// auth profile's Retry-After before its first call.
	PhaseRetrying = "retrying"
	// PhaseRetry: the wait a retrying event announced is over and the
	// run calls the provider again now (Data.Attempt and
	// Data.MaxAttempts as that event's). A wait cut short (the run was
	// cancelled, the attempt timed out) has none.
	PhaseRetry = "retry"
	// PhaseResumed: this attempt of the run replays the steps an earlier
	// attempt completed (Data.Steps model replies and tool results, from
	// the run's step journal) instead of repeating them, then goes on
	// live. Replayed replies are streamed again; replayed tool calls show
	// their recorded results.
	PhaseResumed = "resumed"
	// PhaseBudgetWarning: a model call of the run brought a budget to
	// its soft limit (Data.Text says which, and how much is used); the
	// run goes on. Not terminal.
	PhaseBudgetWarning = "budget_warning"
	// PhasePaused: the message waits in its session's queue because the
	// session is paused (a budget reached); Data.Text says why and what
	// resumes it. Published on the run of each waiting message, before
	// it starts; not terminal: the run starts once the pause ends.
	PhasePaused = "paused"
	// PhaseWaiting: the run's next model call waits for room in a
	// provider rate limit the fleet shares (Data.Text says which and why,
	// Data.DelayMs how long if nothing else is admitted meanwhile; 0 when
	// it waits for calls in flight), instead of being sent to collect a
	// 429. Not terminal: the call is made when it fits.
	PhaseWaiting = "waiting"
)

// Phases of the tool and compaction streams. A tool call is start (Name,
// ToolCallID, Args), update… (partial output), result (Payload, IsError);
// a compaction is start, then end (PhaseStart and PhaseEnd).
const (
	PhaseUpdate = "update"
	PhaseResult = "result"
)

// Event is one event of a run, published on agent.ev.<lane>.<run>. Seq counts
// from 1 within a run and never repeats, across worker restarts too.
type Event struct {
	V          int       `json:"v" msgpack:"v"`
	RunID      string    `json:"runId" msgpack:"runId"`
	SessionKey string    `json:"sessionKey" msgpack:"sessionKey"`
	Seq        uint64    `json:"seq" msgpack:"seq"`
	Attempt    int       `json:"attempt,omitempty" msgpack:"attempt,omitempty"` // 1 + earlier tries of this run
	Stream     string    `json:"stream" msgpack:"stream"`
	TS         int64     `json:"ts" msgpack:"ts"` // Unix ms
	Data       EventData `json:"data" msgpack:"data"`
}

// Terminal reports whether e ends its run's event stream.
func (e *Event) Terminal() bool { return e.Stream == StreamFinal }

// EventData is the payload of an event; which fields are set depends on the stream.
type EventData struct {
	Phase     string `json:"phase,omitempty" msgpack:"phase,omitempty"`
	Text      string `json:"text,omitempty" msgpack:"text,omitempty"`
	Delta     string `json:"delta,omitempty" msgpack:"delta,omitempty"`
	StartedAt int64  `json:"startedAt,omitempty" msgpack:"startedAt,omitempty"`
	EndedAt   int64  `json:"endedAt,omitempty" msgpack:"endedAt,omitempty"`
	Error     string `json:"error,omitempty" msgpack:"error,omitempty"`
	Worker    string `json:"worker,omitempty" msgpack:"worker,omitempty"`
	// Tenant is the session's tenant (lifecycle start), "" when it has
	// none.
	Tenant string `json:"tenant,omitempty" msgpack:"tenant,omitempty"`
	// ParentSession and ParentRun name, on a sub-agent session's start
	// events, the session and run that spawned it.
	ParentSession string  `json:"parentSession,omitempty" msgpack:"parentSession,omitempty"`
	ParentRun     string  `json:"parentRun,omitempty" msgpack:"parentRun,omitempty"`
	Attempt       int     `json:"attempt,omitempty" msgpack:"attempt,omitempty"`
	Steps         int     `json:"steps,omitempty" msgpack:"steps,omitempty"` // resumed: recorded steps replayed
	InboundSeq    uint64  `json:"inboundSeq,omitempty" msgpack:"inboundSeq,omitempty"`
	Name          string  `json:"name,omitempty" msgpack:"name,omitempty"`             // tool name
	ToolCallID    string  `json:"toolCallId,omitempty" msgpack:"toolCallId,omitempty"` // tool events
	Args          any     `json:"args,omitempty" msgpack:"args,omitempty"`
	Result        *Result `json:"result,omitempty" msgpack:"result,omitempty"` // final
	WillRetry     bool    `json:"willRetry,omitempty" msgpack:"willRetry,omitempty"`
	IsError       bool    `json:"isError,omitempty" msgpack:"isError,omitempty"`
	Payload       any     `json:"payload,omitempty" msgpack:"payload,omitempty"` // tool result/partial result
	DelayMs       int64   `json:"delayMs,omitempty" msgpack:"delayMs,omitempty"` // lifecycle retrying: the wait
	// MaxAttempts is, on lifecycle retrying and retry, the most same-key
	// retries a call gets (pi's auto_retry_start maxAttempts).
	MaxAttempts int `json:"maxAttempts,omitempty" msgpack:"maxAttempts,omitempty"`
	// Provider and Model are, on an attempt event, the model the attempt
	// calls; AuthProfile the id of the auth profile whose credential it
	// uses ("" = the provider's own key), never the credential.
	Provider    string `json:"provider,omitempty" msgpack:"provider,omitempty"`
	Model       string `json:"model,omitempty" msgpack:"model,omitempty"`
	AuthProfile string `json:"authProfile,omitempty" msgpack:"authProfile,omitempty"`
	// Hop is, on an attempt event, the model's place in the run's model
	// chain: 0 the requested model, 1 its first fallback, and so on (a
	// fallback skipped because its provider was cooling is not tried,
	// so hops can jump).
	Hop int `json:"hop,omitempty" msgpack:"hop,omitempty"`
	// Reason is, on an attempt event, why the attempt before it ended
	// and this one was made: a failover reason class (rate_limit,
	// overloaded, auth, auth_permanent, billing, timeout, format,
	// model_not_found, context_overflow, unknown), never the provider's
	// text; "" on the run's first attempt.
	Reason string `json:"reason,omitempty" msgpack:"reason,omitempty"`
}

// Result is the outcome of a run, shaped like the reference runtime's result.
type Result struct {
	Payloads []Payload `json:"payloads,omitempty" msgpack:"payloads,omitempty"`
	Meta     Meta      `json:"meta" msgpack:"meta"`
}

// ErrorText is what the error event ending r's run says: the text of r's
// first error reply, else its error's message ("" when r carries no
// error).
func (r *Result) ErrorText() string {
	if r.Meta.Error == nil {
		return ""
	}
	for _, p := range r.Payloads {
		if p.IsError {
			return p.Text
		}
	}
	return r.Meta.Error.Message
}

// Payload is one reply item.
type Payload struct {
	Text    string `json:"text,omitempty" msgpack:"text,omitempty"`
	IsError bool   `json:"isError,omitempty" msgpack:"isError,omitempty"`
}

// Meta is the run's metadata.
type Meta struct {
	DurationMs       int64         `json:"durationMs" msgpack:"durationMs"`
	Aborted          bool          `json:"aborted,omitempty" msgpack:"aborted,omitempty"`
	AgentMeta        *AgentMeta    `json:"agentMeta,omitempty" msgpack:"agentMeta,omitempty"`
	Error            *RunError     `json:"error,omitempty" msgpack:"error,omitempty"`
	StopReason       string        `json:"stopReason,omitempty" msgpack:"stopReason,omitempty"`
	PendingToolCalls []PendingCall `json:"pendingToolCalls,omitempty" msgpack:"pendingToolCalls,omitempty"`
	// MergedInto is set on the final event of a message that a collect turn
	// merged into another run: that run carries its reply.
	MergedInto string `json:"mergedInto,omitempty" msgpack:"mergedInto,omitempty"`
	// Consumed lists the other messages this run's turn took off the lane
	// without running them as turns of their own: merged into it by
	// collect mode, steered into it, dropped at the queue cap, or dropped
	// by an interrupt. Each of their runs ends with its own final event.
	Consumed []ConsumedRun `json:"consumed,omitempty" msgpack:"consumed,omitempty"`
	// HeartbeatOK is set on the final event of a heartbeat turn whose
	// model answered only the "nothing to report" token (HEARTBEAT_OK):
	// the reply is suppressed (no payloads) and the exchange is not kept
	// in the transcript. Clients show no message for it.
	HeartbeatOK bool `json:"heartbeatOk,omitempty" msgpack:"heartbeatOk,omitempty"`
	// Session is the session's state once this turn committed: the
	// running total of its usage (this turn's included) and the auth
	// profile its next turn starts on.
	Session *SessionState `json:"session,omitempty" msgpack:"session,omitempty"`
	// Waiting is, on the final event of a turn that yielded (StopReason
	// StopYielded), how many sub-agents the session waits for once the
	// turn committed; each one's result arrives as a message of its own,
	// answered in a turn of its own.
	Waiting int `json:"waiting,omitempty" msgpack:"waiting,omitempty"`
}

// StopYielded is the stop reason of a turn that ended at a sessions_yield
// call (its model asked to wait for its sub-agents): the run made no
// model call after the call's result.
const StopYielded = "yielded"

// ConsumedRun is a message a turn took off the lane without running it.
type ConsumedRun struct {
	RunID string `json:"runId" msgpack:"runId"`
	// Kind is empty when this run answered the message (merged or
	// steered), "settings" for a settings message applied on the way, else
	// the error kind of the message's own final event (dropped,
	// interrupted).
	Kind   string `json:"kind,omitempty" msgpack:"kind,omitempty"`
	Reason string `json:"reason,omitempty" msgpack:"reason,omitempty"`
}

// AgentMeta describes the model side of a run.
type AgentMeta struct {
	SessionID       string     `json:"sessionId" msgpack:"sessionId"`
	Provider        string     `json:"provider" msgpack:"provider"`
	Model           string     `json:"model" msgpack:"model"`
	CompactionCount int        `json:"compactionCount,omitempty" msgpack:"compactionCount,omitempty"`
	PromptTokens    int64      `json:"promptTokens,omitempty" msgpack:"promptTokens,omitempty"`
	Usage           *UsageMeta `json:"usage,omitempty" msgpack:"usage,omitempty"`
	LastCallUsage   *UsageMeta `json:"lastCallUsage,omitempty" msgpack:"lastCallUsage,omitempty"`
}

// UsageMeta is usage as the reference result reports it: zero fields omitted.
type UsageMeta struct {
	Input      int64 `json:"input,omitempty" msgpack:"input,omitempty"`
	Output     int64 `json:"output,omitempty" msgpack:"output,omitempty"`
	CacheRead  int64 `json:"cacheRead,omitempty" msgpack:"cacheRead,omitempty"`
	CacheWrite int64 `json:"cacheWrite,omitempty" msgpack:"cacheWrite,omitempty"`
	Total      int64 `json:"total,omitempty" msgpack:"total,omitempty"`
	// Cost is in USD (pi's usage.cost, priced from the model catalog).
	// In AgentMeta.Usage it is the sum over every model call of the run
	// (failed calls and same-key retries included), in
	// LastCallUsage the last call's; nil when nothing was priced.
	Cost *CostMeta `json:"cost,omitempty" msgpack:"cost,omitempty"`
}

// CostMeta is a cost in USD split like pi's usage.cost.
type CostMeta struct {
	Input      float64 `json:"input,omitempty" msgpack:"input,omitempty"`
	Output     float64 `json:"output,omitempty" msgpack:"output,omitempty"`
	CacheRead  float64 `json:"cacheRead,omitempty" msgpack:"cacheRead,omitempty"`
	CacheWrite float64 `json:"cacheWrite,omitempty" msgpack:"cacheWrite,omitempty"`
	Total      float64 `json:"total,omitempty" msgpack:"total,omitempty"`
}

// RunError says why a run failed. Kind is one of the reference's kinds
// (context_overflow, compaction_failure, role_ordering, image_size,
// retry_limit) or one of Lanefleet's: tool_loop_limit, invalid_input,
// provider_error, poison_message, internal, and the queue's: rejected (mode
// reject while busy), interrupted (dropped or cut short by an interrupt), dropped (over
// the session's queue cap; Message says which drop policy).
type RunError struct {
	Kind    string `json:"kind" msgpack:"kind"`
	Message string `json:"message" msgpack:"message"`
}

// Error kinds of messages the lane answered without running them.
const (
	KindRejected    = "rejected"    // mode reject: the session was busy
	KindInterrupted = "interrupted" // cut short or dropped by an interrupt
	KindDropped     = "dropped"     // over the session's queue cap (drop policy old, new or summarize), or a heartbeat that found the session busy
	// KindInvalidInput is a message the fleet refused as it was sent (a
	// model or auth profile it does not allow, a tool result for a call
	// that waits for none, a payload that does not decode).
	KindInvalidInput = "invalid_input"
	// KindBudgetReached ends a turn whose next model call a budget had
	// no room for (its message names the budget); the session is paused
	// until the budget is raised or reset, its later messages wait.
	KindBudgetReached = "budget_reached"
)

// PendingCall is a client tool call the run stopped for.
type PendingCall struct {
	ID        string `json:"id" msgpack:"id"`
	Name      string `json:"name" msgpack:"name"`
	Arguments string `json:"arguments" msgpack:"arguments"` // JSON text
	// Approval marks a call of a worker tool that waits for the user's
	// approval (the worker's or the session's tool policy asks for it):
	// answer it with a tool result "approve" to run it, anything else to
	// refuse it.
	Approval bool `json:"approval,omitempty" msgpack:"approval,omitempty"`
}

// EncodeEvent encodes e as msgpack, or as JSON when asJSON is set, and
// returns the content type.
func EncodeEvent(e *Event, asJSON bool) ([]byte, string, error) {
	if e.V == 0 {
		e.V = Version
	}
	if asJSON {
		b, err := json.Marshal(e)
		return b, ContentJSON, err
	}
	if b, ok := appendEvent(make([]byte, 0, eventSize(e)), e); ok {
		return b, ContentMsgpack, nil
	}
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(e); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), ContentMsgpack, nil
}

// eventSize guesses e's msgpack size: its fixed part and its longest
// strings, so that most events are encoded with one allocation.
func eventSize(e *Event) int {
	n := 160 + len(e.RunID) + len(e.SessionKey) + len(e.Data.Text) + len(e.Data.Delta) + len(e.Data.Error)
	if r := e.Data.Result; r != nil {
		n += 448 // meta with usage of the run, the last call and the session
		for _, p := range r.Payloads {
			n += 16 + len(p.Text)
		}
	}
	return n
}

// decodeEventMsgpack is UnmarshalMsgpack for an event: after the walk,
// readEvent reads the events workers write; what it leaves (args, a
// payload, fields it does not know) the library decodes.
func decodeEventMsgpack(data []byte, e *Event) error {
	if err := checkMsgpack(data, 0); err != nil {
		return err
	}
	if readEvent(data, e) {
		return nil
	}
	*e = Event{}
	return decodeChecked(data, e, false)
}

// DecodeEvent decodes an event. Unknown fields are ignored, so old clients
// read events of newer workers.
func DecodeEvent(contentType string, data []byte) (*Event, error) {
	var e Event
	if IsJSON(contentType, data) {
		if err := json.Unmarshal(data, &e); err != nil {
			return nil, &DecodeError{Reason: "malformed JSON event: " + jsonReason(err), Err: err}
		}
	} else if err := decodeEventMsgpack(data, &e); err != nil {
		return nil, &DecodeError{Reason: "malformed msgpack event: " + err.Error(), Err: err}
	}
	if e.Stream == "" {
		return nil, &DecodeError{Field: "stream", Reason: "missing"}
	}
	if e.V > Version {
		return nil, &DecodeError{Field: "v", Reason: fmt.Sprintf("event schema version %d is newer than this client (%d)", e.V, Version)}
	}
	return &e, nil
}
