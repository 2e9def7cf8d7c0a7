package google

import (
	"encoding/base64"
	"strings"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/wirecache"
	"github.com/lanefleet/lanefleet/provider/transform"
)

// SkipSignature is the thought signature Gemini 3 accepts on a function
// call that has none (a call made by another model or an old session).
const SkipSignature = "skip_thought_signature_validator"

// DefaultMaxTokens caps maxOutputTokens when a request leaves it unset.
const DefaultMaxTokens = 32000

type apiRequest struct {
	Contents          []apiContent   `json:"contents"`
	SystemInstruction *apiContent    `json:"systemInstruction,omitempty"`
	Tools             []apiTool      `json:"tools,omitempty"`
	GenerationConfig  apiGenerationC `json:"generationConfig"`
}

type apiGenerationC struct {
	MaxOutputTokens int                `json:"maxOutputTokens,omitempty"`
	Temperature     *float64           `json:"temperature,omitempty"`
	ThinkingConfig  *apiThinkingConfig `json:"thinkingConfig,omitempty"`
}

// apiThinkingConfig asks for thoughts with either a level (Gemini 3) or a
// token budget (Gemini 2.5; -1 lets the model decide).
type apiThinkingConfig struct {
	IncludeThoughts bool   `json:"includeThoughts,omitempty"`
	ThinkingBudget  *int32 `json:"thinkingBudget,omitempty"`
	ThinkingLevel   string `json:"thinkingLevel,omitempty"`
}

// Thinking levels of Gemini 3.
const (
	levelMinimal = "MINIMAL"
	levelLow     = "LOW"
	levelMedium  = "MEDIUM"
	levelHigh    = "HIGH"
)

type apiTool struct {
	FunctionDeclarations []apiFunctionDecl `json:"functionDeclarations"`
}

// apiFunctionDecl declares a tool with its parameters as JSON Schema.
type apiFunctionDecl struct {
	Description          string `json:"description,omitempty"`
	Name                 string `json:"name,omitempty"`
	ParametersJSONSchema any    `json:"parametersJsonSchema,omitempty"`
}

type apiContent struct {
	Role  string    `json:"role,omitempty"`
	Parts []apiPart `json:"parts"`
}

// apiPart is a content part. Signatures stay strings: Gemini sends them as
// base64 and the Gemini 3 sentinel is not base64 at all.
type apiPart struct {
	Text             *string          `json:"text,omitempty"`
	Thought          bool             `json:"thought,omitempty"`
	ThoughtSignature string           `json:"thoughtSignature,omitempty"`
	InlineData       *apiBlob         `json:"inlineData,omitempty"`
	FunctionCall     *apiFunctionCall `json:"functionCall,omitempty"`
	FunctionResponse *apiFunctionResp `json:"functionResponse,omitempty"`
}

type apiBlob struct {
	MimeType string `json:"mimeType"`
	Data     string `json:"data"`
}

type apiFunctionCall struct {
	ID   string         `json:"id,omitempty"`
	Name string         `json:"name"`
	Args map[string]any `json:"args"`
}

type apiFunctionResp struct {
	ID       string         `json:"id,omitempty"`
	Name     string         `json:"name"`
	Response map[string]any `json:"response"`
	Parts    []apiPart      `json:"parts,omitempty"`
}

func str(s string) *string { return &s }

func isGemini3(id string) bool { return strings.Contains(id, "gemini-3") }

// sendsCallIDs reports models (served through Gemini-style APIs) that need
// function call ids echoed.
func sendsCallIDs(id string) bool {
	return strings.HasPrefix(id, "claude-") || strings.HasPrefix(id, "gpt-oss-")
}

func hasImageInput(m provider.Model) bool {
	for _, k := range m.Input {
		if k == "image" {
			return true
		}
	}
	return false
}

// validSignature keeps signatures that are standard base64.
func validSignature(s string) bool {
	if s == "" {
		return false
	}
	_, err := base64.StdEncoding.DecodeString(s)
	return err == nil
}

// thinkingConfig maps a thinking level per model: Gemini 3 Pro takes LOW or
// HIGH, Gemini 3 Flash MINIMAL to HIGH, Gemini 2.5 a token budget; off sends
// nothing, so the model's default applies.
func thinkingConfig(m provider.Model, level provider.ThinkingLevel) *apiThinkingConfig {
	if !m.Reasoning || level == "" || level == provider.ThinkingOff {
		return nil
	}
	if level == provider.ThinkingXHigh {
		level = provider.ThinkingHigh
	}
	tc := &apiThinkingConfig{IncludeThoughts: true}
	id := m.ID
	switch {
	case isGemini3(id) && strings.Contains(id, "pro"):
		tc.ThinkingLevel = levelHigh
		if level == provider.ThinkingMinimal || level == provider.ThinkingLow {
			tc.ThinkingLevel = levelLow
		}
	case isGemini3(id):
		tc.ThinkingLevel = map[provider.ThinkingLevel]string{
			provider.ThinkingMinimal: levelMinimal, provider.ThinkingLow: levelLow,
			provider.ThinkingMedium: levelMedium, provider.ThinkingHigh: levelHigh,
		}[level]
	default:
		budgets := map[provider.ThinkingLevel]int32{provider.ThinkingMinimal: -1, provider.ThinkingLow: -1, provider.ThinkingMedium: -1, provider.ThinkingHigh: -1}
		switch {
		case strings.Contains(id, "2.5-pro"):
			budgets = map[provider.ThinkingLevel]int32{provider.ThinkingMinimal: 128, provider.ThinkingLow: 2048, provider.ThinkingMedium: 8192, provider.ThinkingHigh: 32768}
		case strings.Contains(id, "2.5-flash"):
			budgets = map[provider.ThinkingLevel]int32{provider.ThinkingMinimal: 128, provider.ThinkingLow: 2048, provider.ThinkingMedium: 8192, provider.ThinkingHigh: 24576}
		}
		b := budgets[level]
		tc.ThinkingBudget = &b
	}
	return tc
}

func normalizeID(id string) string { return transform.SanitizeID(id, 64) }

// buildRequest maps a request to a generateContent body, reusing the JSON
// of the contents the session's last request had (cache nil: none).
func buildRequest(req *provider.Request, cache *wireCache) ([]byte, error) {
	m := req.Model
	images := hasImageInput(m)
	prev := cache.Take(req.SessionID)
	body := apiRequest{GenerationConfig: apiGenerationC{Temperature: req.Temperature, ThinkingConfig: thinkingConfig(m, req.Thinking)}}
	body.GenerationConfig.MaxOutputTokens = req.MaxTokens
	if body.GenerationConfig.MaxOutputTokens <= 0 {
		body.GenerationConfig.MaxOutputTokens = min(max(m.MaxTokens, 0), DefaultMaxTokens)
		if body.GenerationConfig.MaxOutputTokens == 0 {
			body.GenerationConfig.MaxOutputTokens = DefaultMaxTokens
		}
	}
	if sp := transform.SanitizeSurrogates(req.SystemPrompt); sp != "" {
		body.SystemInstruction = &apiContent{Parts: []apiPart{{Text: str(sp)}}}
	}
	var idFix func(string) string
	if sendsCallIDs(m.ID) {
		idFix = normalizeID
	}
	msgs := transform.Messages(req.Messages, m, idFix)
	var w *wireConvs // the messages' wire forms, kept for the next request
	same := 0
	if cache != nil && req.SessionID != "" {
		w, same = prev.Convs(wirecache.Key(m, images), msgs)
	}
	body.Contents = contents(msgs, m, images, prev.Messages(len(msgs)), w, same)
	if len(req.Tools) > 0 {
		decls := make([]apiFunctionDecl, 0, len(req.Tools))
		for _, t := range req.Tools {
			var schema any = t.Parameters
			if t.Parameters == nil {
				schema = map[string]any{"type": "object", "properties": map[string]any{}}
			}
			decls = append(decls, apiFunctionDecl{Name: t.Name, Description: t.Description, ParametersJSONSchema: schema})
		}
		body.Tools = []apiTool{{FunctionDeclarations: decls}}
	}
	return cache.Marshal(req.SessionID, prev, &body, &body.Contents, "contents", w)
}

// contents maps the history to wire contents, appended to out. With w
// (the session's wire forms, kept for the next request) each message's
// form is taken from w.Conv when the message is the same as in the last
// request (i < same) and kept there otherwise, and w.Hint gets the last
// request's content each one repeats.
func contents(msgs []message.Message, m provider.Model, images bool, out []apiContent, w *wireConvs, same int) []apiContent {
	add := func(c apiContent, h int) int {
		out = append(out, c)
		if w != nil {
			w.Hint = append(w.Hint, h)
		}
		return len(out) - 1
	}
	// convert puts what msgs[i] becomes in w.Conv[i] (the last request's
	// when i < same) and returns it and the index of its content in the
	// last request (-1: none).
	var scratch wireConv
	convert := func(i int, build func() wireConv) (*wireConv, int) {
		if w == nil {
			scratch = build()
			return &scratch, -1
		}
		if i >= same {
			w.Conv = append(w.Conv, build())
			return &w.Conv[i], -1
		}
		cv := &w.Conv[i]
		return cv, cv.at
	}
	for i := 0; i < len(msgs); i++ {
		msg := &msgs[i]
		switch msg.Role {
		case message.RoleUser:
			cv, h := convert(i, func() wireConv { c, ok := userContent(msg, images); return wireConv{c: c, ok: ok} })
			cv.at = -1
			if cv.ok {
				cv.at = add(cv.c, h)
			}
		case message.RoleAssistant:
			cv, h := convert(i, func() wireConv { c, ok := modelContent(msg, m); return wireConv{c: c, ok: ok} })
			cv.at = -1
			if cv.ok {
				cv.at = add(cv.c, h)
			}
		case message.RoleToolResult:
			// Consecutive results go in one content, kept with the first
			// of them: the same when the run is (run: its length) and
			// every result names its tool (a result without a name takes
			// it from the call, in another message).
			first := i
			for i < len(msgs) && msgs[i].Role == message.RoleToolResult {
				i++
			}
			run := i - first
			i--
			named := true
			parts := make([]apiPart, 0, run)
			var imageTurn []apiPart
			for k := first; k < first+run; k++ {
				tr := &msgs[k]
				cv, _ := convert(k, func() wireConv { return toolResult(tr, m, images, "") })
				if tr.ToolName == "" {
					named = false
					*cv = toolResult(tr, m, images, callName(msgs[:k], tr.ToolCallID))
				}
				if k > first {
					cv.runLen, cv.runAt = 0, -1
				}
				parts = append(parts, cv.part)
				imageTurn = append(imageTurn, cv.imgs...)
			}
			c := apiContent{Role: "user", Parts: parts}
			if w == nil {
				add(c, -1)
			} else if head := &w.Conv[first]; named && len(imageTurn) == 0 {
				// The run's content is the last request's when the run is.
				// (the parts made above are then not used)
				h := -1
				if first+run <= same && head.runLen == run && head.c.Parts != nil {
					c, h = head.c, head.runAt
				}
				head.c, head.runLen = c, run
				head.runAt = add(c, h)
			} else {
				head.c, head.runLen, head.runAt = apiContent{}, 0, -1
				add(c, -1)
			}
			if len(imageTurn) > 0 {
				add(apiContent{Role: "user", Parts: append([]apiPart{{Text: str("Tool result image:")}}, imageTurn...)}, -1)
			}
		default:
			cv, _ := convert(i, func() wireConv { return wireConv{} })
			cv.at = -1
		}
	}
	return out
}

// callName is the name of the last call id among msgs' tool calls ("":
// none), for a result that does not name its tool.
func callName(msgs []message.Message, id string) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != message.RoleAssistant {
			continue
		}
		bs := msgs[i].Content.Blocks
		for j := len(bs) - 1; j >= 0; j-- {
			if bs[j].Type == message.BlockToolCall && bs[j].ID == id {
				return bs[j].Name
			}
		}
	}
	return ""
}

func userContent(msg *message.Message, images bool) (apiContent, bool) {
	var parts []apiPart
	for _, b := range msg.Content.Blocks {
		switch b.Type {
		case message.BlockText:
			if strings.TrimSpace(b.Text) != "" {
				parts = append(parts, apiPart{Text: str(transform.SanitizeSurrogates(b.Text))})
			}
		case message.BlockImage:
			if images {
				parts = append(parts, apiPart{InlineData: &apiBlob{MimeType: b.MimeType, Data: b.Data}})
			}
		}
	}
	return apiContent{Role: "user", Parts: parts}, len(parts) > 0
}

func modelContent(msg *message.Message, m provider.Model) (apiContent, bool) {
	same := msg.Provider == m.Provider && msg.Model == m.ID
	var parts []apiPart
	for _, b := range msg.Content.Blocks {
		switch b.Type {
		case message.BlockThinking:
			if strings.TrimSpace(b.Thinking) == "" && !(same && validSignature(b.ThinkingSignature)) {
				continue
			}
			p := apiPart{Text: str(transform.SanitizeSurrogates(b.Thinking))}
			if same {
				p.Thought = true
				if validSignature(b.ThinkingSignature) {
					p.ThoughtSignature = b.ThinkingSignature
				}
			}
			parts = append(parts, p)
		case message.BlockText:
			// A blank part is sent only to carry its signature back.
			if strings.TrimSpace(b.Text) == "" && !(same && validSignature(b.TextSignature)) {
				continue
			}
			p := apiPart{Text: str(transform.SanitizeSurrogates(b.Text))}
			if same && validSignature(b.TextSignature) {
				p.ThoughtSignature = b.TextSignature
			}
			parts = append(parts, p)
		case message.BlockToolCall:
			args := b.Arguments
			if args == nil {
				args = map[string]any{}
			}
			fc := &apiFunctionCall{Name: b.Name, Args: args}
			if sendsCallIDs(m.ID) {
				fc.ID = b.ID
			}
			p := apiPart{FunctionCall: fc}
			if same && validSignature(b.ThoughtSignature) {
				p.ThoughtSignature = b.ThoughtSignature
			} else if isGemini3(m.ID) {
				p.ThoughtSignature = SkipSignature
			}
			parts = append(parts, p)
		}
	}
	return apiContent{Role: "model", Parts: parts}, len(parts) > 0
}

// toolResult is a tool result's function response part and the images
// that go after its run (Gemini before 3) or in it; name is the tool's
// when the result has none.
func toolResult(tr *message.Message, m provider.Model, images bool, name string) wireConv {
	var texts []string
	var imgs []apiPart
	for _, b := range tr.Content.Blocks {
		switch b.Type {
		case message.BlockText:
			texts = append(texts, transform.SanitizeSurrogates(b.Text))
		case message.BlockImage:
			if images {
				imgs = append(imgs, apiPart{InlineData: &apiBlob{MimeType: b.MimeType, Data: b.Data}})
			}
		}
	}
	text := strings.Join(texts, "\n")
	if text == "" && len(imgs) > 0 {
		text = "(see attached image)"
	}
	key := "output"
	if tr.IsError {
		key = "error"
	}
	if tr.ToolName != "" {
		name = tr.ToolName
	}
	fr := &apiFunctionResp{Name: name, Response: map[string]any{key: text}}
	if sendsCallIDs(m.ID) {
		fr.ID = tr.ToolCallID
	}
	cv := wireConv{part: apiPart{FunctionResponse: fr}, at: -1}
	if len(imgs) > 0 {
		if isGemini3(m.ID) {
			fr.Parts = imgs
		} else {
			cv.imgs = imgs
		}
	}
	return cv
}
