package transform

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// TestMessagesMatchesReference checks the one-pass, copy-on-write Messages
// against the two-pass version it replaced (refMessages, kept here as the
// reference) on random conversations of both models' messages, and that
// the input is never modified.
func TestMessagesMatchesReference(t *testing.T) {
	t.Parallel()
	target := provider.Model{ID: "m1", Provider: "acme", API: "openai-completions"}
	norm := func(id string) string { return SanitizeID(id, 16) }
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		msgs := randomConversation(rng, 1+rng.IntN(30))
		before := cloneAll(msgs)
		for _, n := range []func(string) string{nil, norm} {
			want := refMessages(cloneAll(msgs), target, n)
			got := Messages(msgs, target, n)
			// An empty block list and none are the same content.
			if !reflect.DeepEqual(emptyBlocksNil(got), emptyBlocksNil(want)) {
				for k := range max(len(got), len(want)) {
					if k >= len(got) || k >= len(want) || !reflect.DeepEqual(emptyBlocksNil(got[k:k+1]), emptyBlocksNil(want[k:k+1])) {
						t.Fatalf("round %d: message %d of %d/%d differs:\n%#v\n%#v", round, k, len(got), len(want), got[min(k, len(got)-1)], want[min(k, len(want)-1)])
					}
				}
			}
			if !reflect.DeepEqual(msgs, before) {
				t.Fatalf("round %d: input modified", round)
			}
		}
	}
}

func emptyBlocksNil(msgs []message.Message) []message.Message {
	out := slices.Clone(msgs)
	for i := range out {
		if len(out[i].Content.Blocks) == 0 {
			out[i].Content.Blocks = nil
		}
	}
	return out
}

func cloneAll(msgs []message.Message) []message.Message {
	out := make([]message.Message, len(msgs))
	for i, m := range msgs {
		out[i] = m.Clone()
	}
	return out
}

func randomConversation(rng *rand.Rand, n int) []message.Message {
	var out []message.Message
	var calls []string
	for i := range n {
		switch rng.IntN(4) {
		case 0:
			out = append(out, message.User(fmt.Sprintf("u%d", i), int64(i)))
		case 1, 2:
			m := message.Message{Role: message.RoleAssistant, Timestamp: int64(i), StopReason: message.StopStop}
			if rng.IntN(2) == 0 {
				m.Provider, m.API, m.Model = "acme", "openai-completions", "m1"
			} else {
				m.Provider, m.API, m.Model = "other", "openai-responses", "m2"
			}
			switch rng.IntN(6) {
			case 0:
				m.StopReason = message.StopError
			case 1:
				m.StopReason = message.StopAborted
			}
			var blocks []message.Block
			calls = calls[:0]
			for j := range rng.IntN(5) {
				switch rng.IntN(7) {
				case 0:
					blocks = append(blocks, message.Text("t"))
				case 1:
					blocks = append(blocks, message.Block{Type: message.BlockText, Text: "s", TextSignature: "sig"})
				case 2:
					blocks = append(blocks, message.Thinking(strings.Repeat(" ", rng.IntN(2))+"th", ""))
				case 3:
					blocks = append(blocks, message.Thinking(" ", []string{"", "sig"}[rng.IntN(2)]))
				case 4:
					blocks = append(blocks, message.Block{Type: message.BlockThinking, Thinking: "r", ThinkingSignature: "enc", Redacted: true})
				default:
					id := fmt.Sprintf("call_%d_%d|fc", i, j)
					if rng.IntN(2) == 0 {
						id = fmt.Sprintf("c%d", rng.IntN(3)) // ids reused across messages
					}
					b := message.ToolCall(id, "read", map[string]any{"p": i})
					if rng.IntN(2) == 0 {
						b.ThoughtSignature = "ts"
					}
					blocks = append(blocks, b)
					calls = append(calls, id)
				}
			}
			if len(blocks) > 0 || rng.IntN(2) == 0 {
				m.Content = message.BlocksOf(blocks...)
			}
			out = append(out, m)
		default:
			id := "nope"
			if len(calls) > 0 {
				id = calls[rng.IntN(len(calls))]
			}
			out = append(out, message.Message{Role: message.RoleToolResult, ToolCallID: id, ToolName: "read",
				Content: message.BlocksOf(message.Text("ok")), Timestamp: int64(i)})
		}
	}
	return out
}

// refMessages is Messages as it was before the one-pass rewrite: the
// reference TestMessagesMatchesReference compares against.
func refMessages(msgs []message.Message, target provider.Model, normalizeID func(string) string) []message.Message {
	idMap := map[string]string{}
	pass1 := make([]message.Message, 0, len(msgs))
	for i := range msgs {
		m := msgs[i]
		switch m.Role {
		case message.RoleAssistant:
			same := SameModel(&m, target)
			blocks := make([]message.Block, 0, len(m.Content.Blocks))
			for _, b := range m.Content.Blocks {
				switch b.Type {
				case message.BlockThinking:
					switch {
					case b.Redacted:
						if same {
							blocks = append(blocks, b)
						}
					case same && b.ThinkingSignature != "":
						blocks = append(blocks, b)
					case strings.TrimSpace(b.Thinking) == "":
					case same:
						blocks = append(blocks, b)
					default:
						blocks = append(blocks, message.Text(b.Thinking))
					}
				case message.BlockText:
					if !same {
						b.TextSignature = ""
					}
					blocks = append(blocks, b)
				case message.BlockToolCall:
					if !same {
						b = b.Clone()
						b.ThoughtSignature = ""
						if normalizeID != nil {
							if n := normalizeID(b.ID); n != b.ID {
								idMap[b.ID] = n
								b.ID = n
							}
						}
					}
					blocks = append(blocks, b)
				default:
					blocks = append(blocks, b)
				}
			}
			m.Content = message.BlocksOf(blocks...)
		case message.RoleToolResult:
			if n, ok := idMap[m.ToolCallID]; ok {
				m.ToolCallID = n
			}
		}
		pass1 = append(pass1, m)
	}

	out := make([]message.Message, 0, len(pass1))
	var pending []message.Block // tool calls of the last assistant still waiting
	answered := map[string]bool{}
	flush := func() {
		for _, c := range pending {
			if !answered[c.ID] {
				out = append(out, message.Message{
					Role: message.RoleToolResult, ToolCallID: c.ID, ToolName: c.Name,
					Content: message.BlocksOf(message.Text(NoResultText)), IsError: true,
					Timestamp: lastTimestamp(out),
				})
			}
		}
		pending, answered = nil, map[string]bool{}
	}
	for _, m := range pass1 {
		switch m.Role {
		case message.RoleAssistant:
			if m.StopReason == message.StopError || m.StopReason == message.StopAborted {
				continue
			}
			flush()
			pending = m.ToolCalls()
		case message.RoleToolResult:
			answered[m.ToolCallID] = true
		case message.RoleUser:
			flush()
		}
		out = append(out, m)
	}
	return out
}

// TestMessagesUnchangedShared returns a conversation that needs no change
// as it is: a long session of one model costs no copy per turn.
func TestMessagesUnchangedShared(t *testing.T) {
	t.Parallel()
	target := provider.Model{ID: "m1", Provider: "acme", API: "openai-completions"}
	msgs := []message.Message{message.User("hi", 1),
		{Role: message.RoleAssistant, Provider: "acme", API: "openai-completions", Model: "m1", StopReason: message.StopToolUse,
			Content: message.BlocksOf(message.Text("x"), message.ToolCall("c1", "read", nil))},
		{Role: message.RoleToolResult, ToolCallID: "c1", Content: message.BlocksOf(message.Text("ok"))},
		{Role: message.RoleAssistant, Provider: "acme", API: "openai-completions", Model: "m1", StopReason: message.StopStop,
			Content: message.BlocksOf(message.Text("done"))}}
	if got := Messages(msgs, target, nil); &got[0] != &msgs[0] || len(got) != len(msgs) {
		t.Error("an unchanged conversation was copied")
	}
	other := provider.Model{ID: "m2", Provider: "acme", API: "openai-completions"}
	if got := Messages(msgs, other, func(string) string { return "x" }); &got[0] == &msgs[0] || got[1].Content.Blocks[1].ID != "x" || msgs[1].Content.Blocks[1].ID != "c1" {
		t.Error("a changed conversation was not copied")
	}
}

func lastTimestamp(ms []message.Message) int64 {
	if len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Timestamp
}
