package anthropic

import (
	"encoding/json"
	"strings"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/transform"
)

// DefaultMaxTokens caps max_tokens when a request leaves it unset.
const DefaultMaxTokens = 32000

// Thinking budgets per level for models without adaptive thinking.
var budgets = map[provider.ThinkingLevel]int{
	provider.ThinkingMinimal: 1024,
	provider.ThinkingLow:     2048,
	provider.ThinkingMedium:  8192,
	provider.ThinkingHigh:    16384,
	provider.ThinkingXHigh:   16384,
}

type apiRequest struct {
	Model        string         `json:"model"`
	MaxTokens    int            `json:"max_tokens"`
	Stream       bool           `json:"stream"`
	System       []apiBlock     `json:"system,omitempty"`
	Messages     []apiMessage   `json:"messages"`
	Tools        []apiTool      `json:"tools,omitempty"`
	Thinking     *apiThinking   `json:"thinking,omitempty"`
	OutputConfig *apiOutputConf `json:"output_config,omitempty"`
	Temperature  *float64       `json:"temperature,omitempty"`
}

type apiThinking struct {
	Type         string `json:"type"`
	BudgetTokens int    `json:"budget_tokens,omitempty"`
}

type apiOutputConf struct {
	Effort string `json:"effort"`
}

type apiTool struct {
	Name        string         `json:"name"`
	Description string         `json:"description,omitempty"`
	InputSchema map[string]any `json:"input_schema"`
}

type apiMessage struct {
	Role    string     `json:"role"`
	Content []apiBlock `json:"content"`
}

type apiCache struct {
	Type string `json:"type"`
}

// apiBlock is every content block shape we send; empty fields are omitted.
type apiBlock struct {
	Type         string         `json:"type"`
	Text         *string        `json:"text,omitempty"`
	Thinking     *string        `json:"thinking,omitempty"`
	Signature    *string        `json:"signature,omitempty"`
	Data         string         `json:"data,omitempty"`
	Source       *apiImage      `json:"source,omitempty"`
	ID           string         `json:"id,omitempty"`
	Name         string         `json:"name,omitempty"`
	Input        map[string]any `json:"input,omitempty"`
	ToolUseID    string         `json:"tool_use_id,omitempty"`
	Content      any            `json:"content,omitempty"`
	IsError      bool           `json:"is_error,omitempty"`
	CacheControl *apiCache      `json:"cache_control,omitempty"`
}

type apiImage struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
}

func str(s string) *string { return &s }

func textBlock(s string) apiBlock { return apiBlock{Type: "text", Text: str(s)} }

// isAdaptive reports models that take thinking {type: adaptive} with an
// effort instead of a token budget.
func isAdaptive(id string) bool {
	for _, s := range []string{"opus-4-6", "opus-4.6", "sonnet-4-6", "sonnet-4.6"} {
		if strings.Contains(id, s) {
			return true
		}
	}
	return false
}

func isOpus46(id string) bool {
	return strings.Contains(id, "opus-4-6") || strings.Contains(id, "opus-4.6")
}

func hasImageInput(m provider.Model) bool {
	for _, k := range m.Input {
		if k == "image" {
			return true
		}
	}
	return false
}

// normalizeID makes another model's tool call id acceptable:
// [A-Za-z0-9_-], at most 64 characters.
func normalizeID(id string) string { return transform.SanitizeID(id, 64) }

// buildRequest maps a request to a Messages API body and the beta features
// it needs.
func buildRequest(req *provider.Request) ([]byte, []string, error) {
	m := req.Model
	body := apiRequest{Model: m.ID, Stream: true}
	base := req.MaxTokens
	if base <= 0 {
		base = m.MaxTokens
		if base <= 0 || base > DefaultMaxTokens {
			base = DefaultMaxTokens
		}
	}
	body.MaxTokens = base
	betas := []string{"fine-grained-tool-streaming-2025-05-14"}
	thinking := m.Reasoning && req.Thinking != "" && req.Thinking != provider.ThinkingOff
	if thinking && isAdaptive(m.ID) {
		body.Thinking = &apiThinking{Type: "adaptive"}
		e := "high"
		switch req.Thinking {
		case provider.ThinkingMinimal, provider.ThinkingLow:
			e = "low"
		case provider.ThinkingMedium:
			e = "medium"
		case provider.ThinkingXHigh:
			if isOpus46(m.ID) {
				e = "max"
			}
		}
		body.OutputConfig = &apiOutputConf{Effort: e}
	} else if thinking {
		budget := budgets[req.Thinking]
		limit := m.MaxTokens
		if limit <= 0 {
			limit = base + budget
		}
		body.MaxTokens = min(base+budget, limit)
		if body.MaxTokens <= budget {
			budget = body.MaxTokens - 1024
		}
		if budget >= 1024 {
			body.Thinking = &apiThinking{Type: "enabled", BudgetTokens: budget}
			betas = append(betas, "interleaved-thinking-2025-05-14")
		}
	}
	if body.Thinking == nil {
		body.Temperature = req.Temperature
	}
	if sp := transform.SanitizeSurrogates(req.SystemPrompt); sp != "" {
		b := textBlock(sp)
		b.CacheControl = &apiCache{Type: "ephemeral"}
		body.System = []apiBlock{b}
	}
	body.Messages = messages(transform.Messages(req.Messages, m, normalizeID), hasImageInput(m))
	// Cache the whole prefix: a breakpoint on the last block of the last
	// user message.
	for i := len(body.Messages) - 1; i >= 0; i-- {
		if body.Messages[i].Role == "user" && len(body.Messages[i].Content) > 0 {
			c := body.Messages[i].Content
			c[len(c)-1].CacheControl = &apiCache{Type: "ephemeral"}
			break
		}
	}
	for _, t := range req.Tools {
		schema := t.Parameters
		if schema == nil {
			schema = map[string]any{"type": "object", "properties": map[string]any{}}
		}
		body.Tools = append(body.Tools, apiTool{Name: t.Name, Description: t.Description, InputSchema: schema})
	}
	data, err := json.Marshal(body)
	return data, betas, err
}

func messages(msgs []message.Message, images bool) []apiMessage {
	var out []apiMessage
	for i := 0; i < len(msgs); i++ {
		msg := msgs[i]
		switch msg.Role {
		case message.RoleUser:
			var blocks []apiBlock
			for _, b := range msg.Content.Blocks {
				switch b.Type {
				case message.BlockText:
					if strings.TrimSpace(b.Text) != "" {
						blocks = append(blocks, textBlock(transform.SanitizeSurrogates(b.Text)))
					}
				case message.BlockImage:
					if images {
						blocks = append(blocks, imageBlock(b))
					}
				}
			}
			if len(blocks) > 0 {
				out = append(out, apiMessage{Role: "user", Content: blocks})
			}
		case message.RoleAssistant:
			var blocks []apiBlock
			for _, b := range msg.Content.Blocks {
				switch b.Type {
				case message.BlockText:
					if strings.TrimSpace(b.Text) != "" {
						blocks = append(blocks, textBlock(transform.SanitizeSurrogates(b.Text)))
					}
				case message.BlockThinking:
					switch {
					case b.Redacted:
						blocks = append(blocks, apiBlock{Type: "redacted_thinking", Data: b.ThinkingSignature})
					case b.ThinkingSignature == "":
						if strings.TrimSpace(b.Thinking) != "" {
							blocks = append(blocks, textBlock(transform.SanitizeSurrogates(b.Thinking)))
						}
					default:
						blocks = append(blocks, apiBlock{Type: "thinking", Thinking: str(transform.SanitizeSurrogates(b.Thinking)), Signature: str(b.ThinkingSignature)})
					}
				case message.BlockToolCall:
					args := b.Arguments
					if args == nil {
						args = map[string]any{}
					}
					blk := apiBlock{Type: "tool_use", ID: b.ID, Name: b.Name, Input: args}
					blocks = append(blocks, blk)
				}
			}
			if len(blocks) > 0 {
				out = append(out, apiMessage{Role: "assistant", Content: blocks})
			}
		case message.RoleToolResult:
			var blocks []apiBlock
			for ; i < len(msgs) && msgs[i].Role == message.RoleToolResult; i++ {
				blocks = append(blocks, toolResult(msgs[i], images))
			}
			i--
			out = append(out, apiMessage{Role: "user", Content: blocks})
		}
	}
	return out
}

func imageBlock(b message.Block) apiBlock {
	return apiBlock{Type: "image", Source: &apiImage{Type: "base64", MediaType: b.MimeType, Data: b.Data}}
}

// toolResult maps a tool result: a joined string when it is text only, a
// block list when it has images.
func toolResult(tr message.Message, images bool) apiBlock {
	blk := apiBlock{Type: "tool_result", ToolUseID: tr.ToolCallID, IsError: tr.IsError}
	var texts []string
	var parts []apiBlock
	hasImg := false
	for _, b := range tr.Content.Blocks {
		switch b.Type {
		case message.BlockText:
			t := transform.SanitizeSurrogates(b.Text)
			texts = append(texts, t)
			parts = append(parts, textBlock(t))
		case message.BlockImage:
			if images {
				hasImg = true
				parts = append(parts, imageBlock(b))
			}
		}
	}
	if !hasImg {
		blk.Content = strings.Join(texts, "\n")
		return blk
	}
	if len(texts) == 0 {
		parts = append([]apiBlock{textBlock("(see attached image)")}, parts...)
	}
	blk.Content = parts
	return blk
}
