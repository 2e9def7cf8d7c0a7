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
	msgs, f := cache.Prepare(req, m, images, idFix, 0)
	contents(&f, msgs, m, images)
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
	return f.Marshal(&body, &body.Contents, "contents")
}

// contents maps the history to wire contents, added to f: a message's
// form is the last request's when the message is (see wirecache.Forms).
func contents(f *wireForms, msgs []message.Message, m provider.Model, images bool) {
	var names callNames
	// The contents of the session's last request that this one repeats
	// are taken whole, up to a message that does not follow a tool
	// result (a run of results is one content, its images one after
	// it). A result without a name reads its call's in msgs, which Skip
	// leaves whole.
	i := f.Skip(wirecache.AfterNoToolResult(msgs))
	for ; i < len(msgs); i++ {
		msg := &msgs[i]
		switch msg.Role {
		case message.RoleUser:
			cv, h := f.Form(i, func() wireConv { c, ok := userContent(msg, images); return wireConv{c: c, ok: ok} })
			if cv.ok {
				f.Add(i, cv.c, h)
			}
		case message.RoleAssistant:
			cv, h := f.Form(i, func() wireConv { c, ok := modelContent(msg, m); return wireConv{c: c, ok: ok} })
			if cv.ok {
				f.Add(i, cv.c, h)
			}
		case message.RoleToolResult:
			first := i
			for i < len(msgs) && msgs[i].Role == message.RoleToolResult {
				i++
			}
			i--
			toolResults(f, msgs, first, i+1, m, images, &names)
		default:
			f.Form(i, nil)
		}
	}
}

// toolResults adds the run of tool results msgs[first:end] to f: one
// content of their function responses, then, when they have images and
// the model is older than Gemini 3, a user content of the images. The
// run's content is kept with the first of them and is the same when the
// run is (runLen: its length). A result without a name takes it from the
// call, in another message: the same while the messages before it are,
// so looked for again only when the history limit dropped some.
func toolResults(f *wireForms, msgs []message.Message, first, end int, m provider.Model, images bool, names *callNames) {
	run := end - first
	var parts, imageTurn []apiPart
	if !f.Keeping() {
		parts = make([]apiPart, 0, run)
		for k := first; k < end; k++ {
			cv := toolResult(&msgs[k], m, images, names.of(msgs, k))
			parts = append(parts, cv.part)
			imageTurn = append(imageTurn, cv.imgs...)
		}
		addRun(f, -1, apiContent{Role: "user", Parts: parts}, imageTurn)
		return
	}
	built := false // a result's form made anew: not the last request's run
	h := -1
	for k := first; k < end; k++ {
		tr := &msgs[k]
		fresh := false
		cv, hk := f.Form(k, func() wireConv { fresh = true; return toolResult(tr, m, images, names.of(msgs, k)) })
		if tr.ToolName == "" && !fresh && f.Dropped() {
			// A form of the last request's named the call before it
			// then, which the history limit may have dropped since.
			if name := names.of(msgs, k); cv.part.FunctionResponse.Name != name {
				*cv, fresh = toolResult(tr, m, images, name), true
			}
		}
		built = built || fresh
		if k == first {
			h = hk
		} else {
			cv.runLen = 0
		}
	}
	head := f.Kept(first)
	if !built && head.runLen == run && head.c.Parts != nil {
		f.Add(first, head.c, h) // the last request's run
		return
	}
	parts = make([]apiPart, 0, run)
	for k := first; k < end; k++ {
		cv := f.Kept(k)
		parts = append(parts, cv.part)
		imageTurn = append(imageTurn, cv.imgs...)
	}
	c := apiContent{Role: "user", Parts: parts}
	if len(imageTurn) == 0 {
		head.c, head.runLen = c, run
		addRun(f, first, c, nil)
		return
	}
	head.c, head.runLen = apiContent{}, 0
	addRun(f, -1, c, imageTurn)
}

// addRun adds a run's content c, the form of msgs[i] (-1: none's), and
// the user content of its images after it when there are any.
func addRun(f *wireForms, i int, c apiContent, imageTurn []apiPart) {
	f.Add(i, c, -1)
	if len(imageTurn) > 0 {
		f.Add(-1, apiContent{Role: "user", Parts: append([]apiPart{{Text: str("Tool result image:")}}, imageTurn...)}, -1)
	}
}

// callNames finds the tool of a result that does not name it: the name of
// the last call of its id in the messages before it. The call is looked
// for in the few messages before the result (where it usually is); when
// it is not there, every call before the result is read into a map, each
// once per request, that answers from then on (a session of such results
// costs its length, not its length squared).
type callNames struct {
	byID map[string]string
	read int // msgs[:read]'s calls are in byID
}

// nearCalls is how many messages before a result its call is looked for
// in before the map is made.
const nearCalls = 8

// of returns the name msgs[k], a tool result, is sent with when it has
// none ("" when it has one, or no call before it has its id). The k of
// one request's calls never decrease.
func (c *callNames) of(msgs []message.Message, k int) string {
	tr := &msgs[k]
	if tr.ToolName != "" {
		return ""
	}
	if c.byID == nil {
		for j := k - 1; j >= max(k-nearCalls, 0); j-- {
			if name, ok := callIn(&msgs[j], tr.ToolCallID); ok {
				return name
			}
		}
		if k <= nearCalls {
			return "" // every message before it read
		}
		c.byID = map[string]string{}
	}
	for ; c.read < k; c.read++ {
		if msgs[c.read].Role != message.RoleAssistant {
			continue
		}
		for _, b := range msgs[c.read].Content.Blocks {
			if b.Type == message.BlockToolCall {
				c.byID[b.ID] = b.Name
			}
		}
	}
	return c.byID[tr.ToolCallID]
}

// callIn returns the name of msg's last call of id, if it has one.
func callIn(msg *message.Message, id string) (string, bool) {
	if msg.Role != message.RoleAssistant {
		return "", false
	}
	bs := msg.Content.Blocks
	for j := len(bs) - 1; j >= 0; j-- {
		if bs[j].Type == message.BlockToolCall && bs[j].ID == id {
			return bs[j].Name, true
		}
	}
	return "", false
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
	cv := wireConv{part: apiPart{FunctionResponse: fr}}
	if len(imgs) > 0 {
		if isGemini3(m.ID) {
			fr.Parts = imgs
		} else {
			cv.imgs = imgs
		}
	}
	return cv
}
