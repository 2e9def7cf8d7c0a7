package catalog

import "strings"

// Compat is what an OpenAI-compatible Chat Completions endpoint accepts
// and how it answers: one provider's quirks, as pi-ai's compat fields
// name them. The zero value is a generic server's (usage asked for with
// stream_options, max_tokens, reasoning_effort, system role, no strict
// tools, tool call ids as they are).
type Compat struct {
	// OpenAI is api.openai.com itself (store:false is sent).
	OpenAI bool
	// DeveloperRole sends a reasoning model's system prompt as a
	// "developer" message (supportsDeveloperRole).
	DeveloperRole bool
	// NoStreamOptions leaves stream_options out: the server sends usage
	// unasked, or rejects the field (!supportsUsageInStreaming).
	NoStreamOptions bool
	// MaxTokensField is "max_completion_tokens" or "" for max_tokens.
	MaxTokensField string
	// StrictTools sends tools' "strict" (supportsStrictMode).
	StrictTools bool
	// ToolResultName puts the tool's name on its result message
	// (requiresToolResultName).
	ToolResultName bool
	// AssistantAfterToolResult puts an assistant turn between tool results
	// and a user turn (requiresAssistantAfterToolResult).
	AssistantAfterToolResult bool
	// Thinking is how a thinking level is sent (thinkingFormat): "" or
	// ThinkingOpenAI reasoning_effort, ThinkingOpenRouter reasoning:
	// {effort}, ThinkingZAI thinking: {type}, ThinkingNone nothing (the
	// model id decides).
	Thinking string
	// ToolCallIDs is how another model's tool call ids are rewritten:
	// IDsOpenAI (at most 40 of [A-Za-z0-9_-]), IDsMistral (exactly nine
	// alphanumerics), "" as they are (requiresMistralToolIds).
	ToolCallIDs string
}

// Thinking formats (Compat.Thinking).
const (
	ThinkingOpenAI     = "openai"
	ThinkingOpenRouter = "openrouter"
	ThinkingZAI        = "zai"
	ThinkingNone       = "none"
)

// Tool call id rules (Compat.ToolCallIDs).
const (
	IDsOpenAI  = "openai"
	IDsMistral = "mistral"
)

// preset is one OpenAI-compatible provider's quirks: its provider id, the
// hosts that name it behind another id (a models file's provider with the
// provider's URL), and the quirks, each the provider's documented
// behaviour (provider/openai's tests pin each against a server that has
// it).
type preset struct {
	provider string
	hosts    []string
	compat   Compat
}

// presets are the quirks of the providers the catalog knows; the first
// match wins, by provider id, then by host.
var presets = []preset{
	// OpenAI: max_completion_tokens, developer role, strict tools, store.
	{"openai", []string{"api.openai.com"}, Compat{OpenAI: true, DeveloperRole: true, StrictTools: true, MaxTokensField: "max_completion_tokens", ToolCallIDs: IDsOpenAI}},
	// Azure OpenAI: OpenAI's models and rules, without store.
	{"azure", []string{".openai.azure.com", ".services.ai.azure.com", ".cognitiveservices.azure.com"},
		Compat{DeveloperRole: true, StrictTools: true, MaxTokensField: "max_completion_tokens", ToolCallIDs: IDsOpenAI}},
	// OpenRouter: reasoning as {effort}; its anthropic/* models take
	// cache_control.
	{"openrouter", []string{"openrouter.ai"}, Compat{Thinking: ThinkingOpenRouter}},
	// Mistral rejects unknown fields (stream_options) and sends usage
	// unasked; tool results carry their name; a user turn may not follow
	// a tool result; tool call ids are nine alphanumerics.
	{"mistral", []string{"mistral.ai"}, Compat{NoStreamOptions: true, ToolResultName: true, AssistantAfterToolResult: true, ToolCallIDs: IDsMistral}},
	// Groq: max_completion_tokens (max_tokens is deprecated); the last
	// chunk's usage is (also) in x_groq.usage.
	{"groq", []string{"api.groq.com"}, Compat{MaxTokensField: "max_completion_tokens"}},
	// xAI: Grok 4 rejects reasoning_effort (it always reasons) and counts
	// reasoning outside completion_tokens.
	{"xai", []string{"api.x.ai"}, Compat{Thinking: ThinkingNone}},
	// DeepSeek: the model id decides reasoning (deepseek-reasoner), which
	// streams as reasoning_content; cache hits are prompt_cache_hit_tokens.
	{"deepseek", []string{"api.deepseek.com"}, Compat{Thinking: ThinkingNone}},
	// Together AI and Fireworks: max_tokens, reasoning_effort.
	{"together", []string{"api.together.xyz", "api.together.ai"}, Compat{}},
	{"fireworks", []string{"api.fireworks.ai"}, Compat{}},
	// Cerebras: max_completion_tokens, strict tools.
	{"cerebras", []string{"api.cerebras.ai"}, Compat{MaxTokensField: "max_completion_tokens", StrictTools: true}},
	// Moonshot (Kimi): the model id decides reasoning (kimi-k2-thinking,
	// reasoning_content); usage comes in the last choice.
	{"moonshot", []string{"api.moonshot.ai", "api.moonshot.cn"}, Compat{Thinking: ThinkingNone}},
	// Z.ai (GLM): thinking: {type: enabled|disabled} (GLM 4.7 and later
	// think unless told not to); max_tokens only; no stream_options.
	{"zai", []string{"z.ai", "bigmodel.cn"}, Compat{NoStreamOptions: true, Thinking: ThinkingZAI}},
}

// CompatOf returns the quirks of a Chat Completions endpoint: those of
// provider's preset, else of the preset whose host baseURL names, else
// the zero Compat (a generic server); ok is false for the last. A model
// without a base URL is OpenAI's.
func CompatOf(provider, baseURL string) (c Compat, ok bool) {
	p, u := strings.ToLower(provider), strings.ToLower(baseURL)
	for _, pr := range presets {
		if pr.provider == p {
			return pr.compat, true
		}
	}
	if u == "" {
		return presets[0].compat, true
	}
	for _, pr := range presets {
		for _, h := range pr.hosts {
			if strings.Contains(u, h) {
				return pr.compat, true
			}
		}
	}
	return Compat{}, false
}
