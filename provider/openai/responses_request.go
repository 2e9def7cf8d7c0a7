package openai

import (
	"encoding/json"
	"strings"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/wirecache"
	"github.com/lanefleet/lanefleet/provider/transform"
)

type respRequest struct {
	Model           string         `json:"model"`
	Input           []respInput    `json:"input"`
	Stream          bool           `json:"stream"`
	Store           bool           `json:"store"`
	MaxOutputTokens int            `json:"max_output_tokens,omitempty"`
	Temperature     *float64       `json:"temperature,omitempty"`
	Tools           []respTool     `json:"tools,omitempty"`
	Reasoning       *respReasoning `json:"reasoning,omitempty"`
	Include         []string       `json:"include,omitempty"`
	PromptCacheKey  string         `json:"prompt_cache_key,omitempty"`
}

type respReasoning struct {
	Effort  string `json:"effort"`
	Summary string `json:"summary"`
}

type respTool struct {
	Type        string         `json:"type"`
	Name        string         `json:"name"`
	Description string         `json:"description,omitempty"`
	Parameters  map[string]any `json:"parameters"`
	Strict      bool           `json:"strict"`
}

// respInput is one item of a request's input: a respInputMessage,
// respOutputMessage, respFunctionCall, respFunctionOutput or
// json.RawMessage (a reasoning item sent back as it came).
type respInput = any

type respInputMessage struct {
	Role    string `json:"role"`
	Content any    `json:"content"`
}

type respPart struct {
	Type     string `json:"type"`
	Text     string `json:"text,omitempty"`
	ImageURL string `json:"image_url,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

type respOutputMessage struct {
	Type    string           `json:"type"`
	ID      string           `json:"id"`
	Role    string           `json:"role"`
	Status  string           `json:"status"`
	Content []respOutputText `json:"content"`
	Phase   string           `json:"phase,omitempty"`
}

type respOutputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

type respFunctionCall struct {
	Type      string `json:"type"`
	ID        string `json:"id,omitempty"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type respFunctionOutput struct {
	Type   string `json:"type"`
	CallID string `json:"call_id"`
	Output any    `json:"output"`
}

// textSig is the textSignature of a Responses text block.
type textSig struct {
	V     int    `json:"v"`
	ID    string `json:"id"`
	Phase string `json:"phase,omitempty"`
}

// splitCallID splits a stored "call_id|item_id" tool call id.
func splitCallID(id string) (callID, itemID string) {
	callID, itemID, _ = strings.Cut(id, "|")
	return callID, itemID
}

// respNormalizeID rewrites another model's tool call id: its call part,
// sanitised and capped at 64; the item id is dropped so the API does not
// try to pair it with reasoning of another model.
func respNormalizeID(id string) string {
	callID, _ := splitCallID(id)
	return strings.TrimRight(transform.SanitizeID(callID, 64), "_")
}

func respEffort(m provider.Model, level provider.ThinkingLevel) string {
	e := effort(m, level)
	if e == string(provider.ThinkingMinimal) {
		for _, s := range []string{"gpt-5.2", "gpt-5.3", "gpt-5.4"} {
			if strings.Contains(m.ID, s) {
				return string(provider.ThinkingLow)
			}
		}
	}
	return e
}

// buildResponsesRequest maps a request to a Responses body, reusing the
// JSON of the input items the session's last request had (cache nil:
// none).
func buildResponsesRequest(req *provider.Request, cache *respWireCache) (wirecache.Parts, error) {
	m := req.Model
	images := hasImageInput(m)
	// Each message's items are taken from the session's last request when
	// the message is the same (see wirecache.Cache.Prepare).
	msgs, f := cache.Prepare(req, m, images, respNormalizeID, 1)
	body := respRequest{Model: m.ID, Stream: true, MaxOutputTokens: maxTokens(req), Temperature: req.Temperature, PromptCacheKey: req.SessionID}
	if e := respEffort(m, req.Thinking); e != "" {
		body.Reasoning = &respReasoning{Effort: e, Summary: "auto"}
		body.Include = []string{"reasoning.encrypted_content"}
		body.Temperature = nil
	}

	if sp := transform.SanitizeSurrogates(req.SystemPrompt); sp != "" {
		role := "system"
		if m.Reasoning {
			role = "developer"
		}
		f.Add(-1, respInputMessage{Role: role, Content: sp}, -1)
	}
	var spare []respInput // the items of the message before, when not kept (their array is reused)
	// The input items of the session's last request that this one
	// repeats are taken whole: a message's items depend on the message
	// and the model alone, never on the messages before it.
	i := f.Skip(func(int) bool { return true })
	for ; i < len(msgs); i++ {
		cv, h := f.Form(i, func() respConv {
			if f.Keeping() {
				return respConv{items: respItems(nil, &msgs[i], m, images)}
			}
			spare = respItems(spare[:0], &msgs[i], m, images)
			return respConv{items: spare}
		})
		for k, it := range cv.items {
			hk := -1
			if h >= 0 {
				hk = h + k
			}
			f.Add(i, it, hk)
		}
	}
	for _, t := range req.Tools {
		p := t.Parameters
		if p == nil {
			p = map[string]any{"type": "object", "properties": map[string]any{}}
		}
		body.Tools = append(body.Tools, respTool{Type: "function", Name: t.Name, Description: t.Description, Parameters: p})
	}
	return f.MarshalParts(&body, &body.Input, "input")
}

// respItems appends the input items msg becomes for model m (images: m
// takes images) to items.
func respItems(items []respInput, msg *message.Message, m provider.Model, images bool) []respInput {
	switch msg.Role {
	case message.RoleUser:
		items = respUserItems(items, msg, images)
	case message.RoleAssistant:
		items = respAssistantItems(items, msg, m)
	case message.RoleToolResult:
		items = respToolResultItems(items, msg, images)
	}
	return items
}

// respUserItems appends a user message: its non-blank texts and, when the
// model takes them, its images.
func respUserItems(items []respInput, msg *message.Message, images bool) []respInput {
	var parts []respPart
	for _, b := range msg.Content.Blocks {
		switch b.Type {
		case message.BlockText:
			if strings.TrimSpace(b.Text) != "" {
				parts = append(parts, respPart{Type: "input_text", Text: transform.SanitizeSurrogates(b.Text)})
			}
		case message.BlockImage:
			if images {
				parts = append(parts, respPart{Type: "input_image", ImageURL: "data:" + b.MimeType + ";base64," + b.Data, Detail: "auto"})
			}
		}
	}
	if len(parts) > 0 {
		items = append(items, respInputMessage{Role: "user", Content: parts})
	}
	return items
}

// respAssistantItems appends an assistant message's blocks: reasoning
// items and message ids replayed only to the model that made them, texts,
// and function calls.
func respAssistantItems(items []respInput, msg *message.Message, m provider.Model) []respInput {
	same := transform.SameModel(msg, m)
	for _, b := range msg.Content.Blocks {
		switch b.Type {
		case message.BlockThinking:
			if same && b.ThinkingSignature != "" && json.Valid([]byte(b.ThinkingSignature)) {
				items = append(items, json.RawMessage(b.ThinkingSignature))
			}
		case message.BlockText:
			if strings.TrimSpace(b.Text) == "" {
				continue
			}
			text := transform.SanitizeSurrogates(b.Text)
			var sig textSig
			if same && b.TextSignature != "" {
				if json.Unmarshal([]byte(b.TextSignature), &sig) != nil {
					sig = textSig{ID: b.TextSignature} // older sessions store a bare id
				}
			}
			if sig.ID != "" && len(sig.ID) <= 64 {
				items = append(items, respOutputMessage{Type: "message", ID: sig.ID, Role: "assistant", Status: "completed",
					Content: []respOutputText{{Type: "output_text", Text: text, Annotations: []any{}}}, Phase: sig.Phase})
			} else {
				items = append(items, respInputMessage{Role: "assistant", Content: text})
			}
		case message.BlockToolCall:
			callID, itemID := splitCallID(b.ID)
			args, err := json.Marshal(b.Arguments)
			if err != nil || b.Arguments == nil {
				args = []byte("{}")
			}
			fc := respFunctionCall{Type: "function_call", CallID: callID, Name: b.Name, Arguments: string(args)}
			if same {
				fc.ID = itemID
			}
			items = append(items, fc)
		}
	}
	return items
}

// respToolResultItems appends a tool result as a function call output: its
// texts, or its parts when it has images the model takes.
func respToolResultItems(items []respInput, msg *message.Message, images bool) []respInput {
	callID, _ := splitCallID(msg.ToolCallID)
	var texts []string
	var parts []respPart
	for _, b := range msg.Content.Blocks {
		switch b.Type {
		case message.BlockText:
			t := transform.SanitizeSurrogates(b.Text)
			texts = append(texts, t)
			parts = append(parts, respPart{Type: "input_text", Text: t})
		case message.BlockImage:
			if images {
				parts = append(parts, respPart{Type: "input_image", ImageURL: "data:" + b.MimeType + ";base64," + b.Data, Detail: "auto"})
			}
		}
	}
	out := respFunctionOutput{Type: "function_call_output", CallID: callID, Output: strings.Join(texts, "\n")}
	if len(parts) > len(texts) {
		out.Output = parts
	}
	items = append(items, out)
	return items
}
