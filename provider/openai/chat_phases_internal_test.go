package openai

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/provider"
)

// TestChatOptions: the thinking level goes out in each server's own form,
// and the token limit in the field it reads.
func TestChatOptions(t *testing.T) {
	t.Parallel()
	reasoning := provider.Model{ID: "m", Reasoning: true, MaxTokens: 1000}
	cases := []struct {
		name  string
		c     compat
		model provider.Model
		level provider.ThinkingLevel
		want  string // the body's JSON
	}{
		{"openai effort", compat{thinking: thinkOpenAI, maxTokensField: "max_completion_tokens"}, reasoning, provider.ThinkingHigh,
			`"reasoning_effort":"high"`},
		{"openrouter reasoning", compat{thinking: thinkOpenRouter}, reasoning, provider.ThinkingLow,
			`"reasoning":{"effort":"low"}`},
		{"zai thinking on", compat{thinking: thinkZAI}, reasoning, provider.ThinkingLow, `"thinking":{"type":"enabled"}`},
		{"zai thinking off for a reasoning model", compat{thinking: thinkZAI}, reasoning, provider.ThinkingOff, `"thinking":{"type":"disabled"}`},
		{"max_tokens", compat{thinking: thinkNone, maxTokensField: "max_tokens"}, reasoning, "", `"max_tokens":`},
		{"max_completion_tokens", compat{thinking: thinkNone, maxTokensField: "max_completion_tokens"}, reasoning, "", `"max_completion_tokens":`},
		{"usage in the stream", compat{usageInStreaming: true}, reasoning, "", `"stream_options":{"include_usage":true}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			body := chatOptions(&provider.Request{Model: tc.model, Thinking: tc.level}, tc.c)
			data, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			if !json.Valid(data) || !strings.Contains(string(data), tc.want) {
				t.Errorf("body %s; want %s in it", data, tc.want)
			}
		})
	}
}

// TestChatTools: tools go out with an empty-object schema when they have
// none and strict false where the server wants it; without tools, a
// history with tool calls gets an empty list and any other none.
func TestChatTools(t *testing.T) {
	t.Parallel()
	tools := []provider.Tool{{Name: "read", Description: "reads"}}
	cases := []struct {
		name         string
		ts           []provider.Tool
		c            compat
		hadToolCalls bool
		want         string // JSON of the tools, "null" for none
	}{
		{"tools", tools, compat{}, false, `[{"type":"function","function":{"name":"read","description":"reads","parameters":{"properties":{},"type":"object"}}}]`},
		{"strict false", tools, compat{strict: true}, false, `[{"type":"function","function":{"name":"read","description":"reads","parameters":{"properties":{},"type":"object"},"strict":false}}]`},
		{"history with tool calls", nil, compat{}, true, `[]`},
		{"none", nil, compat{}, false, `null`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			data, err := json.Marshal(chatTools(tc.ts, tc.c, tc.hadToolCalls))
			if err != nil {
				t.Fatal(err)
			}
			if string(data) != tc.want {
				t.Errorf("tools %s; want %s", data, tc.want)
			}
		})
	}
}

// TestSystemMessage: a reasoning model's system prompt is a developer
// message where the server takes one.
func TestSystemMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		reasoning, developer bool
		want                 string
	}{
		{false, true, "system"},
		{true, false, "system"},
		{true, true, "developer"},
	} {
		if got := systemMessage(provider.Model{Reasoning: tc.reasoning}, compat{developerRole: tc.developer}, "be brief"); got.Role != tc.want || got.Content != "be brief" {
			t.Errorf("reasoning %v developer %v: %+v; want role %s", tc.reasoning, tc.developer, got, tc.want)
		}
	}
}
