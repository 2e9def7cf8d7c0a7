package sanitize

import (
	"encoding/base64"
	"encoding/json"
	"strings"

	"github.com/lanefleet/lanefleet/ecmatext"
	"github.com/lanefleet/lanefleet/message"
)

// Provider signature fields that may sit on any block (Gemini style). They
// are distinct from a thinking block's own signature, which is never touched.
const (
	fieldThoughtSignature      = "thoughtSignature"
	fieldThoughtSignatureSnake = "thought_signature"
)

// ValidBase64Signature reports whether v is a base64 signature Gemini will
// accept back: a string that, without white space, is made of
// [A-Za-z0-9+/=_-], decodes (URL-safe alphabet when it holds '-' or '_') to at
// least one byte and encodes back to itself up to trailing '='.
func ValidBase64Signature(v any) bool {
	s, ok := v.(string)
	if !ok {
		return false
	}
	if strings.IndexFunc(s, ecmatext.IsSpace) >= 0 {
		s = strings.Map(func(r rune) rune {
			if ecmatext.IsSpace(r) {
				return -1
			}
			return r
		}, s)
	}
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && !strings.ContainsRune("+/=_-", rune(c)) {
			return false
		}
	}
	enc := base64.RawStdEncoding
	if strings.ContainsAny(s, "-_") {
		enc = base64.RawURLEncoding
	}
	body := strings.TrimRight(s, "=")
	raw, err := enc.DecodeString(body)
	if err != nil || len(raw) == 0 {
		return false
	}
	return enc.EncodeToString(raw) == body
}

// stripSignature decides whether a thought-signature value goes.
func stripSignature(v any, opts ThoughtSignatureOptions) bool {
	if opts.AllowBase64Only {
		return !ValidBase64Signature(v)
	}
	s, ok := v.(string)
	return ok && strings.HasPrefix(s, "msg_")
}

// StripThoughtSignatures removes thought_signature fields (and
// thoughtSignature fields when opts.IncludeCamelCase) from blocks: with
// opts.AllowBase64Only every value that is not ValidBase64Signature goes,
// otherwise only strings starting with "msg_". It reports whether anything
// changed; blocks is not modified.
func StripThoughtSignatures(blocks []message.Block, opts ThoughtSignatureOptions) ([]message.Block, bool) {
	var out []message.Block
	for i := range blocks {
		b := &blocks[i]
		nb, changed := stripBlockSignatures(b, opts)
		if !changed {
			continue
		}
		if out == nil {
			out = copyBlocks(blocks)
		}
		out[i] = nb
	}
	if out == nil {
		return blocks, false
	}
	return out, true
}

func stripBlockSignatures(b *message.Block, opts ThoughtSignatureOptions) (message.Block, bool) {
	nb := *b
	changed := false
	if v, ok := b.Extra[fieldThoughtSignatureSnake]; ok && stripSignature(v, opts) {
		nb.Extra = withoutField(nb.Extra, fieldThoughtSignatureSnake)
		changed = true
	}
	if opts.IncludeCamelCase {
		if b.ThoughtSignature != "" && stripSignature(b.ThoughtSignature, opts) {
			nb.ThoughtSignature = ""
			changed = true
		}
		if v, ok := b.Extra[fieldThoughtSignature]; ok && stripSignature(v, opts) {
			nb.Extra = withoutField(nb.Extra, fieldThoughtSignature)
			changed = true
		}
	}
	return nb, changed
}

// thinkingSignature returns a thinking block's signature: the string, or the
// raw value when it was stored as something else.
func thinkingSignature(b *message.Block) any {
	if b.ThinkingSignature != "" {
		return b.ThinkingSignature
	}
	return b.Extra["thinkingSignature"]
}

// isOpenAIReasoningSignature reports whether sig (a JSON string or an object)
// is an OpenAI Responses reasoning item: {"id": "rs_…", "type": "reasoning"
// or "reasoning.…"}.
func isOpenAIReasoningSignature(sig any) bool {
	var obj map[string]any
	switch s := sig.(type) {
	case string:
		t := ecmatext.Trim(s)
		if !strings.HasPrefix(t, "{") || json.Unmarshal([]byte(t), &obj) != nil {
			return false
		}
	case map[string]any:
		obj = s
	default:
		return false
	}
	id, _ := obj["id"].(string)
	typ, _ := obj["type"].(string)
	return strings.HasPrefix(id, "rs_") && (typ == "reasoning" || strings.HasPrefix(typ, "reasoning."))
}
