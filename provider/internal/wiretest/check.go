package wiretest

import (
	"errors"
	"reflect"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// WireUsage converts an assembled usage back to the wire's counting for
// comparison with Expect.Usage. inputIncludesCache says whether the API's
// input count includes cache reads (and writes).
func WireUsage(u *message.Usage, inputIncludesCache bool) Usage {
	if u == nil {
		return Usage{}
	}
	w := Usage{Input: u.Input, Output: u.Output, CacheRead: u.CacheRead, CacheWrite: u.CacheWrite}
	if inputIncludesCache {
		w.Input += u.CacheRead + u.CacheWrite
	}
	return w
}

// Check compares what an adapter assembled (msg, err) with c.Expect. usage
// converts the assembled usage to wire counting; output may differ from the
// wire by the reasoning count for APIs that count reasoning separately.
func Check(t *testing.T, c Case, msg message.Message, err error, usage func(*message.Usage) Usage) {
	t.Helper()
	e := c.Expect
	var text, thinking, sig string
	hasThinking := false
	var calls []message.Block
	for _, b := range msg.Content.Blocks {
		switch b.Type {
		case message.BlockText:
			text += b.Text
		case message.BlockThinking:
			if thinking != "" && b.Thinking != "" {
				thinking += "\n\n"
			}
			thinking += b.Thinking
			sig += b.ThinkingSignature
			hasThinking = true
		case message.BlockToolCall:
			calls = append(calls, b)
		}
	}
	if text != e.Text {
		t.Errorf("text = %q, want %q", text, e.Text)
	}
	if e.Thinking == nil {
		if hasThinking && thinking != "" {
			t.Errorf("thinking = %q, want none", thinking)
		}
	} else if thinking != *e.Thinking {
		t.Errorf("thinking = %q, want %q", thinking, *e.Thinking)
	}
	if e.ThinkingSignature != nil && sig != *e.ThinkingSignature {
		t.Errorf("thinking signature = %q, want %q", sig, *e.ThinkingSignature)
	}
	if len(calls) != len(e.ToolCalls) {
		t.Errorf("got %d tool calls, want %d: %+v", len(calls), len(e.ToolCalls), calls)
	} else {
		for i, w := range e.ToolCalls {
			g := calls[i]
			if w.ID != nil && g.ID != *w.ID {
				t.Errorf("tool call %d id = %q, want %q", i, g.ID, *w.ID)
			}
			if g.ID == "" {
				t.Errorf("tool call %d has no id", i)
			}
			if g.Name != w.Name {
				t.Errorf("tool call %d name = %q, want %q", i, g.Name, w.Name)
			}
			want := w.Arguments
			if want == nil {
				want = map[string]any{}
			}
			if !reflect.DeepEqual(g.Arguments, want) {
				t.Errorf("tool call %d arguments = %v, want %v", i, g.Arguments, want)
			}
		}
	}
	if e.Usage != nil {
		got := usage(msg.Usage)
		w := *e.Usage
		outOK := got.Output == w.Output || w.Reasoning != nil && got.Output == w.Output+*w.Reasoning
		if got.Input != w.Input || !outOK || got.CacheRead != w.CacheRead || got.CacheWrite != w.CacheWrite {
			t.Errorf("usage = %+v, want %+v", got, w)
		}
		if msg.Usage != nil && msg.Usage.TotalTokens == 0 && w.Input+w.Output > 0 {
			t.Errorf("usage has no total")
		}
	}
	if string(msg.StopReason) != e.StopReason {
		t.Errorf("stopReason = %q, want %q (err %v)", msg.StopReason, e.StopReason, err)
	}
	if e.ErrorClass == nil && e.StopReason != "error" {
		if err != nil {
			t.Errorf("unexpected error %v", err)
		}
		return
	}
	var pe *provider.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *provider.Error", err, err)
	}
	if msg.ErrorMessage == "" {
		t.Errorf("error message not set")
	}
	if e.ErrorClass != nil {
		ok := string(pe.Reason) == *e.ErrorClass
		for _, a := range c.Alternatives {
			if a != nil && string(pe.Reason) == *a {
				ok = true
			}
		}
		if !ok {
			t.Errorf("reason = %s, want %s (alternatives %v): %v", pe.Reason, *e.ErrorClass, c.Alternatives, pe)
		}
	}
	if e.ErrorMessage != "" && pe.Message != e.ErrorMessage {
		t.Errorf("error message = %q, want %q", pe.Message, e.ErrorMessage)
	}
	if c.Status >= 400 && pe.Status != c.Status {
		t.Errorf("status = %d, want %d", pe.Status, c.Status)
	}
}
