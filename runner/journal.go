package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"strconv"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/sanitize"
	"github.com/lanefleet/lanefleet/tools"
)

// StepStore keeps the completed steps of one run, so that a re-run of its
// turn (after its worker died, or after a commit that failed) replays them
// instead of calling the model or the tools again. The lanes keep them in
// a journal stream of their own, fenced so that an older owner cannot add
// to a journal a re-run has read, and drop them once the turn commits.
type StepStore interface {
	// Steps returns the run's recorded steps 1, 2, … in order (none on a
	// first attempt).
	Steps(ctx context.Context) ([][]byte, error)
	// Put records step n (from 1), replacing any step n recorded before.
	// It returns only once the step is stored; an error ends the attempt
	// (the turn is retried, or the lane was lost).
	Put(ctx context.Context, n int, step []byte) error
}

// MaxSteps bounds the steps a run's journal may hold: a model reply and a
// result per tool call, for the tool-loop limit's model calls.
const MaxSteps = 16384

// journalStep is one recorded step: a model reply (an assistant message)
// or a tool result. Input fingerprints the turn it belongs to: a step
// recorded for other input (a collect-mode turn that merged other
// messages on its re-run) is not replayed.
type journalStep struct {
	Input string `msgpack:"input"`
	// Step is the model step the message belongs to: the reply's own
	// number, or the number of the reply whose call it answers.
	Step    int             `msgpack:"step"`
	Message message.Message `msgpack:"message"`
	// Flush marks a step of the memory flush (flush.go), numbered apart
	// from the turn's own: a re-run that does not flush skips them.
	Flush bool `msgpack:"flush,omitempty"`
}

// journal is a run's step journal: what the re-run replays, then the
// recorder of the steps it makes live.
type journal struct {
	store StepStore
	input string
	// turn are the turn's own steps, flush the memory flush's.
	turn, flush journalSteps
	// resumed is how many steps the re-run found recorded.
	resumed int
	// n is the steps recorded for this input: the next one is step n+1
	// (over any step of other input a previous attempt left there).
	n int
}

// journalSteps are the recorded steps of one sequence of model calls
// (the turn's or the memory flush's). Its maps are made on their first
// write: most runs replay nothing and write none.
type journalSteps struct {
	// replies are the recorded model replies by step number.
	replies map[int]message.Message
	// live is set once a model step was not replayed: the steps after it
	// are made live too, even where a reply is recorded (a reply is only
	// replayed after the very steps it followed).
	live bool
	// results are the recorded tool results by step-qualified call key.
	results map[string]message.Message
	// replayed are the keys of calls whose model reply came from the
	// journal: they may have started before the worker died.
	replayed map[string]bool
}

// errJournal wraps a failed step write: the attempt cannot go on, since a
// step that is not recorded would be repeated by a re-run.
type errJournal struct{ err error }

func (e *errJournal) Error() string { return "runner: record step: " + e.err.Error() }
func (e *errJournal) Unwrap() error { return e.err }

// openJournal loads the run's recorded steps. A nil store is no journal.
func openJournal(ctx context.Context, store StepStore, in Input) (*journal, error) {
	if store == nil {
		return nil, nil
	}
	j := &journal{store: store, input: inputFingerprint(in)}
	raw, err := store.Steps(ctx)
	if err != nil {
		return nil, fmt.Errorf("runner: read steps: %w", err)
	}
	if len(raw) > MaxSteps {
		raw = raw[:MaxSteps]
	}
	for _, b := range raw {
		var s journalStep
		if err := events.UnmarshalMsgpack(b, &s); err != nil || s.Input != j.input || s.Step < 1 {
			// A step of other input or one that does not decode: the
			// journal's tail from here is not this turn's.
			break
		}
		j.n++
		seq := j.steps(s.Flush)
		switch s.Message.Role {
		case message.RoleAssistant:
			if seq.replies == nil {
				seq.replies = map[int]message.Message{}
			}
			seq.replies[s.Step] = s.Message
		case message.RoleToolResult:
			if seq.results == nil {
				seq.results = map[string]message.Message{}
			}
			seq.results[callKey(s.Step, s.Message.ToolCallID)] = s.Message
		}
	}
	j.resumed = j.n
	return j, nil
}

// inputFingerprint names the turn's input: the message (with any merged
// ones folded in) and the history it continues. The hash is over the message's msgpack bytes, its run id, a zero byte
// and the id of the history's last entry: a journal an older worker wrote
// must still match (TestInputFingerprintStable).
//
// A message of a few kilobytes of text is encoded in memory (one
// allocation of its size, events.AppendInbound) and hashed; a larger one,
// or one with images, tools or tool results, is encoded straight into
// the hash by the msgpack library (the same bytes), so an image turn
// allocates nothing of its payload's size.
func inputFingerprint(in Input) string {
	last := lastID(in.History)
	m := in.Inbound
	if m == nil || len(m.Images) == 0 && len(m.Tools) == 0 && len(m.ToolResults) == 0 && len(m.Text) <= fingerprintInline {
		b := make([]byte, 0, inboundFraming+len(in.RunID)+len(last)+inlineSize(m))
		if m != nil {
			b, _ = events.AppendInbound(b, m)
		}
		b = append(b, in.RunID...)
		b = append(b, 0)
		b = append(b, last...)
		sum := sha256.Sum256(b)
		return hex.EncodeToString(sum[:12])
	}
	w := &hashWriter{Hash: sha256.New()}
	enc := msgpack.GetEncoder()
	enc.Reset(w)
	_ = enc.Encode(m) // a hash's writes do not fail
	msgpack.PutEncoder(enc)
	_, _ = io.WriteString(w, in.RunID)
	_ = w.WriteByte(0)
	_, _ = io.WriteString(w, last)
	return hex.EncodeToString(w.Sum(nil)[:12])
}

// fingerprintInline is the longest text of a message inputFingerprint
// encodes in memory.
const fingerprintInline = 4 << 10

// inboundFraming bounds what a message's encoding adds to its strings:
// its keys, and each value's header.
const inboundFraming = 128

// inlineSize is the length of the strings of m's encoding, nil's 0.
func inlineSize(m *events.Inbound) int {
	if m == nil {
		return 0
	}
	return len(m.ID) + len(m.Session) + len(m.Text) + len(m.Mode) + len(m.Model) + len(m.Thinking) + len(m.AuthProfile)
}

// hashWriter is a hash the msgpack library writes to byte by byte too
// (without a WriteByte it allocates a byte slice for each).
type hashWriter struct {
	hash.Hash
	one [1]byte
}

// WriteByte writes c.
func (w *hashWriter) WriteByte(c byte) error {
	w.one[0] = c
	_, err := w.Write(w.one[:])
	return err
}

// callKey names the call id of the n-th model reply: models reuse call
// ids across replies ("call_0"), so the id alone does not name a call.
func callKey(n int, id string) string { return strconv.Itoa(n) + "/" + id }

// steps returns the flush's steps or the turn's.
func (j *journal) steps(flush bool) *journalSteps {
	if flush {
		return &j.flush
	}
	return &j.turn
}

// record appends one step: m, of model step n (of the memory flush's
// steps with flush).
func (j *journal) record(ctx context.Context, flush bool, n int, m message.Message) error {
	if j.n >= MaxSteps {
		return &errJournal{fmt.Errorf("the run has %d steps, the most a journal keeps", MaxSteps)}
	}
	data, err := msgpack.Marshal(&journalStep{Input: j.input, Step: n, Message: m, Flush: flush})
	if err != nil {
		return &errJournal{err}
	}
	if err := j.store.Put(ctx, j.n+1, data); err != nil {
		return &errJournal{err}
	}
	j.n++
	return nil
}

// nextReply returns the recorded reply of model step n, unless a step
// before it was made live.
func (s *journalSteps) nextReply(n int) (message.Message, bool) {
	m, ok := s.replies[n]
	if !ok || s.live {
		s.live = true
		return message.Message{}, false
	}
	for _, c := range m.ToolCalls() {
		if s.replayed == nil {
			s.replayed = map[string]bool{}
		}
		s.replayed[callKey(n, c.ID)] = true
	}
	return m, true
}

// result returns the recorded result of call id of model step n.
func (s *journalSteps) result(n int, id string) (message.Message, bool) {
	if len(s.results) == 0 {
		return message.Message{}, false
	}
	m, ok := s.results[callKey(n, id)]
	return m, ok
}

// mayHaveRun reports whether call id of model step n belongs to a replayed
// reply: it may have run before the worker died.
func (s *journalSteps) mayHaveRun(n int, id string) bool {
	return len(s.replayed) > 0 && s.replayed[callKey(n, id)]
}

// stream is one model call through the journal: a recorded reply is
// replayed (its text streamed to the run's events again, as one delta),
// otherwise the provider is called and a completed reply is recorded
// before the run goes on.
func (ru *run) stream(ctx context.Context, prov provider.Provider, profile string, req *provider.Request) (message.Message, error) {
	j := ru.journal
	if j != nil {
		if m, ok := j.turn.nextReply(ru.steps + 1); ok {
			ru.steps++
			replay(m, ru.sub.event)
			return m, nil
		}
	}
	adm, err := ru.admit(ctx, profile, req)
	if err != nil {
		if refusal(err) == nil && moved(err) == nil && ctx.Err() == nil {
			// The budgets could not be asked: the turn is not run
			// without them; the lane tries it again.
			ru.halt(fmt.Errorf("runner: admission: %w", err))
		}
		return message.Message{Role: message.RoleAssistant, StopReason: message.StopError, ErrorMessage: err.Error()}, err
	}
	am, err := ru.callAdmitted(ctx, prov, req, adm)
	// Calls dispatch by exact name: " read" is read.
	sanitize.TrimCallNames(&am)
	if err != nil || am.StopReason == message.StopError || am.StopReason == message.StopAborted || ctx.Err() != nil {
		return am, err
	}
	// Only completed replies count as steps: a failed call is not
	// recorded, so a re-run numbers its steps the same way.
	ru.steps++
	if j == nil {
		return am, nil
	}
	if am.StopReason != message.StopToolUse || len(am.ToolCalls()) == 0 {
		// A reply that calls no tool is not recorded: the turn's record
		// follows it at once, and a re-run that lost it only asks again.
		return am, nil
	}
	stamped := am
	stamped.Timestamp = max(stamped.Timestamp, 1) // as addAssistant stores it
	if rerr := j.record(ctx, false, ru.steps, stamped); rerr != nil {
		ru.halt(rerr)
	}
	return am, nil
}

// replay emits a recorded reply as a provider stream would: its thinking,
// its text, its end.
func replay(m message.Message, emit func(provider.Event)) {
	emit(provider.Event{Type: provider.EventStart})
	for i, b := range m.Content.Blocks {
		switch b.Type {
		case message.BlockThinking:
			emit(provider.Event{Type: provider.EventThinkingDelta, ContentIndex: i, Delta: b.Thinking})
		case message.BlockText:
			emit(provider.Event{Type: provider.EventTextStart, ContentIndex: i})
			emit(provider.Event{Type: provider.EventTextDelta, ContentIndex: i, Delta: b.Text})
			emit(provider.Event{Type: provider.EventTextEnd, ContentIndex: i, Content: b.Text})
		}
	}
	emit(provider.Event{Type: provider.EventDone, Reason: m.StopReason, Message: &m})
}

// journaledCall runs one tool call through the journal: a recorded result
// is returned as it was; a call of a replayed reply with no recorded
// result may have run before its worker died, so unless its tool is
// idempotent it is not run again and the model is told its outcome is
// unknown; any other call runs, and its result is recorded before the
// run goes on. callLive means the caller runs the call itself.
func (ru *run) journaledCall(c message.Block) (message.Message, callSource) {
	if ru.journal == nil {
		return message.Message{}, callLive
	}
	return ru.journaledIn(&ru.journal.turn, ru.steps, c)
}

// journaledIn is journaledCall for call c of model step n of seq.
func (ru *run) journaledIn(seq *journalSteps, n int, c message.Block) (message.Message, callSource) {
	if m, found := seq.result(n, c.ID); found {
		return m, callRecorded
	}
	if seq.mayHaveRun(n, c.ID) && !ru.idempotent(c.Name) {
		return message.Message{Role: message.RoleToolResult, ToolCallID: c.ID, ToolName: c.Name,
			Content: message.BlocksOf(message.Text(sanitize.MissingToolResultText + " " + TextOutcomeUnknown)), IsError: true,
			Details: map[string]any{"outcome": "unknown"}, Timestamp: ru.r.cfg.Now().UnixMilli()}, callUnknown
	}
	return message.Message{}, callLive
}

// callSource says where a tool call's result comes from.
type callSource int

const (
	callLive     callSource = iota // the tool runs now
	callRecorded                   // the journal has its result
	callUnknown                    // it may have run; its outcome is unknown
)

// TextOutcomeUnknown follows the reference's synthetic-result text in the
// result of a call that may have run when its worker died: it is not run
// again.
const TextOutcomeUnknown = "The worker running this call stopped before its result was recorded: it may or may not have run, and it was not run again."

// idempotent reports whether the run's tool name declares itself
// idempotent.
func (ru *run) idempotent(name string) bool {
	if ru.tools == nil {
		return false
	}
	t, ok := ru.tools.Lookup(name)
	return ok && tools.IsIdempotent(t)
}

// recordResult records a tool result that ran live.
func (ru *run) recordResult(ctx context.Context, m message.Message) {
	ru.recordStep(ctx, false, ru.steps, m)
}

// recordStep records step m of model step n (of the memory flush's with
// flush); a failed write halts the run.
func (ru *run) recordStep(ctx context.Context, flush bool, n int, m message.Message) {
	if ru.journal == nil || ru.fatal != nil {
		return
	}
	if err := ru.journal.record(ctx, flush, n, m); err != nil {
		ru.halt(err)
	}
}

// halt ends the run at once with err: its context is cancelled, so every
// step stops as on a cancellation, and Run returns err.
func (ru *run) halt(err error) {
	if ru.fatal == nil {
		ru.fatal = err
		ru.cancel(err)
	}
}

// callKeyOf is the idempotency key of call id in the current model step:
// run, step and call id.
func (ru *run) callKeyOf(id string) string {
	return ru.in.RunID + "." + strconv.Itoa(ru.steps) + "." + id
}
