package openai

import (
	"cmp"
	"crypto/sha256"
	"net/url"
	"strings"

	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/catalog"
	"github.com/lanefleet/lanefleet/provider/transform"
)

// Thinking formats of OpenAI-compatible servers (catalog.Compat.Thinking).
const (
	thinkOpenAI     = catalog.ThinkingOpenAI     // reasoning_effort
	thinkOpenRouter = catalog.ThinkingOpenRouter // reasoning: {effort}
	thinkZAI        = catalog.ThinkingZAI        // thinking: {type: enabled|disabled}
	thinkNone       = catalog.ThinkingNone       // no reasoning parameter: the model decides
)

// compat is what a Chat Completions endpoint accepts, as the request
// builder reads it: the catalog's quirks of its provider (catalog.CompatOf,
// the one table of them) with what the model id adds.
type compat struct {
	openai             bool   // api.openai.com itself
	store              bool   // send store:false
	developerRole      bool   // system prompt as "developer" on reasoning models
	usageInStreaming   bool   // stream_options.include_usage
	maxTokensField     string // max_completion_tokens or max_tokens
	strict             bool   // tools accept "strict"
	toolResultName     bool   // tool messages carry "name"
	assistantAfterTool bool   // insert an assistant turn between tool results and a user turn
	thinking           string
	idMode             string // "openai" (cap 40), "mistral" (9 alphanumerics), ""
	anthropicCache     bool   // OpenRouter anthropic/* prompt caching
}

// detectCompat returns the quirks of m's endpoint (catalog.CompatOf);
// OpenRouter's anthropic/* models take cache_control, and Mistral-family
// models need Mistral's tool call ids wherever they run.
func detectCompat(m provider.Model) compat {
	k, _ := catalog.CompatOf(m.Provider, m.BaseURL)
	c := compat{
		openai: k.OpenAI, store: k.OpenAI, developerRole: k.DeveloperRole, usageInStreaming: !k.NoStreamOptions,
		maxTokensField: cmp.Or(k.MaxTokensField, "max_tokens"), strict: k.StrictTools, toolResultName: k.ToolResultName,
		assistantAfterTool: k.AssistantAfterToolResult, thinking: cmp.Or(k.Thinking, thinkOpenAI), idMode: k.ToolCallIDs,
	}
	id := strings.ToLower(m.ID)
	if c.thinking == thinkOpenRouter {
		c.anthropicCache = strings.HasPrefix(id, "anthropic/")
	}
	if c.idMode == "" && isMistralFamily(id) {
		c.idMode = catalog.IDsMistral
	}
	return c
}

// ollamaNumCtx is the context size to ask an Ollama endpoint for (runtime
// spec §4 step 6: options.num_ctx = the model's context window, else its max
// tokens, else 200 000), 0 for any other endpoint. Without it Ollama runs
// the model with its small default context and silently drops the start of
// a long session. An endpoint is Ollama's when the provider is "ollama",
// when it is the local default (loopback port 11434, any path), or when the
// provider id contains "ollama" and the URL is port 11434 with path / or
// /v1. (The reference names localhost only; 127.0.0.1 and ::1 are the same
// endpoint.)
func ollamaNumCtx(m provider.Model) int {
	if !isOllama(m) {
		return 0
	}
	switch {
	case m.ContextWindow > 0:
		return m.ContextWindow
	case m.MaxTokens > 0:
		return m.MaxTokens
	}
	return 200_000
}

func isOllama(m provider.Model) bool {
	p := strings.ToLower(strings.TrimSpace(m.Provider))
	if p == "ollama" {
		return true
	}
	u, err := url.Parse(m.BaseURL)
	if err != nil || u.Port() != "11434" {
		return false
	}
	switch strings.ToLower(u.Hostname()) {
	case "localhost", "127.0.0.1", "::1":
		return true
	}
	path := strings.TrimSuffix(u.Path, "/")
	return strings.Contains(p, "ollama") && (path == "" || path == "/v1")
}

func isMistralFamily(id string) bool {
	for _, s := range []string{"mistral", "devstral", "codestral", "magistral", "pixtral", "ministral"} {
		if strings.Contains(id, s) {
			return true
		}
	}
	return false
}

// normalizeID rewrites another model's tool call id for this endpoint:
// Responses-style "call|item" ids keep the call part; OpenAI caps ids at 40
// characters of [A-Za-z0-9_-]; Mistral-family models need exactly nine
// alphanumerics.
func (c compat) normalizeID(id string) string {
	if c.idMode == "mistral" {
		return strict9(id)
	}
	if before, _, ok := strings.Cut(id, "|"); ok {
		return transform.SanitizeID(before, 40)
	}
	if c.idMode == "openai" && len(id) > 40 {
		return transform.SanitizeID(id, 40)
	}
	return id
}

// strict9 keeps an id of exactly nine alphanumerics; any other id becomes
// nine alphanumerics derived from its SHA-256, so the same id always maps to
// the same value within and across requests.
func strict9(id string) string {
	alnum := make([]byte, 0, len(id))
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			alnum = append(alnum, c)
		}
	}
	if len(alnum) == 9 {
		return string(alnum)
	}
	const digits = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	sum := sha256.Sum256([]byte(id))
	out := make([]byte, 9)
	for i := range out {
		out[i] = digits[int(sum[i])%len(digits)]
	}
	return string(out)
}

// supportsXhigh reports whether a model accepts the xhigh effort.
func supportsXhigh(id string) bool {
	for _, s := range []string{"gpt-5.2", "gpt-5.3", "gpt-5.4", "opus-4-6", "opus-4.6"} {
		if strings.Contains(id, s) {
			return true
		}
	}
	return false
}

// effort maps a thinking level to a reasoning effort; "" means send none.
func effort(m provider.Model, level provider.ThinkingLevel) string {
	if !m.Reasoning || level == "" || level == provider.ThinkingOff {
		return ""
	}
	if level == provider.ThinkingXHigh && !supportsXhigh(m.ID) {
		return string(provider.ThinkingHigh)
	}
	return string(level)
}
