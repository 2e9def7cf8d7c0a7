package runner

import (
	"context"
	"os"
	"path/filepath"
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
			if want := "message,compaction,message"; !tt.failover && strings.Join(kinds, ",") != want {
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
