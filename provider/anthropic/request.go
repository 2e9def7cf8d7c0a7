package anthropic

import (
	"slices"
	"strings"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/wirecache"
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
	Model        string         `json:"model,omitempty"`
	Version      string         `json:"anthropic_version,omitempty"`
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
	Input        map[string]any `json:"input,omitzero"` // a tool_use's, never nil there: Anthropic requires it, {} for no arguments
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
// it needs, reusing the JSON of the messages the session's last request
// had (cache nil: none). A version goes in the body as anthropic_version
// in place of the model (see Route).
func buildRequest(req *provider.Request, cache *wireCache, version string) ([]byte, []string, error) {
	m := req.Model
	images := hasImageInput(m)
	body := apiRequest{Model: m.ID, Stream: true}
	if version != "" {
		body.Model, body.Version = "", version
	}
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
	msgs, f := cache.Prepare(req, m, images, normalizeID, 0)
	messages(&f, msgs, images)
	// Cache the whole prefix: a breakpoint on the last block of the last
	// user message (blocks of its own: the ones it had may be shared).
	for i := len(f.Out) - 1; i >= 0; i-- {
		if f.Out[i].Role == "user" && len(f.Out[i].Content) > 0 {
			c := slices.Clone(f.Out[i].Content)
			c[len(c)-1].CacheControl = &apiCache{Type: "ephemeral"}
			f.Out[i].Content = c
			f.Unmark(i)
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
	data, err := f.Marshal(&body, &body.Messages, "messages")
	return data, betas, err
}

// messages maps the history to wire messages, added to f: a message's
// form is the last request's when the message is (see wirecache.Forms).
func messages(f *wireForms, msgs []message.Message, images bool) {
	// The wire messages of the session's last request that this one
	// repeats are taken whole, up to a message that does not follow a
	// tool result (a run of results is one message).
	i := f.Skip(wirecache.AfterNoToolResult(msgs))
	for ; i < len(msgs); i++ {
		msg := &msgs[i]
		switch msg.Role {
		case message.RoleUser:
			cv, h := f.Form(i, func() wireConv { am, ok := userMessage(msg, images); return wireConv{am: am, ok: ok} })
			if cv.ok {
				f.Add(i, cv.am, h)
			}
		case message.RoleAssistant:
			cv, h := f.Form(i, func() wireConv { am, ok := assistantMessage(msg); return wireConv{am: am, ok: ok} })
			if cv.ok {
				f.Add(i, cv.am, h)
			}
		case message.RoleToolResult:
			// Consecutive results go in one user message, kept with the
			// first of them: the same when the run is (run: its length).
			first := i
			for i < len(msgs) && msgs[i].Role == message.RoleToolResult {
				i++
			}
			run := i - first
			i--
			if !f.Keeping() {
				blocks := make([]apiBlock, run)
				for k := range blocks {
					blocks[k] = toolResult(&msgs[first+k], images)
				}
				f.Add(-1, apiMessage{Role: "user", Content: blocks}, -1)
				break
			}
			built := false // a result's form made anew: not the last request's run
			h := -1
			for k := first; k < first+run; k++ {
				tr := &msgs[k]
				_, hk := f.Form(k, func() wireConv { built = true; return wireConv{blk: toolResult(tr, images)} })
				if k == first {
					h = hk
				}
			}
			head := f.Kept(first)
			if built || head.run != run {
				// Not the run of the last request: its message anew.
				blocks := make([]apiBlock, run)
				for k := range blocks {
					cv := f.Kept(first + k)
					blocks[k], cv.run = cv.blk, 0
				}
				head.am, head.run, h = apiMessage{Role: "user", Content: blocks}, run, -1
			}
			f.Add(first, head.am, h)
		default:
			f.Form(i, nil)
		}
	}
}

func userMessage(msg *message.Message, images bool) (apiMessage, bool) {
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
	return apiMessage{Role: "user", Content: blocks}, len(blocks) > 0
}

func assistantMessage(msg *message.Message) (apiMessage, bool) {
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
			blocks = append(blocks, apiBlock{Type: "tool_use", ID: b.ID, Name: b.Name, Input: args})
		}
	}
	return apiMessage{Role: "assistant", Content: blocks}, len(blocks) > 0
}

func imageBlock(b message.Block) apiBlock {
	return apiBlock{Type: "image", Source: &apiImage{Type: "base64", MediaType: b.MimeType, Data: b.Data}}
}

// toolResult maps a tool result: a joined string when it is text only, a
// block list when it has images.
func toolResult(tr *message.Message, images bool) apiBlock {
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
