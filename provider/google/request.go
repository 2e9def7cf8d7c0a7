package google

import (
	"encoding/base64"
	"encoding/json"
	"strings"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
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

// buildRequest maps a request to a generateContent body.
func buildRequest(req *provider.Request) ([]byte, error) {
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
	msgs := transform.Messages(req.Messages, m, idFix)
	callNames := map[string]string{} // tool call id → name, for results without a tool name
	for i := 0; i < len(msgs); i++ {
		msg := msgs[i]
		switch msg.Role {
		case message.RoleUser:
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
			if len(parts) > 0 {
				body.Contents = append(body.Contents, apiContent{Role: "user", Parts: parts})
			}
		case message.RoleAssistant:
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
					callNames[b.ID] = b.Name
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
			if len(parts) > 0 {
				body.Contents = append(body.Contents, apiContent{Role: "model", Parts: parts})
			}
		case message.RoleToolResult:
			var parts []apiPart
			var imageTurn []apiPart
			for ; i < len(msgs) && msgs[i].Role == message.RoleToolResult; i++ {
				tr := msgs[i]
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
				name := tr.ToolName
				if name == "" {
					name = callNames[tr.ToolCallID]
				}
				fr := &apiFunctionResp{Name: name, Response: map[string]any{key: text}}
				if sendsCallIDs(m.ID) {
					fr.ID = tr.ToolCallID
				}
				if len(imgs) > 0 {
					if isGemini3(m.ID) {
						fr.Parts = imgs
					} else {
						imageTurn = append(imageTurn, imgs...)
					}
				}
				parts = append(parts, apiPart{FunctionResponse: fr})
			}
			i--
			body.Contents = append(body.Contents, apiContent{Role: "user", Parts: parts})
			if len(imageTurn) > 0 {
				body.Contents = append(body.Contents, apiContent{Role: "user", Parts: append([]apiPart{{Text: str("Tool result image:")}}, imageTurn...)})
			}
		}
	}
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
	return json.Marshal(body)
}
