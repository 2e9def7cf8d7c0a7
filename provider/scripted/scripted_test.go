package scripted

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

func stream(t *testing.T, p *Provider, ctx context.Context, model string, msgs ...message.Message) (message.Message, []provider.Event, error) {
	t.Helper()
	var evs []provider.Event
	out, err := p.Stream(ctx, &provider.Request{Model: Model(model), Messages: msgs}, func(e provider.Event) { evs = append(evs, e) })
	return out, evs, err
}

func deltas(evs []provider.Event) []string {
	var d []string
	for _, e := range evs {
		if e.Type == provider.EventTextDelta {
			d = append(d, e.Delta)
		}
	}
	return d
}

func TestEcho(t *testing.T) {
	t.Parallel()
	out, evs, err := stream(t, New(Config{}), t.Context(), "echo", message.User("hello big world", 1))
	if err != nil {
		t.Fatal(err)
	}
	if got := out.Content.Text(); got != "echo: hello big world" {
		t.Fatalf("text = %q", got)
	}
	if d := deltas(evs); strings.Join(d, "|") != "echo: |hello |big |world" {
		t.Fatalf("deltas = %q", d)
	}
	if evs[0].Type != provider.EventStart || evs[len(evs)-1].Type != provider.EventDone || out.StopReason != message.StopStop {
		t.Fatalf("events %v, stop %v", evs, out.StopReason)
	}
	if out.Usage == nil || out.Usage.Input == 0 || out.Provider != ProviderName || out.Model != "echo" {
		t.Fatalf("meta = %+v", out)
	}
}

func TestScriptPlaysRepliesInOrder(t *testing.T) {
	t.Parallel()
	p := New(Config{})
	user := message.User(`#script {"replies":[{"thinking":"plan","toolCalls":[{"id":"c1","name":"read","arguments":{"path":"a"}}]},{"text":"done","chunks":2}]}`, 1)
	first, evs, err := stream(t, p, t.Context(), "script", user)
	if err != nil {
		t.Fatal(err)
	}
	calls := first.ToolCalls()
	if first.StopReason != message.StopToolUse || len(calls) != 1 || calls[0].Arguments["path"] != "a" || first.Content.Blocks[0].Type != message.BlockThinking {
		t.Fatalf("first reply = %+v", first)
	}
	var sawEnd bool
	for _, e := range evs {
		sawEnd = sawEnd || (e.Type == provider.EventToolCallEnd && e.ToolCall.ID == "c1")
	}
	if !sawEnd {
		t.Fatal("no toolcall_end event")
	}
	result := message.Message{Role: message.RoleToolResult, ToolCallID: "c1", Content: message.BlocksOf(message.Text("x"))}
	second, evs, err := stream(t, p, t.Context(), "script", user, first, result)
	if err != nil || second.Content.Text() != "done" || len(deltas(evs)) != 2 {
		t.Fatalf("second reply = %+v, %v", second, err)
	}
}

func TestScriptedErrors(t *testing.T) {
	t.Parallel()
	p := New(Config{Scripts: map[string]Script{"busy": {Replies: []Reply{{Text: "partial", Error: &ScriptedError{Status: 429, Message: "slow down", RetryAfterMs: 1500}}}}}})
	tests := []struct {
		name, model, text string
		reason            provider.Reason
	}{
		{"named script error with retry-after", "busy", "x", provider.ReasonRateLimit},
		{"unknown scripted model", "nope", "x", provider.ReasonModelNotFound},
		{"inline script that does not parse", "script", "#script {", provider.ReasonFormat},
		{"no script prefix", "script", "hello", provider.ReasonFormat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, evs, err := stream(t, p, t.Context(), tt.model, message.User(tt.text, 1))
			var pe *provider.Error
			if !errors.As(err, &pe) || pe.Reason != tt.reason {
				t.Fatalf("err = %v, want reason %s", err, tt.reason)
			}
			if out.StopReason != message.StopError || out.ErrorMessage == "" || evs[len(evs)-1].Type != provider.EventError {
				t.Fatalf("message = %+v", out)
			}
			if tt.model == "busy" && (pe.RetryAfter != 1500*time.Millisecond || out.Content.Text() != "partial") {
				t.Fatalf("retry-after %v, partial %q", pe.RetryAfter, out.Content.Text())
			}
		})
	}
}

func TestAbortMidStream(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	p := New(Config{Delay: 50 * time.Millisecond})
	var out message.Message
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		out, err = p.Stream(ctx, &provider.Request{Model: Model("echo"), Messages: []message.Message{message.User("a b c d e f g", 1)}}, func(e provider.Event) {
			if e.Type == provider.EventTextDelta {
				cancel()
			}
		})
	}()
	<-done
	if provider.ReasonOf(err) != provider.ReasonAborted || out.StopReason != message.StopAborted {
		t.Fatalf("err = %v, stop = %v", err, out.StopReason)
	}
	if txt := out.Content.Text(); txt == "" || txt == "echo: a b c d e f g" {
		t.Fatalf("partial text = %q; want what streamed before the abort", txt)
	}
}
