package sanitize

import (
	"strings"

	"github.com/lanefleet/lanefleet/ecmatext"
)

// Mode is how thoroughly assistant messages are sanitised.
type Mode string

// Sanitise modes.
const (
	// ModeImagesOnly only sanitises images.
	ModeImagesOnly Mode = "images-only"
	// ModeFull also strips thought signatures, removes blank text blocks,
	// drops emptied assistant messages and rewrites tool-call ids.
	ModeFull Mode = "full"
)

// IDMode is a tool-call id format a provider requires.
type IDMode string

// Tool-call id modes.
const (
	// IDStrict keeps only ASCII letters and digits (at most 40 in a
	// transcript).
	IDStrict IDMode = "strict"
	// IDStrict9 is exactly nine ASCII letters or digits (Mistral).
	IDStrict9 IDMode = "strict9"
)

// ThoughtSignatureOptions controls the stripping of Gemini-style
// thought_signature / thoughtSignature fields.
type ThoughtSignatureOptions struct {
	// AllowBase64Only removes every signature that is not valid base64;
	// without it only strings starting with "msg_" are removed.
	AllowBase64Only bool `json:"allowBase64Only"`
	// IncludeCamelCase also checks thoughtSignature, not only
	// thought_signature.
	IncludeCamelCase bool `json:"includeCamelCase"`
}

// Policy is what a provider needs done to a transcript before it is sent.
// Field names and JSON keys follow the reference's TranscriptPolicy.
type Policy struct {
	SanitizeMode               Mode                     `json:"sanitizeMode"`
	SanitizeToolCallIDs        bool                     `json:"sanitizeToolCallIds"`
	ToolCallIDMode             IDMode                   `json:"toolCallIdMode,omitempty"`
	RepairToolUseResultPairing bool                     `json:"repairToolUseResultPairing"`
	PreserveSignatures         bool                     `json:"preserveSignatures"`
	SanitizeThoughtSignatures  *ThoughtSignatureOptions `json:"sanitizeThoughtSignatures,omitempty"`
	SanitizeThinkingSignatures bool                     `json:"sanitizeThinkingSignatures"`
	DropThinkingBlocks         bool                     `json:"dropThinkingBlocks"`
	ApplyGoogleTurnOrdering    bool                     `json:"applyGoogleTurnOrdering"`
	ValidateGeminiTurns        bool                     `json:"validateGeminiTurns"`
	ValidateAnthropicTurns     bool                     `json:"validateAnthropicTurns"`
	AllowSyntheticToolResults  bool                     `json:"allowSyntheticToolResults"`
}

var providerAliases = map[string]string{
	"z.ai":         "zai",
	"z-ai":         "zai",
	"opencode-zen": "opencode",
	"qwen":         "qwen-portal",
	"kimi-code":    "kimi-coding",
	"bedrock":      "amazon-bedrock",
	"aws-bedrock":  "amazon-bedrock",
	"bytedance":    "volcengine",
	"doubao":       "volcengine",
}

// NormalizeProvider returns the canonical provider id: trimmed, lower-cased
// and with the reference's aliases resolved ("z.ai" → "zai", "bedrock" →
// "amazon-bedrock", …).
func NormalizeProvider(provider string) string {
	p := strings.ToLower(ecmatext.Trim(provider))
	if a, ok := providerAliases[p]; ok {
		return a
	}
	return p
}

// IsGoogleAPI reports whether api is one of the Google Generative AI APIs.
func IsGoogleAPI(api string) bool {
	return api == "google-generative-ai" || api == "google-gemini-cli"
}

var mistralHints = []string{"mistral", "mixtral", "codestral", "pixtral", "devstral", "ministral", "mistralai"}

// PolicyFor returns the transcript policy for a provider, model API and model
// id. Unknown values yield the most conservative policy (images only).
func PolicyFor(provider, api, modelID string) Policy {
	p := NormalizeProvider(provider)
	model := strings.ToLower(modelID)

	isGoogle := IsGoogleAPI(api)
	isAnthropic := api == "anthropic-messages" || api == "bedrock-converse-stream" ||
		p == "anthropic" || p == "amazon-bedrock"
	isOpenAI := p == "openai" || p == "openai-codex" ||
		(p == "" && (api == "openai" || api == "openai-completions" || api == "openai-responses" || api == "openai-codex-responses"))
	isStrictCompat := api == "openai-completions" && !isOpenAI && p != "openrouter" && p != "opencode"
	isMistral := p == "mistral"
	if !isMistral {
		for _, h := range mistralHints {
			if strings.Contains(model, h) {
				isMistral = true
				break
			}
		}
	}
	isOpenRouterGemini := (p == "openrouter" || p == "opencode" || p == "kilocode") && strings.Contains(model, "gemini")
	isCopilotClaude := p == "github-copilot" && strings.Contains(model, "claude")

	pol := Policy{
		SanitizeMode:               ModeImagesOnly,
		RepairToolUseResultPairing: true,
	}
	if !isOpenAI && (isGoogle || isAnthropic || isMistral || isOpenRouterGemini) {
		pol.SanitizeMode = ModeFull
	}
	needsIDs := isGoogle || isMistral || isAnthropic
	pol.SanitizeToolCallIDs = !isOpenAI && needsIDs
	switch {
	case isMistral:
		pol.ToolCallIDMode = IDStrict9
	case needsIDs:
		pol.ToolCallIDMode = IDStrict
	}
	if (isGoogle || isOpenRouterGemini) && !isOpenAI {
		pol.SanitizeThoughtSignatures = &ThoughtSignatureOptions{AllowBase64Only: true, IncludeCamelCase: true}
	}
	pol.DropThinkingBlocks = isCopilotClaude
	pol.ApplyGoogleTurnOrdering = !isOpenAI && isGoogle
	pol.ValidateGeminiTurns = !isOpenAI && isGoogle
	pol.ValidateAnthropicTurns = !isOpenAI && (isAnthropic || isStrictCompat)
	pol.AllowSyntheticToolResults = !isOpenAI && (isGoogle || isAnthropic)
	return pol
}
