package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/sanitize"
	"github.com/lanefleet/lanefleet/tools"
)

// memSteps is a StepStore in memory; Put fails from step failAt on.
type memSteps struct {
	mu     sync.Mutex
	steps  map[int][]byte
	failAt int
}

func (m *memSteps) Steps(context.Context) ([][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out [][]byte
	for n := 1; m.steps[n] != nil; n++ {
		out = append(out, m.steps[n])
	}
	return out, nil
}

func (m *memSteps) Put(_ context.Context, n int, step []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failAt > 0 && n >= m.failAt {
		return errors.New("store unavailable")
	}
	if m.steps == nil {
		m.steps = map[int][]byte{}
	}
	m.steps[n] = step
	return nil
}

// keep returns a store holding the first n steps of m.
func (m *memSteps) keep(n int) *memSteps {
	out := &memSteps{steps: map[int][]byte{}}
	for i := 1; i <= n; i++ {
		out.steps[i] = m.steps[i]
	}
	return out
}

// scriptModel answers its calls in order: first a call of tool, then a
// call of tool "look", then "done". It counts the calls.
type scriptModel struct {
	mu    sync.Mutex
	calls int
	tool  string
}

func (s *scriptModel) Stream(ctx context.Context, req *provider.Request, emit func(provider.Event)) (message.Message, error) {
	s.mu.Lock()
	s.calls++
	n := s.calls
	s.mu.Unlock()
	_ = n
	step := toolResults(req.Messages)
	m := message.Message{Role: message.RoleAssistant, StopReason: message.StopToolUse, Timestamp: int64(1000 + step)}
	switch step {
	case 0:
		m.Content = message.BlocksOf(message.Text("first"), message.Block{Type: message.BlockToolCall, ID: "call_0", Name: s.tool, Arguments: map[string]any{"n": 1}})
	case 1:
		m.Content = message.BlocksOf(message.Block{Type: message.BlockToolCall, ID: "call_0", Name: "look", Arguments: map[string]any{}})
	default:
		m.Content, m.StopReason = message.BlocksOf(message.Text("done")), message.StopStop
	}
	emit(provider.Event{Type: provider.EventStart})
	for i, b := range m.Content.Blocks {
		if b.Type == message.BlockText {
			emit(provider.Event{Type: provider.EventTextDelta, ContentIndex: i, Delta: b.Text})
		}
	}
	emit(provider.Event{Type: provider.EventDone, Reason: m.StopReason, Message: &m})
	return m, nil
}

func toolResults(msgs []message.Message) int {
	n := 0
	for _, m := range msgs {
		if m.Role == message.RoleToolResult {
			n++
		}
	}
	return n
}

// countedTool counts its calls and the idempotency keys it was given.
type countedTool struct {
	name       string
	idempotent bool
	mu         sync.Mutex
	keys       []string
}

func (c *countedTool) Spec() provider.Tool {
	return provider.Tool{Name: c.name, Parameters: map[string]any{"type": "object"}}
}
func (c *countedTool) Idempotent() bool { return c.idempotent }
func (c *countedTool) Call(_ context.Context, call tools.Call) (tools.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys = append(c.keys, call.Key)
	return tools.TextResult(c.name + " ran"), nil
}
func (c *countedTool) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.keys)
}

type journalFixture struct {
	model     *scriptModel
	act, look *countedTool
	r         *Runner
	in        *events.Inbound
	history   []message.Entry
}

func newJournalFixture(t *testing.T, tool string, idempotent bool) *journalFixture {
	t.Helper()
	f := &journalFixture{model: &scriptModel{tool: tool}, act: &countedTool{name: "act", idempotent: idempotent},
		look: &countedTool{name: "look", idempotent: true}, in: &events.Inbound{Text: "go", Model: "other/m"}}
	r, err := New(Config{DefaultModel: "other/m", Resolver: multiResolver{other: f.model}, Tools: workspaceTools{tools.List{f.act, f.look}},
		Retry: RetryPolicy{MaxRetries: -1}})
	if err != nil {
		t.Fatal(err)
	}
	f.r = r
	return f
}

func (f *journalFixture) run(t *testing.T, store StepStore) (*Output, *sink, error) {
	t.Helper()
	s := &sink{}
	out, err := f.r.Run(t.Context(), Input{RunID: "42", Inbound: f.in, History: f.history, Steps: store}, s)
	return out, s, err
}

// entriesOf returns the messages of out without timestamps of the user
// prompt (the one entry a re-run makes again).
func messagesOf(out *Output) []message.Message {
	var ms []message.Message
	for _, e := range out.Entries {
		if e.Message != nil && e.Message.Role != message.RoleUser {
			ms = append(ms, *e.Message)
		}
	}
	return ms
}

// TestJournalReplaysCompletedSteps: a re-run of a turn whose steps were
// recorded makes no model call and no tool call for them, streams the
// replayed replies again, says it resumed, and ends with the transcript
// and reply of the uninterrupted run; from a partial journal it goes on
// live from the first step with no record.
func TestJournalReplaysCompletedSteps(t *testing.T) {
	t.Parallel()
	f := newJournalFixture(t, "act", false)
	full := &memSteps{}
	first, _, err := f.run(t, full)
	if err != nil {
		t.Fatal(err)
	}
	// reply (act), act's result, reply (look), look's result; the answer
	// calls no tool and is not recorded (the turn's record follows it)
	if len(full.steps) != 4 || f.model.calls != 3 || f.act.count() != 1 || f.look.count() != 1 {
		t.Fatalf("first run: %d steps, %d model calls, act %d, look %d", len(full.steps), f.model.calls, f.act.count(), f.look.count())
	}
	if f.act.keys[0] != "42.1.call_0" || f.look.keys[0] != "42.2.call_0" {
		t.Fatalf("idempotency keys %q %q: the same call id in two replies must give two keys", f.act.keys, f.look.keys)
	}
	want := messagesOf(first)

	tests := []struct {
		name                 string
		kept                 int
		modelCalls, actCalls int
	}{
		{"died before the turn's record", 4, 1, 0},
		{"died in the second tool's call", 3, 1, 0}, // look is idempotent: it runs again
		{"died after the first tool's result", 2, 2, 0},
		{"died before anything was recorded", 0, 3, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f2 := newJournalFixture(t, "act", false)
			out, s, err := f2.run(t, full.keep(tt.kept))
			if err != nil {
				t.Fatal(err)
			}
			if f2.model.calls != tt.modelCalls || f2.act.count() != tt.actCalls {
				t.Fatalf("model calls %d, act calls %d; want %d, %d", f2.model.calls, f2.act.count(), tt.modelCalls, tt.actCalls)
			}
			if got := messagesOf(out); !sameMessages(got, want) {
				gj, _ := json.Marshal(got)
				wj, _ := json.Marshal(want)
				t.Fatalf("transcript differs from the uninterrupted run's:\n got %s\nwant %s", gj, wj)
			}
			if !reflect.DeepEqual(out.Result.Payloads, first.Result.Payloads) {
				t.Fatalf("reply %+v, want %+v", out.Result.Payloads, first.Result.Payloads)
			}
			resumed := 0
			var text strings.Builder
			for _, ev := range s.evs {
				if ev.Stream == events.StreamLifecycle && ev.Data.Phase == events.PhaseResumed {
					resumed = ev.Data.Steps
				}
				if ev.Stream == events.StreamAssistant {
					text.WriteString(ev.Data.Delta)
				}
			}
			if resumed != tt.kept {
				t.Fatalf("resumed event says %d steps, want %d", resumed, tt.kept)
			}
			if !strings.Contains(text.String(), "first") || !strings.Contains(text.String(), "done") {
				t.Fatalf("viewers saw %q: the replayed replies are streamed again", text.String())
			}
		})
	}
}

// sameMessages compares transcripts in their pi JSON form; live
// tool results carry the time they were made, so only their timestamps
// may differ.
func sameMessages(a, b []message.Message) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Role == message.RoleToolResult {
			x.Timestamp, y.Timestamp = 0, 0
		}
		ex, err1 := json.Marshal(&x)
		ey, err2 := json.Marshal(&y)
		if err1 != nil || err2 != nil || !bytes.Equal(ex, ey) {
			return false
		}
	}
	return true
}

// TestJournalUnknownOutcome: a call of a replayed reply with no recorded
// result may have run before its worker died: a tool that is not
// idempotent is not run again and the model reads that its outcome is
// unknown; an idempotent one runs again.
func TestJournalUnknownOutcome(t *testing.T) {
	t.Parallel()
	for _, idempotent := range []bool{false, true} {
		f := newJournalFixture(t, "act", idempotent)
		full := &memSteps{}
		if _, _, err := f.run(t, full); err != nil {
			t.Fatal(err)
		}
		f2 := newJournalFixture(t, "act", idempotent)
		partial := full.keep(1) // the first reply only: act may have run
		out, _, err := f2.run(t, partial)
		if err != nil {
			t.Fatal(err)
		}
		res := messagesOf(out)[1]
		if idempotent {
			if f2.act.count() != 1 || res.IsError {
				t.Fatalf("idempotent: act ran %d times, result %+v", f2.act.count(), res)
			}
			continue
		}
		if f2.act.count() != 0 {
			t.Fatalf("act ran again on the re-run (%d)", f2.act.count())
		}
		if !res.IsError || !strings.HasPrefix(res.Content.Text(), sanitize.MissingToolResultText) || !strings.Contains(res.Content.Text(), "not run again") {
			t.Fatalf("result of the lost call: %+v", res)
		}
		// The unknown outcome is recorded: a further re-run replays it.
		f3 := newJournalFixture(t, "act", idempotent)
		out3, _, err := f3.run(t, partial)
		if err != nil || f3.model.calls != 1 || f3.act.count() != 0 || !sameMessages(messagesOf(out3), messagesOf(out)) {
			t.Fatalf("a second re-run: %d model calls, act %d, %v", f3.model.calls, f3.act.count(), err)
		}
	}
}

// TestJournalOtherInput: steps recorded for other input (a collect-mode
// turn that merged other messages) are not replayed, and are written over.
func TestJournalOtherInput(t *testing.T) {
	t.Parallel()
	f := newJournalFixture(t, "act", false)
	store := &memSteps{}
	if _, _, err := f.run(t, store); err != nil {
		t.Fatal(err)
	}
	f2 := newJournalFixture(t, "act", false)
	f2.in = &events.Inbound{Text: "go, and this too", Model: "other/m"}
	if _, _, err := f2.run(t, store); err != nil {
		t.Fatal(err)
	}
	if f2.model.calls != 3 || f2.act.count() != 1 {
		t.Fatalf("model %d, act %d: the other input's steps were replayed", f2.model.calls, f2.act.count())
	}
	f3 := newJournalFixture(t, "act", false)
	f3.in = f2.in
	if _, _, err := f3.run(t, store); err != nil || f3.model.calls != 1 {
		t.Fatalf("the rewritten journal is not replayed: %d model calls, %v", f3.model.calls, err)
	}
}

// TestJournalWriteFails: a step that cannot be recorded ends the run with
// the store's error before anything runs after it.
func TestJournalWriteFails(t *testing.T) {
	t.Parallel()
	f := newJournalFixture(t, "act", false)
	out, _, err := f.run(t, &memSteps{failAt: 2}) // the first reply is recorded, act's result is not
	if err == nil || !strings.Contains(err.Error(), "store unavailable") {
		t.Fatalf("run ended with %v, %+v", err, out)
	}
	if f.model.calls != 1 || f.act.count() != 1 || f.look.count() != 0 {
		t.Fatalf("model %d, act %d, look %d: the run went on after a step was lost", f.model.calls, f.act.count(), f.look.count())
	}
}
