package openai

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/wirecache"
	"github.com/lanefleet/lanefleet/provider/transform"
)

// DefaultMaxTokens caps max tokens when a request leaves them unset.
const DefaultMaxTokens = 32000

type chatRequest struct {
	Model               string            `json:"model"`
	Messages            []chatMessage     `json:"messages"`
	Stream              bool              `json:"stream"`
	StreamOptions       *streamOptions    `json:"stream_options,omitempty"`
	Store               *bool             `json:"store,omitempty"`
	MaxCompletionTokens int               `json:"max_completion_tokens,omitempty"`
	MaxTokens           int               `json:"max_tokens,omitempty"`
	Temperature         *float64          `json:"temperature,omitempty"`
	Tools               *[]chatTool       `json:"tools,omitempty"`
	ReasoningEffort     string            `json:"reasoning_effort,omitempty"`
	Reasoning           *openRouterReason `json:"reasoning,omitempty"`
	Thinking            *zaiThinking      `json:"thinking,omitempty"`
	Options             *ollamaOptions    `json:"options,omitempty"`
}

// ollamaOptions are Ollama's model options, which its OpenAI-compatible
// endpoint reads besides the standard fields.
type ollamaOptions struct {
	NumCtx int `json:"num_ctx"`
}

// zaiThinking is Z.ai's thinking switch.
type zaiThinking struct {
	Type string `json:"type"` // enabled, disabled
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type openRouterReason struct {
	Effort string `json:"effort"`
}

type chatTool struct {
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name        string         `json:"name"`
	Description string         `json:"description,omitempty"`
	Parameters  map[string]any `json:"parameters"`
	Strict      *bool          `json:"strict,omitempty"`
}

// chatMessage is one message on the wire. Content is a string or a list of
// parts; reasoning fields are set by name (reasoning_content, reasoning,
// reasoning_text) through Extra.
type chatMessage struct {
	Role             string            `json:"role"`
	Content          any               `json:"content,omitempty"`
	Name             string            `json:"name,omitempty"`
	ToolCallID       string            `json:"tool_call_id,omitempty"`
	ToolCalls        []chatToolCall    `json:"tool_calls,omitempty"`
	ReasoningDetails []json.RawMessage `json:"reasoning_details,omitempty"`
	ReasoningContent string            `json:"reasoning_content,omitempty"`
	Reasoning        string            `json:"reasoning,omitempty"`
	ReasoningText    string            `json:"reasoning_text,omitempty"`
}

type chatToolCall struct {
	ID       string           `json:"id"`
	Type     string           `json:"type"`
	Function chatCallFunction `json:"function"`
}

type chatCallFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type chatPart struct {
	Type         string        `json:"type"`
	Text         string        `json:"text,omitempty"`
	ImageURL     *chatImageURL `json:"image_url,omitempty"`
	CacheControl *cacheControl `json:"cache_control,omitempty"`
}

type chatImageURL struct {
	URL string `json:"url"`
}

type cacheControl struct {
	Type string `json:"type"`
}

func hasImageInput(m provider.Model) bool {
	for _, k := range m.Input {
		if k == "image" {
			return true
		}
	}
	return false
}

func maxTokens(req *provider.Request) int {
	if req.MaxTokens > 0 {
		return req.MaxTokens
	}
	n := req.Model.MaxTokens
	if n <= 0 || n > DefaultMaxTokens {
		n = DefaultMaxTokens
	}
	return n
}

// buildChatRequest maps a request to a Chat Completions body, reusing the
// JSON of the messages the session's last request had (cache nil: none).
func buildChatRequest(req *provider.Request, cache *wireCache) (wirecache.Parts, error) {
	m := req.Model
	c := detectCompat(m)
	images := hasImageInput(m)
	// Each message's wire form is taken from the session's last request
	// when the message is the same (see wirecache.Cache.Prepare).
	msgs, f := cache.Prepare(req, m, images, c.normalizeID, 1)
	body := chatOptions(req, c)
	if sp := transform.SanitizeSurrogates(req.SystemPrompt); sp != "" {
		f.Add(-1, systemMessage(m, c, sp), -1)
	}
	hadToolCalls := chatMessages(&f, msgs, c, images)
	body.Tools = chatTools(req.Tools, c, hadToolCalls)
	if c.anthropicCache {
		if j := addCacheControl(f.Out); j >= 0 {
			f.Unmark(j) // its JSON is not that of the message it was made of
		}
	}
	return f.MarshalParts(&body, &body.Messages, "messages")
}

// chatOptions is the request's body without its messages and tools: the
// model, streaming with usage, store, Ollama's context size, the token
// limit in the field the server reads, and the thinking effort in the
// server's own form.
func chatOptions(req *provider.Request, c compat) chatRequest {
	m := req.Model
	body := chatRequest{Model: m.ID, Stream: true, Temperature: req.Temperature}
	if c.usageInStreaming {
		body.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	if c.store {
		no := false
		body.Store = &no
	}
	if n := ollamaNumCtx(m); n > 0 {
		body.Options = &ollamaOptions{NumCtx: n}
	}
	if c.maxTokensField == "max_completion_tokens" {
		body.MaxCompletionTokens = maxTokens(req)
	} else {
		body.MaxTokens = maxTokens(req)
	}
	if e := effort(m, req.Thinking); e != "" {
		switch c.thinking {
		case thinkOpenAI:
			body.ReasoningEffort = e
		case thinkOpenRouter:
			body.Reasoning = &openRouterReason{Effort: e}
		case thinkZAI:
			body.Thinking = &zaiThinking{Type: "enabled"}
		}
	} else if c.thinking == thinkZAI && m.Reasoning {
		// GLM 4.7 and later think unless told not to.
		body.Thinking = &zaiThinking{Type: "disabled"}
	}
	return body
}

// systemMessage is the system prompt sp as the first message: a reasoning
// model's developer message where the server takes one.
func systemMessage(m provider.Model, c compat, sp string) chatMessage {
	role := "system"
	if m.Reasoning && c.developerRole {
		role = "developer"
	}
	return chatMessage{Role: role, Content: sp}
}

// chatMessages adds the conversation's wire messages to f, and reports
// whether an assistant message made tool calls. A run of tool results
// is followed by one user message with their images; servers that want
// an assistant turn between a tool result and a user message get one.
func chatMessages(f *wirecache.Forms[chatMessage, wireConv], msgs []message.Message, c compat, images bool) (hadToolCalls bool) {
	// The wire messages of the session's last request that this one
	// repeats are taken whole, up to a message that does not follow a
	// tool result (a run of results sends its images after it). The one
	// addCacheControl marked is not among them: it was Unmark'ed, and
	// Skip stops before it.
	i := f.Skip(wirecache.AfterNoToolResult(msgs))
	hadToolCalls = f.Noted()
	for ; i < len(msgs); i++ {
		msg := &msgs[i]
		switch msg.Role {
		case message.RoleUser:
			if c.assistantAfterTool && len(f.Out) > 0 && f.Out[len(f.Out)-1].Role == "tool" {
				f.Add(-1, chatMessage{Role: "assistant", Content: "I have processed the tool results."}, -1)
			}
			cv, h := f.Form(i, func() wireConv { cm, ok := userMessage(msg, images); return wireConv{cm: cm, ok: ok} })
			if cv.ok {
				f.Add(i, cv.cm, h)
			}
		case message.RoleAssistant:
			cv, h := f.Form(i, func() wireConv { cm, ok := assistantMessage(msg); return wireConv{cm: cm, ok: ok} })
			if cv.ok {
				if len(cv.cm.ToolCalls) > 0 {
					hadToolCalls = true
					f.Note(i)
				}
				f.Add(i, cv.cm, h)
			}
		case message.RoleToolResult:
			// Consecutive results; images are collected into one user
			// message after them.
			var imgs []chatPart
			for ; i < len(msgs) && msgs[i].Role == message.RoleToolResult; i++ {
				tr := &msgs[i]
				cv, h := f.Form(i, func() wireConv { return toolMessage(tr, images, c.toolResultName) })
				imgs = append(imgs, cv.imgs...)
				f.Add(i, cv.cm, h)
			}
			i--
			if len(imgs) > 0 {
				if c.assistantAfterTool {
					f.Add(-1, chatMessage{Role: "assistant", Content: "I have processed the tool results."}, -1)
				}
				parts := append([]chatPart{{Type: "text", Text: "Attached image(s) from tool result:"}}, imgs...)
				f.Add(-1, chatMessage{Role: "user", Content: parts}, -1)
			}
		default:
			f.Form(i, nil)
		}
	}

	return hadToolCalls
}

// chatTools is the tools' wire form: nil without tools, unless the
// history has tool calls (some endpoints reject those without tools: an
// empty list then).
func chatTools(ts []provider.Tool, c compat, hadToolCalls bool) *[]chatTool {
	if len(ts) > 0 {
		tools := make([]chatTool, 0, len(ts))
		for _, t := range ts {
			f := chatFunction{Name: t.Name, Description: t.Description, Parameters: t.Parameters}
			if f.Parameters == nil {
				f.Parameters = map[string]any{"type": "object", "properties": map[string]any{}}
			}
			if c.strict {
				s := false
				f.Strict = &s
			}
			tools = append(tools, chatTool{Type: "function", Function: f})
		}
		return &tools
	} else if hadToolCalls {
		// Some endpoints reject tool calls in the history without tools.
		empty := []chatTool{}
		return &empty
	}
	return nil
}

// toolMessage is the wire form of a tool result: its text (images taken
// out, to be sent after the run of results), named when the endpoint
// wants names.
func toolMessage(tr *message.Message, images, named bool) wireConv {
	var texts []string
	var imgs []chatPart
	hasImg := false
	for _, b := range tr.Content.Blocks {
		switch b.Type {
		case message.BlockText:
			texts = append(texts, transform.SanitizeSurrogates(b.Text))
		case message.BlockImage:
			hasImg = true
			if images {
				imgs = append(imgs, imagePart(b))
			}
		}
	}
	text := strings.Join(texts, "\n")
	if text == "" && hasImg {
		text = "(see attached image)"
	}
	tm := chatMessage{Role: "tool", ToolCallID: tr.ToolCallID, Content: text}
	if named {
		tm.Name = tr.ToolName
	}
	return wireConv{cm: tm, ok: true, imgs: imgs}
}

func imagePart(b message.Block) chatPart {
	return chatPart{Type: "image_url", ImageURL: &chatImageURL{URL: "data:" + b.MimeType + ";base64," + b.Data}}
}

func userMessage(msg *message.Message, images bool) (chatMessage, bool) {
	if msg.Content.IsPlain() {
		t := transform.SanitizeSurrogates(msg.Content.Text())
		if strings.TrimSpace(t) == "" {
			return chatMessage{}, false
		}
		return chatMessage{Role: "user", Content: t}, true
	}
	var parts []chatPart
	for _, b := range msg.Content.Blocks {
		switch b.Type {
		case message.BlockText:
			if strings.TrimSpace(b.Text) != "" {
				parts = append(parts, chatPart{Type: "text", Text: transform.SanitizeSurrogates(b.Text)})
			}
		case message.BlockImage:
			if images {
				parts = append(parts, imagePart(b))
			}
		}
	}
	if len(parts) == 0 {
		return chatMessage{}, false
	}
	return chatMessage{Role: "user", Content: parts}, true
}

func assistantMessage(msg *message.Message) (chatMessage, bool) {
	cm := chatMessage{Role: "assistant"}
	// The text blocks joined; one block (the usual reply) is used as it is.
	var text string
	var joined strings.Builder
	texts := 0
	for _, b := range msg.Content.Blocks {
		switch b.Type {
		case message.BlockText:
			if strings.TrimSpace(b.Text) != "" {
				t := transform.SanitizeSurrogates(b.Text)
				switch texts {
				case 0:
					text = t
				case 1:
					joined.WriteString(text)
					fallthrough
				default:
					joined.WriteString(t)
				}
				texts++
			}
		case message.BlockThinking:
			// The signature names the delta field the thinking came in.
			t := transform.SanitizeSurrogates(b.Thinking)
			switch b.ThinkingSignature {
			case "reasoning_content":
				cm.ReasoningContent += t
			case "reasoning":
				cm.Reasoning += t
			case "reasoning_text":
				cm.ReasoningText += t
			}
		case message.BlockToolCall:
			args, err := json.Marshal(b.Arguments)
			if err != nil || b.Arguments == nil {
				args = []byte("{}")
			}
			cm.ToolCalls = append(cm.ToolCalls, chatToolCall{
				ID: b.ID, Type: "function", Function: chatCallFunction{Name: b.Name, Arguments: string(args)},
			})
			if b.ThoughtSignature != "" && json.Valid([]byte(b.ThoughtSignature)) {
				cm.ReasoningDetails = append(cm.ReasoningDetails, json.RawMessage(b.ThoughtSignature))
			}
		}
	}
	if texts > 1 {
		text = joined.String()
	}
	if text != "" {
		cm.Content = text
	}
	if cm.Content == nil && len(cm.ToolCalls) == 0 {
		return chatMessage{}, false
	}
	return cm, true
}

// addCacheControl marks the last text part of the last user or assistant
// message as a prompt-cache breakpoint (OpenRouter with Anthropic models)
// and returns its index (-1: none). The message gets parts of its own: the
// ones it had may be shared.
func addCacheControl(msgs []chatMessage) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		m := &msgs[i]
		if m.Role != "user" && m.Role != "assistant" {
			continue
		}
		switch c := m.Content.(type) {
		case string:
			m.Content = []chatPart{{Type: "text", Text: c, CacheControl: &cacheControl{Type: "ephemeral"}}}
			return i
		case []chatPart:
			for j := len(c) - 1; j >= 0; j-- {
				if c[j].Type == "text" {
					c = slices.Clone(c)
					c[j].CacheControl = &cacheControl{Type: "ephemeral"}
					m.Content = c
					return i
				}
			}
		}
	}
	return -1
}
