package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/lanefleet/lanefleet/compaction"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/tools"
)

// alwaysDue is pi's compactor whose threshold is always crossed: every
// attempt compacts first.
type alwaysDue struct{ PiCompactor }

func (alwaysDue) Due([]message.Message, int) bool { return true }

// TestMemoryFlushBeforeCompaction: with MemoryFlush on, a threshold
// compaction is preceded by one silent flush turn that sees the flush
// prompt and writes MEMORY.md with the write tool; the flush's prompt,
// reply and tool call stay out of the transcript and the event stream
// (one memory_flush compaction event says it ran), and the reply the user
// gets is the same as without it. Off, or without a write tool, no flush.
func TestMemoryFlushBeforeCompaction(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		flush     bool
		noWrite   bool // the run's tools lack write
		failover  bool // the first model's answer fails over to another: a second attempt, compacting again
		wantCalls string
		wantPhase string
	}{
		{"flush on", true, false, false, "flush,flush,summary,summary,answer", "memory_flush,start,end"},
		{"flush off", false, false, false, "summary,summary,answer", "start,end"},
		{"no write tool", true, true, false, "summary,summary,answer", "start,end"},
		{"once per turn", true, false, true, "flush,flush,summary,summary,failed,answer", "memory_flush,start,end,start,end"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			set, err := tools.Builtin(tools.Workspace{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			if tt.noWrite {
				var keep tools.List
				for _, spec := range set.Specs() {
					if tl, _ := set.Lookup(spec.Name); spec.Name != "write" {
						keep = append(keep, tl)
					}
				}
				set = keep
			}
			var mu sync.Mutex
			var calls []string
			record := func(s string) {
				mu.Lock()
				calls = append(calls, s)
				mu.Unlock()
			}
			p := provider.Func(func(_ context.Context, req *provider.Request, emit func(provider.Event)) (message.Message, error) {
				out := message.Message{Role: message.RoleAssistant, Provider: req.Model.Provider, Model: req.Model.ID, API: req.Model.API, Timestamp: 1, StopReason: message.StopStop}
				last := req.Messages[len(req.Messages)-1]
				switch {
				case strings.Contains(strings.ToLower(req.SystemPrompt), "summar"):
					record("summary")
					out.Content = message.BlocksOf(message.Text("## Goal\nKeep talking about the log."))
				case strings.Contains(req.SystemPrompt, "Pre-compaction memory flush") && last.Role == message.RoleUser:
					record("flush")
					if !strings.Contains(last.Content.Text(), "store durable memories now") || !slices.ContainsFunc(req.Tools, func(t provider.Tool) bool { return t.Name == "write" }) {
						t.Errorf("flush request without its prompt or the write tool: %q", last.Content.Text())
					}
					out.StopReason = message.StopToolUse
					out.Content = message.BlocksOf(message.ToolCall("f1", "write", map[string]any{"path": "MEMORY.md", "content": "The log is app.log.\n"}))
				case strings.Contains(req.SystemPrompt, "Pre-compaction memory flush"):
					record("flush")
					out.Content = message.BlocksOf(message.Text("NO_REPLY"))
				case tt.failover && req.Model.Provider == "acme":
					record("failed")
					return message.Message{Role: message.RoleAssistant, StopReason: message.StopError, ErrorMessage: "overloaded"},
						&provider.Error{Reason: provider.ReasonOverloaded, Status: 529, Message: "overloaded"}
				default:
					record("answer")
					out.Content = message.BlocksOf(message.Text("final answer"))
				}
				emit(provider.Event{Type: provider.EventTextDelta, Delta: out.Content.Text()})
				return out, nil
			})
			var history []message.Entry
			for range 30 {
				h := toolHistory(strings.Repeat("line of a long log\n", 100))
				if len(history) > 0 {
					id := history[len(history)-1].ID
					h[0].ParentID = &id
				}
				history = append(history, h...)
			}
			r, err := New(Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: p, other: p, window: 200000}, Fallbacks: []string{"other/m2"}, Retry: RetryPolicy{MaxRetries: -1}, Tools: workspaceTools{set},
				Compactor: alwaysDue{PiCompactor{Settings: compaction.Settings{Enabled: true, KeepRecentTokens: 2000}}}, MemoryFlush: tt.flush})
			if err != nil {
				t.Fatal(err)
			}
			s := &sink{}
			out, err := r.Run(t.Context(), Input{RunID: "run", SessionID: "sid", Inbound: &events.Inbound{Text: "and now?"}, History: history}, s)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(calls, ","); got != tt.wantCalls {
				t.Fatalf("model calls %s, want %s", got, tt.wantCalls)
			}
			if out.Result.Meta.Error != nil || len(out.Result.Payloads) != 1 || out.Result.Payloads[0].Text != "final answer" {
				t.Fatalf("result %+v", out.Result)
			}
			b, err := os.ReadFile(filepath.Join(dir, "MEMORY.md"))
			if tt.flush && !tt.noWrite {
				if err != nil || string(b) != "The log is app.log.\n" {
					t.Fatalf("MEMORY.md %q, %v", b, err)
				}
			} else if err == nil {
				t.Fatal("MEMORY.md written without a flush")
			}
			var kinds []string
			for _, e := range out.Entries {
				kinds = append(kinds, e.Type)
				if e.Message != nil && (strings.Contains(e.Message.Content.Text(), "NO_REPLY") || strings.Contains(e.Message.Content.Text(), "memory flush") || e.Message.ToolCallID == "f1") {
					t.Fatalf("the flush entered the transcript: %+v", e.Message)
				}
			}
			want := "message,compaction,message"
			if tt.flush && !tt.noWrite {
				want = "message,custom,compaction,message" // the flush's record
			}
			if !tt.failover && strings.Join(kinds, ",") != want {
				t.Fatalf("entries %v", kinds)
			}
			var phases []string
			for _, e := range s.evs {
				switch e.Stream {
				case events.StreamCompaction:
					phases = append(phases, e.Data.Phase)
				case events.StreamTool:
					t.Fatalf("tool event %+v: the flush's calls are silent", e.Data)
				case events.StreamAssistant:
					if strings.Contains(e.Data.Delta+e.Data.Text, "NO_REPLY") {
						t.Fatalf("the flush's reply was streamed: %+v", e.Data)
					}
				}
			}
			if strings.Join(phases, ",") != tt.wantPhase {
				t.Fatalf("compaction events %v, want %s", phases, tt.wantPhase)
			}
		})
	}
}

// flushFixture is a session near its context limit on a runner whose
// compaction is always due, a model that answers the flush with one write
// of MEMORY.md then NO_REPLY, and a write tool that counts its calls.
type flushFixture struct {
	dir     string
	write   *countingTool
	mu      sync.Mutex
	calls   []string
	failSum bool // the summary calls fail: the compaction fails
	synced  func()
	r       *Runner
	history []message.Entry
}

// countingTool counts the calls of the tool it wraps.
type countingTool struct {
	tools.Tool
	mu sync.Mutex
	n  int
}

func (c *countingTool) Idempotent() bool { return tools.IsIdempotent(c.Tool) }
func (c *countingTool) Call(ctx context.Context, call tools.Call) (tools.Result, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.Tool.Call(ctx, call)
}
func (c *countingTool) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// syncingTools is a workspaceTools that is a MemorySyncer.
type syncingTools struct {
	workspaceTools
	f *flushFixture
}

func (s syncingTools) SyncMemory(context.Context, Input) error {
	if s.f.synced != nil {
		s.f.synced()
	}
	return nil
}

func newFlushFixture(t *testing.T) *flushFixture {
	t.Helper()
	f := &flushFixture{dir: t.TempDir()}
	set, err := tools.Builtin(tools.Workspace{Dir: f.dir})
	if err != nil {
		t.Fatal(err)
	}
	var list tools.List
	for _, spec := range set.Specs() {
		tl, _ := set.Lookup(spec.Name)
		if spec.Name == "write" {
			f.write = &countingTool{Tool: tl}
			tl = f.write
		}
		list = append(list, tl)
	}
	p := provider.Func(func(_ context.Context, req *provider.Request, emit func(provider.Event)) (message.Message, error) {
		out := message.Message{Role: message.RoleAssistant, Provider: req.Model.Provider, Model: req.Model.ID, API: req.Model.API, Timestamp: 1, StopReason: message.StopStop}
		last := req.Messages[len(req.Messages)-1]
		f.mu.Lock()
		defer f.mu.Unlock()
		switch {
		case strings.Contains(strings.ToLower(req.SystemPrompt), "summar") && f.failSum:
			f.calls = append(f.calls, "summary-failed")
			return message.Message{Role: message.RoleAssistant, StopReason: message.StopError, ErrorMessage: "overloaded"},
				&provider.Error{Reason: provider.ReasonOverloaded, Status: 529, Message: "overloaded"}
		case strings.Contains(strings.ToLower(req.SystemPrompt), "summar"):
			f.calls = append(f.calls, "summary")
			out.Content = message.BlocksOf(message.Text("## Goal\nKeep talking about the log."))
		case strings.Contains(req.SystemPrompt, "Pre-compaction memory flush") && last.Role == message.RoleUser:
			f.calls = append(f.calls, "flush")
			out.StopReason = message.StopToolUse
			out.Content = message.BlocksOf(message.ToolCall("f1", "write", map[string]any{"path": "MEMORY.md", "content": "The log is app.log.\n"}))
		case strings.Contains(req.SystemPrompt, "Pre-compaction memory flush"):
			f.calls = append(f.calls, "flush")
			out.Content = message.BlocksOf(message.Text("NO_REPLY"))
		default:
			f.calls = append(f.calls, "answer")
			out.Content = message.BlocksOf(message.Text("final answer"))
		}
		return out, nil
	})
	for range 30 {
		h := toolHistory(strings.Repeat("line of a long log\n", 100))
		if len(f.history) > 0 {
			id := f.history[len(f.history)-1].ID
			h[0].ParentID = &id
		}
		f.history = append(f.history, h...)
	}
	r, err := New(Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: p, window: 200000}, Retry: RetryPolicy{MaxRetries: -1},
		Tools: syncingTools{workspaceTools{list}, f}, MemoryFlush: true,
		Compactor: alwaysDue{PiCompactor{Settings: compaction.Settings{Enabled: true, KeepRecentTokens: 2000}}}})
	if err != nil {
		t.Fatal(err)
	}
	f.r = r
	return f
}

// turn runs one turn on the session's history and appends its entries to
// it; it returns the model calls the turn made.
func (f *flushFixture) turn(t *testing.T, runID string, steps StepStore) (*Output, string) {
	t.Helper()
	f.mu.Lock()
	f.calls = nil
	f.mu.Unlock()
	out, err := f.r.Run(t.Context(), Input{RunID: runID, SessionID: "sid", Inbound: &events.Inbound{Text: "and now?"}, History: f.history, Steps: steps}, &sink{})
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return out, strings.Join(f.calls, ",")
}

// TestMemoryFlushOncePerCycle: a session flushes once per compaction
// cycle (the turns between two compactions), whatever its turns: a turn
// over the threshold whose compaction failed leaves the next turn in the
// same cycle, which compacts without flushing again; once a compaction
// succeeded, the next cycle's first turn over the threshold flushes. The
// record is a custom entry of the transcript, which no model sees.
func TestMemoryFlushOncePerCycle(t *testing.T) {
	t.Parallel()
	f := newFlushFixture(t)
	turns := []struct {
		failSum bool
		flushes int // the flush's model calls
	}{
		{true, 2},  // flushes; the compaction fails: the cycle goes on
		{false, 0}, // the same cycle: no flush; the compaction succeeds
		{false, 2}, // the next cycle (its compaction finds nothing more to summarise)
	}
	for i, tt := range turns {
		f.failSum = tt.failSum
		out, calls := f.turn(t, fmt.Sprint("run", i), nil)
		if n := strings.Count(calls, "flush"); n != tt.flushes {
			t.Fatalf("turn %d: model calls %s, want %d of the flush", i+1, calls, tt.flushes)
		}
		if out.Result.Meta.Error != nil || out.Result.Payloads[0].Text != "final answer" {
			t.Fatalf("turn %d: result %+v", i+1, out.Result)
		}
		f.history = append(f.history, out.Entries...)
	}
	if n := f.write.count(); n != 2 {
		t.Fatalf("write ran %d times in 3 turns of 2 cycles, want 2", n)
	}
	flushes := 0
	for _, e := range f.history {
		if e.Type == message.EntryCustom && e.Field("customType") == CustomMemoryFlush {
			flushes++
		}
	}
	if flushes != 2 {
		t.Fatalf("%d memory-flush records, want 2", flushes)
	}
}

// TestMemoryFlushJournaled: the flush's model replies and tool results
// are journaled with the turn's steps, so a re-run of the turn after its
// worker died replays the flush instead of calling the model and the
// write tool again; a round's results are recorded only after the tool
// source synced the memory files (a MemorySyncer), and a write with no
// recorded result (the worker died before) runs again: write is
// idempotent.
func TestMemoryFlushJournaled(t *testing.T) {
	t.Parallel()
	f := newFlushFixture(t)
	full := &memSteps{}
	var atSync []int
	f.synced = func() {
		full.mu.Lock()
		atSync = append(atSync, len(full.steps))
		full.mu.Unlock()
	}
	first, calls := f.turn(t, "run", full)
	if calls != "flush,flush,summary,summary,answer" || f.write.count() != 1 {
		t.Fatalf("first run: model calls %s, write %d", calls, f.write.count())
	}
	// The flush's reply (the write), then the write's result, recorded
	// after the sync.
	if len(full.steps) != 2 || !slices.Equal(atSync, []int{1}) {
		t.Fatalf("journal has %d steps, synced with %v recorded; want 2, [1]", len(full.steps), atSync)
	}
	tests := []struct {
		name  string
		kept  int
		calls string
		write int
	}{
		{"died after the flush", 2, "flush,summary,summary,answer", 0},           // only the NO_REPLY round is asked again
		{"died before the write's result", 1, "flush,summary,summary,answer", 1}, // write is idempotent: it runs again
		{"died before anything was recorded", 0, "flush,flush,summary,summary,answer", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f2 := newFlushFixture(t)
			f2.history = f.history // the same turn's input
			out, calls := f2.turn(t, "run", full.keep(tt.kept))
			if calls != tt.calls || f2.write.count() != tt.write {
				t.Fatalf("re-run: model calls %s, write %d; want %s, %d", calls, f2.write.count(), tt.calls, tt.write)
			}
			if !reflect.DeepEqual(out.Result.Payloads, first.Result.Payloads) {
				t.Fatalf("reply %+v, want %+v", out.Result.Payloads, first.Result.Payloads)
			}
			var kinds []string
			for _, e := range out.Entries {
				kinds = append(kinds, e.Type)
			}
			if strings.Join(kinds, ",") != "message,custom,compaction,message" {
				t.Fatalf("entries %v", kinds)
			}
		})
	}
}
