package runner

import (
	"context"
	"time"

	"github.com/lanefleet/lanefleet/guard"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/sanitize"
	"github.com/lanefleet/lanefleet/sessionfile"
	"github.com/lanefleet/lanefleet/tools"
)

// steerPollTimeout bounds one poll for steering messages.
const steerPollTimeout = 5 * time.Second

// run is one turn in progress: the transcript so far and what every attempt
// shares. Its builder and subscriber are in it, not beside it: a run is
// held for as long as its model answers, and one allocation of those
// holds less heap than three (docs/scaling.md, "What a turn in flight
// holds"); its flags are together for the same reason.
type run struct {
	r      *Runner
	in     Input // in.History is the session before this turn, as stored
	sink   Sink
	b      builder
	tools  tools.Set
	specs  []provider.Tool
	client map[string]bool // client tool names
	policy tools.Policies  // the worker's and the session's tool policies
	// usage sums the usage of every model call of the run, cost
	// included (Output.Usage).
	usage  message.Usage
	window int
	sub    subscriber
	base   []message.Message // the history's context (ru.lease.base)
	// lease is the session's context the run holds from the Runner's
	// cache until it ends.
	lease  *sessionContext
	system string // the run's system prompt
	// repeats stops the turn when its model makes the same failing call
	// again and again.
	repeats *guard.Repeats
	// stateErrs are the auth-profile state writes that failed.
	stateErrs []error
	// journal replays and records the run's steps (nil without a
	// StepStore); steps counts its completed model replies.
	journal *journal
	steps   int
	// fatal ends the run (a step that could not be recorded); cancel
	// cancels the run's context with it.
	fatal  error
	cancel context.CancelCauseFunc
	// model is the model the run's chain is on (the last candidate that
	// resolved).
	model provider.Model
	// alternates are the auth profiles the current attempt's calls may
	// move to (AdmitCall.Alternates).
	alternates []string
	// attempts counts the run's model attempts (the attempt events).
	attempts int
	// immutable is how many of the messages the last prepare returned
	// are never written again (provider.Request.Immutable).
	immutable int
	// branched is set once overflow truncation re-appended part of the
	// history on a new branch (the context is then built from the branch).
	branched bool
	// admitted is set once the run asked its Admission about a call.
	admitted bool
	// flushed is set once the run flushed memory before a compaction:
	// one flush per run, whatever the attempts (and one per compaction
	// cycle of the session, flush.go).
	flushed bool
}

// entries returns the session as it stands: the history and this turn.
func (ru *run) entries() []message.Entry {
	all := make([]message.Entry, 0, len(ru.in.History)+len(ru.b.entries))
	return append(append(all, ru.in.History...), ru.b.entries...)
}

// contextMessages is what the model sees: the branch's messages (after the
// latest compaction) converted for the LLM. The history's messages come
// from the Runner's context cache (a session's history is converted once,
// then only what each run finds added); this turn's entries are appended
// to them as long as they only add messages on the same branch.
func (ru *run) contextMessages() []message.Message {
	if ru.branched {
		// The turn re-appended part of the history on a new branch.
		return contextOf(ru.entries())
	}
	if ru.base == nil {
		if ru.lease == nil {
			ru.lease = ru.r.contexts.acquire(ru.contextKey(), ru.in.History, ru.in.HistoryAppendOnly)
		}
		ru.base = ru.lease.base
	}
	// This turn's messages go after the history's in the spare capacity
	// of the run's leased context (each call overwrites the last call's:
	// that request is done), or in a new array once it is full.
	out := ru.base
	for _, e := range ru.b.entries {
		if e.Type != message.EntryMessage || e.Message == nil {
			// A compaction (or anything else) re-shapes the branch.
			return contextOf(ru.entries())
		}
		switch e.Message.Role {
		case message.RoleUser, message.RoleAssistant, message.RoleToolResult:
			out = append(out, *e.Message)
		}
	}
	return out
}

// contextKey names the run's session in the Runner's context cache, ""
// when the run has none.
func (ru *run) contextKey() string {
	if ru.in.SessionKey == "" && ru.in.SessionID == "" {
		return ""
	}
	return ru.in.SessionKey + "\x00" + ru.in.SessionID
}

// toolLoopLimit is the run's tool-loop limit: its setting, within the
// worker's.
func (ru *run) toolLoopLimit() int {
	limit := ru.r.cfg.MaxToolIterations
	if n := ru.in.Settings.MaxToolIterations; n > 0 && n < limit {
		return n
	}
	return limit
}

// toolRepeats is the run's loop-detector limit: its setting, within the
// worker's.
func (ru *run) toolRepeats() int {
	limit := ru.r.cfg.MaxToolRepeats
	if n := ru.in.Settings.MaxToolRepeats; n > 0 && n < limit {
		return n
	}
	return limit
}

// historyLimit is the run's history limit: its setting, else the worker's.
func (ru *run) historyLimit() int {
	if n := ru.in.Settings.HistoryLimit; n > 0 {
		return n
	}
	return ru.r.cfg.HistoryLimit
}

// prepare builds the messages of one model call from its context: sanitised for
// the model (runtime spec §4 step 7), then bounded by the per-request
// tool-result guard (§11.2).
//
// Unlike the reference, which drops the calls of tools the run does not
// offer with their results (its allowlist), the fleet keeps every call a
// provider accepts: a model that no longer sees its call of a tool that
// is not offered, and the "not found" it got, makes the call again, every
// request, until the tool-loop limit. A call a provider would refuse (no
// arguments, no id, a name that is no tool name) becomes a note saying
// what was called and what came of it (sanitize.NoteRejectedCalls). The
// user messages of a request to Anthropic lose its refusal test string
// (sanitize.ScrubRefusalTrigger, §3.1 step 6).
//
// A context that is the history's (the run's leased base) followed by
// this turn's messages is prepared from the session's kept preparation of
// the history (sanitize.Appender): only the messages added since are
// prepared, where that gives the same messages; anything else is
// prepared whole.
func (ru *run) prepare(m *provider.Model, msgs []message.Message) []message.Message {
	req := sanitize.Request{Provider: m.Provider, API: m.API, ModelID: m.ID, Messages: msgs, HistoryLimit: ru.historyLimit()}
	if ru.lease == nil {
		return sanitize.PrepareFinal(req)
	}
	sc := ru.lease
	out, ok := ru.prepareAppended(req)
	known := 0
	switch {
	case !ok:
		out = sanitize.PrepareFinal(req)
		sc.guarded = nil
	case len(out) == 0:
		sc.guarded = nil
	default:
		// The messages the session's last request had from the same
		// preparation are the very same: the guard takes them as known.
		if &out[0] == sc.guarded {
			known = min(sc.guardedKept, sc.prepared.Kept())
		}
		sc.guarded, sc.guardedKept = &out[0], sc.prepared.Kept()
	}
	// The estimates of the messages the session's last request had are
	// reused (the lease is the run's alone; contextMessages took it).
	guarded := sc.sizes.GuardKnown(out, ru.window, known)
	ru.immutable = 0
	if sc.guarded != nil && len(guarded) > 0 && &guarded[0] == sc.guarded {
		// The preparation's kept messages are never written again: the
		// provider's wire cache need not compare them either.
		ru.immutable = min(sc.guardedKept, len(guarded))
	}
	return guarded
}

// prepareAppended prepares req's messages from the lease's kept
// preparation when they are its base followed by this turn's messages:
// the base's messages are never changed while the lease keeps them (see
// contextCache.acquire), so those the preparation was made of are still
// the same.
func (ru *run) prepareAppended(req sanitize.Request) ([]message.Message, bool) {
	base, p := ru.base, &ru.lease.prepared
	msgs := req.Messages
	if len(base) == 0 || len(msgs) < len(base) || &msgs[0] != &base[0] {
		return nil, false
	}
	if p.Len() > len(base) {
		p.Reset()
	}
	if p.Len() < len(base) || p.Len() == 0 {
		hist := req
		hist.Messages = base
		if !p.Extend(hist) {
			return nil, false
		}
	}
	return p.With(req)
}

func (ru *run) addAssistant(am *message.Message) {
	am.Timestamp = max(am.Timestamp, 1)
	ru.b.add(*am)
}

func (ru *run) lastAssistant() *message.Message {
	for i := len(ru.b.entries) - 1; i >= 0; i-- {
		if m := ru.b.entries[i].Message; m != nil && m.Role == message.RoleAssistant {
			return m
		}
	}
	return nil
}

// steer appends the steer-mode messages that arrived since the last poll;
// the model answers them in this turn.
func (ru *run) steer(ctx context.Context) int {
	if ru.in.Steer == nil {
		return 0
	}
	// The poll reads the lane's stream: bound it, so a store in failover
	// delays the turn instead of hanging it.
	sctx, cancel := context.WithTimeout(ctx, steerPollTimeout)
	defer cancel()
	n := 0
	for _, s := range ru.in.Steer(sctx) {
		ru.b.add(userMessage(s, ru.r.cfg.Now()))
		n++
	}
	return n
}

func lastID(entries []message.Entry) string {
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].ID != "" && !entries[i].IsHeader() {
			return entries[i].ID
		}
	}
	return ""
}

// builder makes pi session entries chained by parentId.
type builder struct {
	now     func() time.Time
	parent  string
	entries []message.Entry
}

// addEntry appends a non-message entry (a compaction), chaining it.
func (b *builder) addEntry(e message.Entry) {
	if e.ID == "" {
		e.ID = sessionfile.NewEntryID()
	}
	if b.parent != "" {
		p := b.parent
		e.ParentID = &p
	}
	b.parent = e.ID
	b.entries = append(b.entries, e)
}

func (b *builder) add(m message.Message) {
	id := sessionfile.NewEntryID()
	e := message.Entry{Type: message.EntryMessage, ID: id, Timestamp: b.now().UTC().Format("2006-01-02T15:04:05.000Z"), Message: &m}
	if b.parent != "" {
		p := b.parent
		e.ParentID = &p
	}
	b.parent = id
	b.entries = append(b.entries, e)
}
