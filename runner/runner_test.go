package runner

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/scripted"
)

type sink struct {
	mu  sync.Mutex
	evs []events.Event
}

func (s *sink) Emit(stream string, d events.EventData) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evs = append(s.evs, events.Event{Stream: stream, Data: d})
}

type resolver struct{ p *scripted.Provider }

func (r resolver) Resolve(ref string) (provider.Model, provider.Provider, error) {
	p, id, _ := strings.Cut(ref, "/")
	if p != "scripted" {
		return provider.Model{Provider: p, ID: id}, nil, errors.New("no such provider")
	}
	return scripted.Model(id), r.p, nil
}

// laneOwned lists the lifecycle events s received that only the lane
// publishes (start, restart, end, error, aborted): a runner reports how a
// run ended in its Output, and the lane makes the run's one end or error
// event from it.
func laneOwned(s *sink) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.evs {
		if e.Stream != events.StreamLifecycle {
			continue
		}
		switch e.Data.Phase {
		case events.PhaseStart, events.PhaseRestart, events.PhaseEnd, events.PhaseError, events.PhaseAborted:
			out = append(out, e.Data.Phase)
		}
	}
	return out
}

func newRunner(t *testing.T, model ...string) *Runner {
	t.Helper()
	now := time.UnixMilli(1750000000000)
	def := ""
	if len(model) > 0 {
		def = model[0]
	}
	// No same-key retries: TestSameKeyRetry covers them.
	r, err := New(Config{DefaultModel: def, Resolver: resolver{scripted.New(scripted.Config{})}, Now: func() time.Time { return now },
		Retry: RetryPolicy{MaxRetries: -1}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestEchoTurn(t *testing.T) {
	t.Parallel()
	r := newRunner(t)
	prev := "abcd1234"
	history := []message.Entry{{Type: message.EntryMessage, ID: prev, Message: &message.Message{Role: message.RoleUser, Content: message.PlainText("earlier")}}}
	s := &sink{}
	out, err := r.Run(t.Context(), Input{SessionID: "sid", RunID: "7", Inbound: &events.Inbound{Text: "hi there"}, History: history}, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Entries) != 2 || *out.Entries[0].ParentID != prev || *out.Entries[1].ParentID != out.Entries[0].ID {
		t.Fatalf("entries not chained: %+v", out.Entries)
	}
	res := out.Result
	if len(res.Payloads) != 1 || res.Payloads[0].Text != "echo: hi there" || res.Meta.Error != nil {
		t.Fatalf("result = %+v", res)
	}
	am := res.Meta.AgentMeta
	if am.SessionID != "sid" || am.Provider != "scripted" || am.Model != "echo" || am.Usage == nil || am.LastCallUsage == nil || am.PromptTokens == 0 {
		t.Fatalf("agent meta = %+v", am)
	}
	var text string
	for _, e := range s.evs {
		if e.Stream == events.StreamAssistant {
			text = e.Data.Text
		}
	}
	if text != "echo: hi there" {
		t.Fatalf("events = %+v", s.evs)
	}
	if got := laneOwned(s); len(got) > 0 {
		t.Fatalf("the runner published the lane's lifecycle events %v", got)
	}
}

func TestTurnOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		in        events.Inbound
		kind      string // expected Meta.Error.Kind, "" for success
		entries   int
		wantText  string
		stopReson string
	}{
		{"provider error is a finished turn with an error payload",
			events.Inbound{Model: "scripted/script", Text: `#script {"replies":[{"error":{"status":429,"message":"429 Too Many Requests: rate limit"}}]}`},
			"provider_error", 2, "", "error"},
		{"tool calls without tools get error results and the loop goes on",
			events.Inbound{Model: "scripted/script", Text: `#script {"replies":[{"toolCalls":[{"name":"read"},{"name":"exec"}]},{"text":"gave up"}]}`},
			"", 5, "gave up", "stop"},
		{"unknown model", events.Inbound{Model: "nowhere/model", Text: "hi"}, "model_not_found", 1, "", ""},
		{"the same failing call again and again is a tool loop",
			events.Inbound{Model: "scripted/script", Text: `#script {"replies":[{"toolCalls":[{"name":"again"}]}]}`},
			KindToolLoop, 1 + 2*3, "", "toolUse"},
		{"a tool result no call waits for is refused",
			events.Inbound{Model: "scripted/echo", ToolResults: []events.ToolResult{{ToolCallID: "call_x", Text: "42"}}},
			events.KindInvalidInput, 0, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The default model is the requested one: no fallback to another.
			def := tt.in.Model
			if def == "" || strings.HasPrefix(def, "nowhere/") {
				def = "scripted/script"
			}
			if strings.HasPrefix(tt.in.Model, "nowhere/") {
				def = "nowhere/else"
			}
			s := &sink{}
			out, err := newRunner(t, def).Run(t.Context(), Input{Inbound: &tt.in}, s)
			if err != nil {
				t.Fatal(err)
			}
			// Exactly one end or error event per run, the lane's: the
			// runner publishes none of its own, whatever the outcome.
			if got := laneOwned(s); len(got) > 0 {
				t.Fatalf("the runner published the lane's lifecycle events %v", got)
			}
			res := out.Result
			if (res.Meta.Error == nil) != (tt.kind == "") || (res.Meta.Error != nil && res.Meta.Error.Kind != tt.kind) {
				t.Fatalf("error = %+v, want kind %q", res.Meta.Error, tt.kind)
			}
			if len(out.Entries) != tt.entries {
				t.Fatalf("%d entries, want %d", len(out.Entries), tt.entries)
			}
			if tt.wantText != "" && res.Payloads[0].Text != tt.wantText {
				t.Fatalf("payloads = %+v", res.Payloads)
			}
			if tt.kind != "" && (len(res.Payloads) == 0 || !res.Payloads[len(res.Payloads)-1].IsError) {
				t.Fatalf("error run without an error payload: %+v", res.Payloads)
			}
			if res.Meta.StopReason != tt.stopReson {
				t.Fatalf("stopReason = %q, want %q", res.Meta.StopReason, tt.stopReson)
			}
		})
	}
}

func TestRateLimitUserText(t *testing.T) {
	t.Parallel()
	in := events.Inbound{Model: "scripted/script", Text: `#script {"replies":[{"error":{"status":429,"message":"429 rate limit exceeded"}}]}`}
	out, err := newRunner(t, "scripted/script").Run(t.Context(), Input{Inbound: &in}, &sink{})
	if err != nil {
		t.Fatal(err)
	}
	// The user sees the reference's friendly rate-limit text, not the raw error.
	p := out.Result.Payloads[0]
	if !p.IsError || p.Text == "429 rate limit exceeded" || !strings.Contains(strings.ToLower(p.Text), "rate") {
		t.Fatalf("payload = %+v", p)
	}
}

func TestCancelledTurnIsRetried(t *testing.T) {
	t.Parallel()
	r, _ := New(Config{Resolver: resolver{scripted.New(scripted.Config{Delay: time.Second})}})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := r.Run(ctx, Input{Inbound: &events.Inbound{Text: "slow"}}, &sink{}); err == nil {
		t.Fatal("a cancelled turn must return an error so the lane retries it")
	}
}

// TestSteeredMessagesJoinTheTurn: what Steer returns at a boundary becomes
// a user message of this turn, and the model is called again to answer it.
func TestSteeredMessagesJoinTheTurn(t *testing.T) {
	t.Parallel()
	polls := 0
	steer := func(context.Context) []*events.Inbound {
		polls++
		if polls == 1 {
			return []*events.Inbound{{Text: "actually, this"}}
		}
		return nil
	}
	out, err := newRunner(t).Run(t.Context(), Input{Inbound: &events.Inbound{Text: "first"}, Steer: steer}, &sink{})
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, e := range out.Entries {
		texts = append(texts, e.Message.Content.Text())
	}
	if strings.Join(texts, "|") != "first|echo: first|actually, this|echo: actually, this" || polls != 2 {
		t.Fatalf("entries %q after %d polls", texts, polls)
	}
	// As in the reference, every assistant text of the run is a payload.
	if len(out.Result.Payloads) != 2 || out.Result.Payloads[1].Text != "echo: actually, this" {
		t.Fatalf("payload = %+v", out.Result.Payloads)
	}
}

// TestCompactReportsItsEnding: /compact's outcome is reported, not
// published: a worker without a compactor ends the turn with an error
// result and no lifecycle event of the runner's (the lane makes the error
// event from the result).
func TestCompactReportsItsEnding(t *testing.T) {
	t.Parallel()
	s := &sink{}
	out, err := newRunner(t, "scripted/echo").Compact(t.Context(), Input{Inbound: &events.Inbound{Text: "/compact"}}, "", s)
	if err != nil {
		t.Fatal(err)
	}
	if e := out.Result.Meta.Error; e == nil || e.Kind != "compaction_failure" || out.Result.ErrorText() != "compaction is off on this worker" || out.EndText != "" {
		t.Fatalf("result %+v, end text %q", out.Result, out.EndText)
	}
	if got := laneOwned(s); len(got) > 0 {
		t.Fatalf("the runner published the lane's lifecycle events %v", got)
	}
}
