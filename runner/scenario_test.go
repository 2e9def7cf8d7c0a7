package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/agentprompt"
	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/blockchunk"
	"github.com/lanefleet/lanefleet/compaction"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/scripted"
	"github.com/lanefleet/lanefleet/tools"
)

// keyed is a provider whose answer depends on the API key and request, as a
// real endpoint's would; it records every call.
type keyed struct {
	mu    sync.Mutex
	calls []provider.Request
	fn    func(req *provider.Request) (string, error)
}

func (k *keyed) Stream(ctx context.Context, req *provider.Request, emit func(provider.Event)) (message.Message, error) {
	k.mu.Lock()
	k.calls = append(k.calls, *req)
	k.mu.Unlock()
	out := message.Message{Role: message.RoleAssistant, Provider: req.Model.Provider, Model: req.Model.ID, API: req.Model.API, Timestamp: 1}
	text, err := k.fn(req)
	if err != nil {
		if ctx.Err() != nil {
			out.StopReason = message.StopAborted
			return out, ctx.Err()
		}
		out.StopReason, out.ErrorMessage = message.StopError, err.Error()
		if pe, ok := err.(*provider.Error); ok {
			out.ErrorMessage = pe.Message
		}
		return out, err
	}
	emit(provider.Event{Type: provider.EventStart})
	emit(provider.Event{Type: provider.EventTextDelta, Delta: text})
	out.Content = message.BlocksOf(message.Text(text))
	out.StopReason = message.StopStop
	out.Usage = &message.Usage{Input: 10, Output: 2, TotalTokens: 12}
	emit(provider.Event{Type: provider.EventDone, Message: &out})
	return out, nil
}

func (k *keyed) keys() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, c := range k.calls {
		out = append(out, c.APIKey.Reveal())
	}
	return out
}

// multiResolver serves "acme/*" from one provider and "scripted/*" from the
// scripted provider.
type multiResolver struct {
	acme   provider.Provider
	window int
	other  provider.Provider
}

func (r multiResolver) Resolve(ref string) (provider.Model, provider.Provider, error) {
	p, id, _ := strings.Cut(ref, "/")
	switch p {
	case "acme":
		return provider.Model{Provider: "acme", ID: id, API: "openai-completions", ContextWindow: r.window}, r.acme, nil
	case "other":
		return provider.Model{Provider: "other", ID: id, API: "openai-completions", ContextWindow: 200000}, r.other, nil
	}
	return scripted.Model(id), scripted.New(scripted.Config{}), nil
}

func twoProfiles(now func() time.Time) *MemoryAuth {
	store := authprofile.Store{Usage: map[string]authprofile.State{}, Profiles: []authprofile.Profile{
		{ID: "acme:a", Type: authprofile.TypeAPIKey, Provider: "acme", Key: "sk-a"},
		{ID: "acme:b", Type: authprofile.TypeAPIKey, Provider: "acme", Key: "sk-b"},
	}, Order: map[string][]string{"acme": {"acme:a", "acme:b"}}}
	return NewMemoryAuth(store, authprofile.Config{Fleet: authprofile.FleetDefaults()}, now)
}

// runOnce runs one turn; without a Retry policy in cfg, with no same-key
// retries (the scenarios that test them set one).
func runOnce(t *testing.T, cfg Config, in events.Inbound, history ...message.Entry) *Output {
	t.Helper()
	if cfg.Retry == (RetryPolicy{}) {
		cfg.Retry.MaxRetries = -1
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.Run(t.Context(), Input{RunID: "run", SessionID: "sid", Inbound: &in, History: history}, &sink{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestScenarios(t *testing.T) {
	t.Parallel()
	now := time.Now
	ok := func(req *provider.Request) (string, error) { return "fine", nil }

	t.Run("429 on profile A rotates to B; the next run starts on B", func(t *testing.T) {
		t.Parallel()
		p := &keyed{fn: func(req *provider.Request) (string, error) {
			if req.APIKey.Reveal() == "sk-a" && req.Model.ID == "m1" {
				return "", &provider.Error{Reason: provider.ReasonRateLimit, Status: 429, Message: "429 rate limit reached", RetryAfter: 30 * time.Second}
			}
			return "fine", nil
		}}
		auth := twoProfiles(now)
		cfg := Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: p}, Auth: auth}
		out := runOnce(t, cfg, events.Inbound{Text: "hi"})
		if out.Result.Meta.Error != nil || out.Result.Payloads[0].Text != "fine" {
			t.Fatalf("result %+v", out.Result)
		}
		if got := strings.Join(p.keys(), ","); got != "sk-a,sk-b" {
			t.Fatalf("keys used %s", got)
		}
		st := auth.State("acme:a")
		if ms, ok := st.Models["m1"]; !ok || ms.CooldownUntil < time.Now().Add(29*time.Second).UnixMilli() {
			t.Fatalf("profile a after 429: %+v (want a (profile, model) cooldown of at least the Retry-After)", st)
		}
		runOnce(t, cfg, events.Inbound{Text: "again"})
		if got := strings.Join(p.keys(), ","); got != "sk-a,sk-b,sk-b" {
			t.Fatalf("keys used %s: the cooling profile must not be tried first", got)
		}
		// Another model of the same profile is not blocked by m1's limit.
		runOnce(t, cfg, events.Inbound{Text: "other model", Model: "acme/m2"})
		if got := strings.Join(p.keys(), ","); got != "sk-a,sk-b,sk-b,sk-a" {
			t.Fatalf("keys used %s: m2 must start on sk-a (cooldowns are per model)", got)
		}
	})

	t.Run("billing error disables the profile for hours", func(t *testing.T) {
		t.Parallel()
		p := &keyed{fn: func(req *provider.Request) (string, error) {
			if req.APIKey.Reveal() == "sk-a" {
				return "", &provider.Error{Reason: provider.ReasonBilling, Status: 402, Message: "Your credit balance is too low to access the API."}
			}
			return "fine", nil
		}}
		auth := twoProfiles(now)
		out := runOnce(t, Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: p}, Auth: auth}, events.Inbound{Text: "hi"})
		if out.Result.Meta.Error != nil {
			t.Fatalf("result %+v", out.Result)
		}
		st := auth.State("acme:a")
		if st.DisabledReason != provider.ReasonBilling || st.DisabledUntil < time.Now().Add(4*time.Hour).UnixMilli() {
			t.Fatalf("profile a after a billing error: %+v", st)
		}
	})

	t.Run("all profiles cooling: the next model of the chain answers", func(t *testing.T) {
		t.Parallel()
		p := &keyed{fn: func(*provider.Request) (string, error) {
			return "", &provider.Error{Reason: provider.ReasonRateLimit, Status: 429, Message: "429 rate limit reached"}
		}}
		o := &keyed{fn: func(*provider.Request) (string, error) { return "from the fallback", nil }}
		auth := twoProfiles(now)
		cfg := Config{DefaultModel: "acme/m1", Fallbacks: []string{"other/m9"}, Resolver: multiResolver{acme: p, other: o}, Auth: auth}
		out := runOnce(t, cfg, events.Inbound{Text: "hi"})
		am := out.Result.Meta.AgentMeta
		if out.Result.Meta.Error != nil || am.Provider != "other" || out.Result.Payloads[0].Text != "from the fallback" {
			t.Fatalf("result %+v meta %+v", out.Result, am)
		}
		// Now both acme profiles are cooling: the next run skips acme.
		before := len(p.keys())
		out = runOnce(t, cfg, events.Inbound{Text: "again"})
		if len(p.keys()) != before || out.Result.Meta.AgentMeta.Provider != "other" {
			t.Fatalf("cooling provider was called again (%d calls) or not skipped: %+v", len(p.keys())-before, out.Result.Meta.AgentMeta)
		}
	})

	t.Run("every model failing ends with the All models failed summary", func(t *testing.T) {
		t.Parallel()
		p := &keyed{fn: func(*provider.Request) (string, error) {
			return "", &provider.Error{Reason: provider.ReasonOverloaded, Status: 529, Message: "overloaded_error: Overloaded"}
		}}
		cfg := Config{DefaultModel: "acme/m1", Fallbacks: []string{"other/m9"}, Resolver: multiResolver{acme: p, other: p}}
		out := runOnce(t, cfg, events.Inbound{Text: "hi"})
		if e := out.Result.Meta.Error; e == nil || !strings.HasPrefix(out.Result.Payloads[0].Text, "All models failed (2): acme/m1: ") {
			t.Fatalf("result %+v", out.Result)
		}
	})

	t.Run("unsupported thinking level is retried lower", func(t *testing.T) {
		t.Parallel()
		p := &keyed{fn: func(req *provider.Request) (string, error) {
			if req.Thinking == provider.ThinkingXHigh {
				return "", &provider.Error{Reason: provider.ReasonFormat, Status: 400, Message: "Unsupported value: 'xhigh'. Supported values are: 'low', 'medium', 'high'."}
			}
			return "thought at " + string(req.Thinking), nil
		}}
		out := runOnce(t, Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: p}}, events.Inbound{Text: "hi", Thinking: "xhigh"})
		if out.Result.Meta.Error != nil || out.Result.Payloads[0].Text != "thought at low" {
			t.Fatalf("result %+v", out.Result)
		}
	})

	t.Run("timeout rotates to the next profile without a cooldown", func(t *testing.T) {
		t.Parallel()
		p := &keyed{fn: func(req *provider.Request) (string, error) {
			return "fine", nil
		}}
		slow := provider.Func(func(ctx context.Context, req *provider.Request, emit func(provider.Event)) (message.Message, error) {
			if req.APIKey.Reveal() == "sk-a" {
				<-ctx.Done()
			}
			return p.Stream(ctx, req, emit)
		})
		auth := twoProfiles(now)
		out := runOnce(t, Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: slow}, Auth: auth, AttemptTimeout: 100 * time.Millisecond}, events.Inbound{Text: "hi"})
		if out.Result.Meta.Error != nil || out.Result.Payloads[0].Text != "fine" {
			t.Fatalf("result %+v", out.Result)
		}
		if st := auth.State("acme:a"); st.CooldownUntil != 0 || len(st.Models) != 0 || st.ErrorCount != 0 {
			t.Fatalf("a timeout cooled the profile: %+v", st)
		}
	})

	t.Run("timeout on the only profile: the reference's timeout reply", func(t *testing.T) {
		t.Parallel()
		slow := provider.Func(func(ctx context.Context, req *provider.Request, emit func(provider.Event)) (message.Message, error) {
			<-ctx.Done()
			return message.Message{Role: message.RoleAssistant, StopReason: message.StopAborted}, ctx.Err()
		})
		out := runOnce(t, Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: slow}, AttemptTimeout: 50 * time.Millisecond}, events.Inbound{Text: "hi"})
		if !out.Result.Meta.Aborted || len(out.Result.Payloads) != 1 || out.Result.Payloads[0].Text != TextTimedOut {
			t.Fatalf("result %+v", out.Result)
		}
	})

	t.Run("unrecoverable overflow: the reference's user-facing error", func(t *testing.T) {
		t.Parallel()
		p := &keyed{fn: func(*provider.Request) (string, error) {
			return "", &provider.Error{Reason: provider.ReasonContextOverflow, Status: 400, Message: "prompt is too long: 208423 tokens > 200000 maximum"}
		}}
		out := runOnce(t, Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: p}}, events.Inbound{Text: "hi"})
		e := out.Result.Meta.Error
		if e == nil || e.Kind != "context_overflow" || out.Result.Payloads[0].Text != TextContextOverflow {
			t.Fatalf("result %+v", out.Result)
		}
	})

	t.Run("context overflow: compaction, retry, success", func(t *testing.T) {
		t.Parallel()
		var summaries atomic.Int32
		p := &keyed{fn: func(req *provider.Request) (string, error) {
			if strings.Contains(strings.ToLower(req.SystemPrompt), "summar") {
				summaries.Add(1)
				return "## Goal\nKeep talking about the log.", nil
			}
			for _, m := range req.Messages {
				if strings.Contains(m.Content.Text(), "<summary>") {
					return "answered after compaction", nil
				}
			}
			return "", &provider.Error{Reason: provider.ReasonContextOverflow, Status: 400, Message: "prompt is too long: 208423 tokens > 200000 maximum"}
		}}
		var history []message.Entry
		for i := 0; i < 30; i++ {
			h := toolHistory(strings.Repeat("line of a long log\n", 100))
			if len(history) > 0 {
				id := history[len(history)-1].ID
				h[0].ParentID = &id
			}
			history = append(history, h...)
		}
		s := &sink{}
		r, err := New(Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: p}, Compactor: PiCompactor{Settings: compaction.Settings{KeepRecentTokens: 2000}}})
		if err != nil {
			t.Fatal(err)
		}
		out, err := r.Run(t.Context(), Input{RunID: "run", SessionID: "sid", Inbound: &events.Inbound{Text: "and now?"}, History: history}, s)
		if err != nil {
			t.Fatal(err)
		}
		if out.Result.Meta.Error != nil || out.Result.Payloads[0].Text != "answered after compaction" || out.Result.Meta.AgentMeta.CompactionCount != 1 || summaries.Load() == 0 {
			t.Fatalf("result %+v (summaries %d)", out.Result, summaries.Load())
		}
		var kinds []string
		for _, e := range out.Entries {
			kinds = append(kinds, e.Type)
		}
		if strings.Join(kinds, ",") != "message,message,compaction,message" {
			t.Fatalf("entries %v: want the user message, the failed reply, the compaction entry and the answer", kinds)
		}
		var phases []string
		for _, e := range s.evs {
			if e.Stream == events.StreamCompaction {
				phases = append(phases, e.Data.Phase)
			}
		}
		if strings.Join(phases, ",") != "start,end" {
			t.Fatalf("compaction events %v", phases)
		}
	})

	t.Run("client tool: pending call, the client's answer continues the run", func(t *testing.T) {
		t.Parallel()
		script := `#script {"replies":[{"toolCalls":[{"id":"call_1","name":"weather","arguments":{"city":"Lisbon"}}]},{"text":"It is sunny in Lisbon."}]}`
		cfg := Config{DefaultModel: "scripted/script", Resolver: multiResolver{acme: &keyed{fn: ok}}}
		first := runOnce(t, cfg, events.Inbound{Text: script, Tools: []events.ClientTool{{Name: "weather", Description: "Current weather", Parameters: map[string]any{"type": "object"}}}})
		m := first.Result.Meta
		if m.StopReason != "tool_calls" || len(m.PendingToolCalls) != 1 || m.PendingToolCalls[0].ID != "call_1" || m.PendingToolCalls[0].Name != "weather" {
			t.Fatalf("meta %+v", m)
		}
		var args map[string]any
		if err := json.Unmarshal([]byte(m.PendingToolCalls[0].Arguments), &args); err != nil || args["city"] != "Lisbon" {
			t.Fatalf("arguments %q", m.PendingToolCalls[0].Arguments)
		}
		second := runOnce(t, cfg, events.Inbound{ToolResults: []events.ToolResult{{ToolCallID: "call_1", Text: "22°C, clear"}}}, first.Entries...)
		if second.Result.Meta.Error != nil || second.Result.Payloads[0].Text != "It is sunny in Lisbon." {
			t.Fatalf("second run %+v", second.Result)
		}
		if len(second.Entries) != 2 || second.Entries[0].Message.Role != message.RoleToolResult || second.Entries[0].Message.ToolCallID != "call_1" {
			t.Fatalf("second run entries %+v", second.Entries)
		}
	})
}

// toolHistory is a stored turn whose tool result is big.
func toolHistory(result string) []message.Entry {
	b := &builder{now: time.Now}
	b.add(message.User("read the log", 1))
	b.add(message.Message{Role: message.RoleAssistant, StopReason: message.StopToolUse, Provider: "acme", Model: "m1", API: "openai-completions",
		Content: message.BlocksOf(message.ToolCall("t1", "read", map[string]any{"path": "app.log"}))})
	b.add(message.Message{Role: message.RoleToolResult, ToolCallID: "t1", ToolName: "read", Content: message.BlocksOf(message.Text(result))})
	b.add(message.Message{Role: message.RoleAssistant, StopReason: message.StopStop, Provider: "acme", Model: "m1", API: "openai-completions",
		Content: message.BlocksOf(message.Text("read it"))})
	return b.entries
}

func TestHooksPrependContext(t *testing.T) {
	t.Parallel()
	var seen []string
	p := &keyed{fn: func(req *provider.Request) (string, error) {
		seen = append(seen, req.SystemPrompt, req.Messages[len(req.Messages)-1].Content.Text())
		return "ok", nil
	}}
	hooks := []agentprompt.Hook{
		agentprompt.HookFunc(func(context.Context, agentprompt.HookInput) (agentprompt.HookResult, error) {
			return agentprompt.HookResult{PrependContext: "The user is in Lisbon."}, nil
		}),
		agentprompt.HookFunc(func(context.Context, agentprompt.HookInput) (agentprompt.HookResult, error) {
			return agentprompt.HookResult{}, errors.New("plugin crashed")
		}),
	}
	out := runOnce(t, Config{DefaultModel: "acme/m1", SystemPrompt: "You are terse.", Resolver: multiResolver{acme: p}, Hooks: hooks},
		events.Inbound{Text: "weather?"})
	if out.Result.Meta.Error != nil || len(seen) != 2 || seen[0] != "You are terse." || seen[1] != "The user is in Lisbon.\n\nweather?" {
		t.Fatalf("result %+v, provider saw %q", out.Result, seen)
	}
	if got := out.Entries[0].Message.Content.Text(); got != "The user is in Lisbon.\n\nweather?" {
		t.Fatalf("stored prompt %q", got)
	}
}

// TestBlockReplies: a long streamed reply also arrives as blocks of the
// configured size (cut at the best break the chunker finds: paragraph, then
// newline, then sentence) that add up to the whole reply.
func TestBlockReplies(t *testing.T) {
	t.Parallel()
	var paras []string
	for i := range 12 {
		paras = append(paras, fmt.Sprintf("Paragraph %d. ", i)+strings.Repeat("All work and no play. ", 12))
	}
	text := strings.Join(paras, "\n\n")
	p := provider.Func(func(_ context.Context, req *provider.Request, emit func(provider.Event)) (message.Message, error) {
		emit(provider.Event{Type: provider.EventStart})
		for i := 0; i < len(text); i += 37 {
			emit(provider.Event{Type: provider.EventTextDelta, Delta: text[i:min(i+37, len(text))]})
		}
		emit(provider.Event{Type: provider.EventTextEnd, Content: text})
		out := message.Message{Role: message.RoleAssistant, StopReason: message.StopStop, Content: message.BlocksOf(message.Text(text)), Provider: "acme", Model: "m1"}
		emit(provider.Event{Type: provider.EventDone, Message: &out})
		return out, nil
	})
	cfg := blockchunk.Config{MinChars: 500, MaxChars: 900, BreakPreference: blockchunk.BreakParagraph}
	r, err := New(Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: p}, BlockReplies: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{}
	if _, err := r.Run(t.Context(), Input{RunID: "r", Inbound: &events.Inbound{Text: "write"}}, s); err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, e := range s.evs {
		if e.Stream == events.StreamBlock {
			blocks = append(blocks, e.Data.Text)
		}
	}
	if len(blocks) < 3 {
		t.Fatalf("%d blocks", len(blocks))
	}
	for i, b := range blocks {
		if len(b) > 900 || (i < len(blocks)-1 && len(b) < 500) {
			t.Fatalf("block %d (%d chars) %.40q…", i, len(b), b)
		}
	}
	if strings.Join(strings.Fields(strings.Join(blocks, " ")), " ") != strings.Join(strings.Fields(text), " ") {
		t.Fatal("the blocks do not add up to the reply")
	}
}

// workspaceTools gives every run the built-in tools in one directory.
type workspaceTools struct{ set tools.Set }

func (w workspaceTools) Tools(context.Context, Input) (tools.Set, error) { return w.set, nil }

// TestToolErrorWarning: the reply ends with "⚠️ <tool> failed" only while
// the last failure stands (runtime spec §22, §23): a failed write is
// forgotten once the same write succeeds, and remembered through the
// success of a different one.
func TestToolErrorWarning(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		calls  string // the scripted tool-call replies before the final text
		want   []events.Payload
		inFile string // a file the workspace must hold afterwards
	}{
		{"a write that fails and then succeeds leaves no warning",
			`{"toolCalls":[{"name":"write","arguments":{"path":"notes.md"}}]},{"toolCalls":[{"name":"write","arguments":{"path":"notes.md","content":"hi"}}]}`,
			[]events.Payload{{Text: "Saved."}}, "notes.md"},
		{"a write that fails is reported although another write succeeds",
			`{"toolCalls":[{"name":"write","arguments":{"path":"a.md"}}]},{"toolCalls":[{"name":"write","arguments":{"path":"b.md","content":"hi"}}]}`,
			[]events.Payload{{Text: "Saved."}, {Text: "⚠️ write failed", IsError: true}}, "b.md"},
		{"a failed read is forgotten after any success",
			`{"toolCalls":[{"name":"read","arguments":{"path":"missing.md"}}]},{"toolCalls":[{"name":"write","arguments":{"path":"c.md","content":"hi"}}]}`,
			[]events.Payload{{Text: "Saved."}}, "c.md"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			set, err := tools.Builtin(tools.Workspace{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			script := `#script {"replies":[` + tt.calls + `,{"text":"Saved."}]}`
			cfg := Config{DefaultModel: "scripted/script", Resolver: multiResolver{}, Tools: workspaceTools{set}}
			out := runOnce(t, cfg, events.Inbound{Text: script})
			if !reflect.DeepEqual(out.Result.Payloads, tt.want) {
				t.Fatalf("payloads %+v, want %+v", out.Result.Payloads, tt.want)
			}
			if _, err := os.Stat(filepath.Join(dir, tt.inFile)); err != nil {
				t.Fatalf("the successful write did not happen: %v", err)
			}
		})
	}
}

// TestRetryLimitReached drives the run loop into its iteration cap the only
// way the reference's bounded retry branches allow: many profiles, each
// failing with a rate limit that lists the thinking levels, so every
// profile is tried at every level before the next one is activated (30
// profiles × 6 levels > the cap of 160).
func TestRetryLimitReached(t *testing.T) {
	t.Parallel()
	const profiles = 30
	store := authprofile.Store{Usage: map[string]authprofile.State{}, Order: map[string][]string{}}
	for i := range profiles {
		id := fmt.Sprintf("acme:%02d", i)
		store.Profiles = append(store.Profiles, authprofile.Profile{ID: id, Type: authprofile.TypeAPIKey, Provider: "acme", Key: provider.Secret("sk-" + id)})
		store.Order["acme"] = append(store.Order["acme"], id)
	}
	auth := NewMemoryAuth(store, authprofile.Config{Fleet: authprofile.FleetDefaults()}, time.Now)
	p := &keyed{fn: func(*provider.Request) (string, error) {
		return "", &provider.Error{Reason: provider.ReasonRateLimit, Status: 429,
			Message: "429 rate limit reached. Supported values are: 'off', 'minimal', 'low', 'medium', 'high', 'xhigh'"}
	}}
	out := runOnce(t, Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: p}, Auth: auth}, events.Inbound{Text: "hi"})
	limit := IterationCap(profiles)
	want := []events.Payload{{Text: TextRetryLimit, IsError: true}}
	e := out.Result.Meta.Error
	if e == nil || e.Kind != "retry_limit" || e.Message != fmt.Sprintf("Exceeded retry limit after %d attempts (max=%d).", limit, limit) ||
		!reflect.DeepEqual(out.Result.Payloads, want) {
		t.Fatalf("result %+v, error %+v", out.Result, e)
	}
	if n := len(p.keys()); n != limit {
		t.Fatalf("%d provider calls, want the cap %d", n, limit)
	}
}

// failingAuth is an auth store whose writes fail (a KV bucket that is down).
type failingAuth struct{ *MemoryAuth }

var errStoreDown = errors.New("auth store unavailable")

func (failingAuth) Apply(context.Context, string, authprofile.Event) error { return errStoreDown }
func (failingAuth) MarkGood(context.Context, string, string) error         { return errStoreDown }

// TestStateWriteFailuresLogged: auth-profile writes that fail do not fail
// the turn (the reply stands) and are logged once, when the run ends.
func TestStateWriteFailuresLogged(t *testing.T) {
	t.Parallel()
	p := &keyed{fn: func(req *provider.Request) (string, error) {
		if req.APIKey.Reveal() == "sk-a" {
			return "", &provider.Error{Reason: provider.ReasonRateLimit, Status: 429, Message: "429 rate limit reached"}
		}
		return "fine", nil
	}}
	var logs strings.Builder
	cfg := Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: p}, Auth: failingAuth{twoProfiles(time.Now)}, Logger: zerolog.New(&logs)}
	out := runOnce(t, cfg, events.Inbound{Text: "hi"})
	if out.Result.Meta.Error != nil || out.Result.Payloads[0].Text != "fine" {
		t.Fatalf("result %+v", out.Result)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one log line, got %q", lines)
	}
	var line struct {
		Level   string `json:"level"`
		RunID   string `json:"run_id"`
		Failed  int    `json:"failed_writes"`
		Message string `json:"message"`
		Error   string `json:"error"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
		t.Fatal(err)
	}
	// The failure mark of profile a, then the good and used marks of b.
	if line.Level != "warn" || line.RunID != "run" || line.Failed != 3 || !strings.Contains(line.Error, errStoreDown.Error()) {
		t.Fatalf("log line %+v", line)
	}
}
