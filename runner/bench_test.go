package runner

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/compaction"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

type nopSink struct{}

func (nopSink) Emit(string, events.EventData) {}

// history200 is a 200-message session: user, assistant with a tool call,
// tool result, assistant answer, repeated.
func history200() []message.Entry {
	b := &builder{now: time.Now}
	for i := 0; len(b.entries) < 200; i++ {
		b.add(message.User(fmt.Sprintf("question %d about the code in main.go", i), 1))
		b.add(message.Message{Role: message.RoleAssistant, StopReason: message.StopToolUse, Provider: "acme", Model: "m1", API: "openai-completions",
			Content: message.BlocksOf(message.Text("Let me look."), message.ToolCall(fmt.Sprintf("call_%d", i), "read", map[string]any{"path": "main.go"})),
			Usage:   &message.Usage{Input: 1000, Output: 50, TotalTokens: 1050}})
		b.add(message.Message{Role: message.RoleToolResult, ToolCallID: fmt.Sprintf("call_%d", i), ToolName: "read",
			Content: message.BlocksOf(message.Text("package main\n\nfunc main() {}\n"))})
		b.add(message.Message{Role: message.RoleAssistant, StopReason: message.StopStop, Provider: "acme", Model: "m1", API: "openai-completions",
			Content: message.BlocksOf(message.Text("The file defines an empty main function.")), Usage: &message.Usage{Input: 1100, Output: 20, TotalTokens: 1120}})
	}
	return b.entries
}

// BenchmarkRunOverhead is the loop's own cost per attempt for a 200-message
// history: everything but provider I/O and NATS (the provider answers at
// once). Target ≤ 100 µs p50 (issue 4). The baseline is a provider call
// alone, measured in the same run.
func BenchmarkRunOverhead(b *testing.B) {
	answer := provider.Func(func(_ context.Context, req *provider.Request, emit func(provider.Event)) (message.Message, error) {
		out := message.Message{Role: message.RoleAssistant, Provider: "acme", Model: req.Model.ID, API: req.Model.API, StopReason: message.StopStop,
			Content: message.BlocksOf(message.Text("ok")), Usage: &message.Usage{Input: 10, Output: 1, TotalTokens: 11}}
		emit(provider.Event{Type: provider.EventStart})
		emit(provider.Event{Type: provider.EventTextDelta, Delta: "ok"})
		emit(provider.Event{Type: provider.EventDone, Message: &out})
		return out, nil
	})
	hist := history200()
	auth := NewMemoryAuth(authprofile.Store{Usage: map[string]authprofile.State{}, Profiles: []authprofile.Profile{
		{ID: "acme:a", Type: authprofile.TypeAPIKey, Provider: "acme", Key: "sk-a"}}}, authprofile.Config{Fleet: authprofile.FleetDefaults()}, nil)
	// As a fleet member runs: auth profiles and pi compaction's threshold
	// check on every attempt.
	r, err := New(Config{DefaultModel: "acme/m1", Resolver: multiResolver{acme: answer}, Auth: auth,
		Compactor: PiCompactor{Settings: compaction.DefaultSettings()}})
	if err != nil {
		b.Fatal(err)
	}
	in := &events.Inbound{Text: "and now?"}
	b.Run("baseline=provider-call", func(b *testing.B) {
		req := &provider.Request{Model: provider.Model{ID: "m1", API: "openai-completions"}}
		for b.Loop() {
			_, _ = answer.Stream(context.Background(), req, func(provider.Event) {})
		}
	})
	b.Run("run/history=200", func(b *testing.B) {
		b.ReportAllocs()
		lat := make([]time.Duration, 0, 1024)
		for b.Loop() {
			t0 := time.Now()
			if _, err := r.Run(context.Background(), Input{RunID: "r", SessionID: "s", Inbound: in, History: hist}, nopSink{}); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		reportP50(b, lat)
	})
}

func reportP50(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	s := make([]time.Duration, len(lat))
	copy(s, lat)
	slices.Sort(s)
	b.ReportMetric(float64(s[len(s)/2].Microseconds()), "p50-µs")
}
