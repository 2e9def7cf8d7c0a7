package authprofile

import "strings"

// providerAliases maps alternative spellings to canonical provider ids.
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

// NormalizeProvider returns the canonical id of a provider: trimmed, lower
// case, aliases resolved ("z.ai" and "Z-AI" become "zai").
func NormalizeProvider(p string) string {
	p = strings.ToLower(strings.TrimSpace(p))
	if a, ok := providerAliases[p]; ok {
		return a
	}
	return p
}

// isOpenRouter reports whether provider is OpenRouter, whose profiles are
// exempt from all cooldown bookkeeping.
func isOpenRouter(provider string) bool { return NormalizeProvider(provider) == "openrouter" }
