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
	"azure-openai": "azure",
	"bytedance":    "volcengine",
	"doubao":       "volcengine",
}

// NormalizeProvider returns the canonical id of a provider: trimmed, lower
// case, aliases resolved ("z.ai" and "Z-AI" become "zai").
func NormalizeProvider(p string) string {
	if !canonical(p) {
		p = strings.ToLower(strings.TrimSpace(p))
	}
	if a, ok := providerAliases[p]; ok {
		return a
	}
	return p
}

// isOpenRouter reports whether provider is OpenRouter, whose profiles are
// exempt from all cooldown bookkeeping.
func isOpenRouter(provider string) bool {
	if canonical(provider) {
		return provider == "openrouter" // no alias names OpenRouter
	}
	return NormalizeProvider(provider) == "openrouter"
}

// canonical reports whether p is already trimmed lower case (the common
// case, checked without allocating).
func canonical(p string) bool {
	for i := 0; i < len(p); i++ {
		if c := p[i]; c >= 'A' && c <= 'Z' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c >= 0x80 {
			return false
		}
	}
	return true
}
