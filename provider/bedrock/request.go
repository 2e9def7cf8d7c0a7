package bedrock

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/document"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/transform"
)

// DefaultMaxTokens caps maxTokens when a request leaves it unset.
const DefaultMaxTokens = 32000

// Thinking budgets per level for Claude models without adaptive thinking
// (as the Anthropic adapter's).
var budgets = map[provider.ThinkingLevel]int{
	provider.ThinkingMinimal: 1024,
	provider.ThinkingLow:     2048,
	provider.ThinkingMedium:  8192,
	provider.ThinkingHigh:    16384,
	provider.ThinkingXHigh:   16384,
}

// maxImageBytes bounds one decoded image (Bedrock's own limit is 3.75 MB).
const maxImageBytes = 8 << 20

// errImage is a history image the adapter cannot send.
var errImage = errors.New("bedrock: image")

// isClaude reports an Anthropic model id, bare or behind an inference
// profile ("us.anthropic.claude-…", an ARN naming one).
func isClaude(id string) bool { return strings.Contains(id, "anthropic.claude") }

// isAdaptive reports Claude models that take thinking {type: adaptive}.
func isAdaptive(id string) bool {
	for _, s := range []string{"opus-4-6", "opus-4.6", "sonnet-4-6", "sonnet-4.6"} {
		if strings.Contains(id, s) {
			return true
		}
	}
	return false
}

// cachable reports models that take cache points: Claude 3.5 Haiku, 3.7
// Sonnet and 4.x, and Amazon Nova.
func cachable(id string) bool {
	for _, s := range []string{"claude-3-5-haiku", "claude-3-7-sonnet", "claude-opus-4", "claude-sonnet-4", "claude-haiku-4", "amazon.nova"} {
		if strings.Contains(id, s) {
			return true
		}
	}
	return false
}

func hasImageInput(m provider.Model) bool {
	for _, k := range m.Input {
		if k == "image" {
			return true
		}
	}
	return false
}

// normalizeID makes another model's tool call id acceptable to Bedrock:
// [A-Za-z0-9_-], at most 64 characters.
func normalizeID(id string) string { return transform.SanitizeID(id, 64) }

// buildInput maps a request to a ConverseStream input.
func buildInput(req *provider.Request) (*bedrockruntime.ConverseStreamInput, error) {
	m := req.Model
	in := &bedrockruntime.ConverseStreamInput{ModelId: aws.String(m.ID)}
	maxTokens := req.MaxTokens
	if maxTokens <= 0 {
		maxTokens = m.MaxTokens
		if maxTokens <= 0 || maxTokens > DefaultMaxTokens {
			maxTokens = DefaultMaxTokens
		}
	}
	extra := map[string]any{}
	thinking := m.Reasoning && isClaude(m.ID) && req.Thinking != "" && req.Thinking != provider.ThinkingOff
	switch {
	case thinking && isAdaptive(m.ID):
		e := "high"
		switch req.Thinking {
		case provider.ThinkingMinimal, provider.ThinkingLow:
			e = "low"
		case provider.ThinkingMedium:
			e = "medium"
		case provider.ThinkingXHigh:
			if strings.Contains(m.ID, "opus-4-6") || strings.Contains(m.ID, "opus-4.6") {
				e = "max"
			}
		}
		extra["thinking"] = map[string]any{"type": "adaptive"}
		extra["output_config"] = map[string]any{"effort": e}
	case thinking:
		budget := budgets[req.Thinking]
		limit := m.MaxTokens
		if limit <= 0 {
			limit = maxTokens + budget
		}
		maxTokens = min(maxTokens+budget, limit)
		if maxTokens <= budget {
			budget = maxTokens - 1024
		}
		if budget >= 1024 {
			extra["thinking"] = map[string]any{"type": "enabled", "budget_tokens": budget}
			extra["anthropic_beta"] = []string{"interleaved-thinking-2025-05-14"}
		}
	}
	ic := &types.InferenceConfiguration{MaxTokens: aws.Int32(int32(min(maxTokens, 1<<30)))}
	if _, on := extra["thinking"]; !on && req.Temperature != nil {
		ic.Temperature = aws.Float32(float32(*req.Temperature))
	}
	in.InferenceConfig = ic
	if len(extra) > 0 {
		in.AdditionalModelRequestFields = document.NewLazyDocument(extra)
	}
	caching := cachable(m.ID)
	if sp := transform.SanitizeSurrogates(req.SystemPrompt); sp != "" {
		in.System = []types.SystemContentBlock{&types.SystemContentBlockMemberText{Value: sp}}
		if caching {
			in.System = append(in.System, &types.SystemContentBlockMemberCachePoint{Value: types.CachePointBlock{Type: types.CachePointTypeDefault}})
		}
	}
	msgs, err := messages(transform.Messages(req.Messages, m, normalizeID), m, hasImageInput(m))
	if err != nil {
		return nil, err
	}
	if caching {
		// Cache the whole prefix: a cache point after the last user message.
		for i := len(msgs) - 1; i >= 0; i-- {
			if msgs[i].Role == types.ConversationRoleUser {
				msgs[i].Content = append(msgs[i].Content, &types.ContentBlockMemberCachePoint{Value: types.CachePointBlock{Type: types.CachePointTypeDefault}})
				break
			}
		}
	}
	in.Messages = msgs
	if len(req.Tools) > 0 {
		tc := &types.ToolConfiguration{}
		for _, t := range req.Tools {
			schema := t.Parameters
			if schema == nil {
				schema = map[string]any{"type": "object", "properties": map[string]any{}}
			}
			spec := types.ToolSpecification{Name: aws.String(t.Name), InputSchema: &types.ToolInputSchemaMemberJson{Value: document.NewLazyDocument(schema)}}
			if t.Description != "" {
				spec.Description = aws.String(t.Description)
			}
			tc.Tools = append(tc.Tools, &types.ToolMemberToolSpec{Value: spec})
		}
		in.ToolConfig = tc
	} else if hasToolHistory(msgs) {
		// Bedrock rejects toolUse/toolResult blocks without a toolConfig;
		// the history's calls name the tools.
		in.ToolConfig = historyTools(msgs)
	}
	return in, nil
}

// hasToolHistory reports whether msgs hold tool calls.
func hasToolHistory(msgs []types.Message) bool {
	for _, m := range msgs {
		for _, b := range m.Content {
			if _, ok := b.(*types.ContentBlockMemberToolUse); ok {
				return true
			}
		}
	}
	return false
}

// historyTools declares the tools the history's calls name, with an open
// schema: a request that offers no tools but replays calls.
func historyTools(msgs []types.Message) *types.ToolConfiguration {
	tc := &types.ToolConfiguration{}
	seen := map[string]bool{}
	for _, m := range msgs {
		for _, b := range m.Content {
			if tu, ok := b.(*types.ContentBlockMemberToolUse); ok && tu.Value.Name != nil && !seen[*tu.Value.Name] {
				seen[*tu.Value.Name] = true
				tc.Tools = append(tc.Tools, &types.ToolMemberToolSpec{Value: types.ToolSpecification{Name: tu.Value.Name,
					InputSchema: &types.ToolInputSchemaMemberJson{Value: document.NewLazyDocument(map[string]any{"type": "object"})}}})
			}
		}
	}
	return tc
}

// messages maps the history to Converse messages: consecutive tool
// results in one user message, empty messages skipped.
func messages(msgs []message.Message, m provider.Model, images bool) ([]types.Message, error) {
	claude := isClaude(m.ID)
	var out []types.Message
	for i := 0; i < len(msgs); i++ {
		msg := &msgs[i]
		var blocks []types.ContentBlock
		role := types.ConversationRoleUser
		switch msg.Role {
		case message.RoleUser:
			for _, b := range msg.Content.Blocks {
				switch b.Type {
				case message.BlockText:
					if strings.TrimSpace(b.Text) != "" {
						blocks = append(blocks, &types.ContentBlockMemberText{Value: transform.SanitizeSurrogates(b.Text)})
					}
				case message.BlockImage:
					if images {
						img, err := image(b)
						if err != nil {
							return nil, fmt.Errorf("message %d: %w", i, err)
						}
						blocks = append(blocks, &types.ContentBlockMemberImage{Value: img})
					}
				}
			}
		case message.RoleAssistant:
			role = types.ConversationRoleAssistant
			blocks = assistantBlocks(msg, claude)
		case message.RoleToolResult:
			for ; i < len(msgs) && msgs[i].Role == message.RoleToolResult; i++ {
				tr, err := toolResult(&msgs[i], images)
				if err != nil {
					return nil, fmt.Errorf("message %d: %w", i, err)
				}
				blocks = append(blocks, &types.ContentBlockMemberToolResult{Value: tr})
			}
			i--
		}
		if len(blocks) > 0 {
			out = append(out, types.Message{Role: role, Content: blocks})
		}
	}
	return out, nil
}

func assistantBlocks(msg *message.Message, claude bool) []types.ContentBlock {
	var blocks []types.ContentBlock
	for _, b := range msg.Content.Blocks {
		switch b.Type {
		case message.BlockText:
			if strings.TrimSpace(b.Text) != "" {
				blocks = append(blocks, &types.ContentBlockMemberText{Value: transform.SanitizeSurrogates(b.Text)})
			}
		case message.BlockThinking:
			switch {
			case b.Redacted && claude:
				data, err := base64.StdEncoding.DecodeString(b.ThinkingSignature)
				if err == nil && len(data) > 0 {
					blocks = append(blocks, &types.ContentBlockMemberReasoningContent{Value: &types.ReasoningContentBlockMemberRedactedContent{Value: data}})
				}
			case b.Redacted:
			case b.ThinkingSignature != "" && claude:
				blocks = append(blocks, &types.ContentBlockMemberReasoningContent{Value: &types.ReasoningContentBlockMemberReasoningText{
					Value: types.ReasoningTextBlock{Text: aws.String(transform.SanitizeSurrogates(b.Thinking)), Signature: aws.String(b.ThinkingSignature)}}})
			case strings.TrimSpace(b.Thinking) != "":
				// Without a signature a model cannot check it: plain text.
				blocks = append(blocks, &types.ContentBlockMemberText{Value: transform.SanitizeSurrogates(b.Thinking)})
			}
		case message.BlockToolCall:
			args := b.Arguments
			if args == nil {
				args = map[string]any{}
			}
			blocks = append(blocks, &types.ContentBlockMemberToolUse{Value: types.ToolUseBlock{
				ToolUseId: aws.String(b.ID), Name: aws.String(b.Name), Input: document.NewLazyDocument(args)}})
		}
	}
	return blocks
}

// toolResult maps a tool result: its text and images as content blocks,
// "(see attached image)" before images without text.
func toolResult(tr *message.Message, images bool) (types.ToolResultBlock, error) {
	out := types.ToolResultBlock{ToolUseId: aws.String(tr.ToolCallID), Status: types.ToolResultStatusSuccess}
	if tr.IsError {
		out.Status = types.ToolResultStatusError
	}
	hasText := false
	for _, b := range tr.Content.Blocks {
		switch b.Type {
		case message.BlockText:
			hasText = true
			out.Content = append(out.Content, &types.ToolResultContentBlockMemberText{Value: transform.SanitizeSurrogates(b.Text)})
		case message.BlockImage:
			if !images {
				continue
			}
			img, err := image(b)
			if err != nil {
				return out, err
			}
			out.Content = append(out.Content, &types.ToolResultContentBlockMemberImage{Value: img})
		}
	}
	if !hasText && len(out.Content) > 0 {
		out.Content = append([]types.ToolResultContentBlock{&types.ToolResultContentBlockMemberText{Value: "(see attached image)"}}, out.Content...)
	}
	if len(out.Content) == 0 {
		out.Content = []types.ToolResultContentBlock{&types.ToolResultContentBlockMemberText{Value: ""}}
	}
	return out, nil
}

// image decodes an image block: Converse takes raw bytes and a format.
func image(b message.Block) (types.ImageBlock, error) {
	var f types.ImageFormat
	switch strings.ToLower(b.MimeType) {
	case "image/png":
		f = types.ImageFormatPng
	case "image/jpeg", "image/jpg":
		f = types.ImageFormatJpeg
	case "image/gif":
		f = types.ImageFormatGif
	case "image/webp":
		f = types.ImageFormatWebp
	default:
		return types.ImageBlock{}, fmt.Errorf("%w: unsupported type %q", errImage, b.MimeType)
	}
	if base64.StdEncoding.DecodedLen(len(b.Data)) > maxImageBytes {
		return types.ImageBlock{}, fmt.Errorf("%w: larger than %d bytes", errImage, maxImageBytes)
	}
	data, err := base64.StdEncoding.DecodeString(b.Data)
	if err != nil {
		return types.ImageBlock{}, fmt.Errorf("%w: %v", errImage, err)
	}
	return types.ImageBlock{Format: f, Source: &types.ImageSourceMemberBytes{Value: data}}, nil
}
