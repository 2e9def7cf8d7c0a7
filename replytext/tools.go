package replytext

import (
	"encoding/json"
	"regexp"
	"strings"

	"github.com/lanefleet/lanefleet/ecmatext"
)

// Caps on tool output carried in events.
const (
	// ToolResultMaxChars is the most text of one tool-result text block
	// carried in a tool event (UTF-16 units).
	ToolResultMaxChars = 8000
	// ToolErrorMaxChars is the most of a tool error's first line kept.
	ToolErrorMaxChars = 400
	// ToolTruncatedSuffix marks a truncated tool-result text.
	ToolTruncatedSuffix = "\n…(truncated)…"
)

// TruncateToolText caps a tool-result text at ToolResultMaxChars UTF-16
// units, adding ToolTruncatedSuffix when it cut.
func TruncateToolText(s string) string {
	if ecmatext.Len(s) <= ToolResultMaxChars {
		return s
	}
	return ecmatext.Prefix(s, ToolResultMaxChars) + ToolTruncatedSuffix
}

// SanitizeToolResult returns a copy of a JSON-shaped tool result
// (map[string]any with a "content" array, as decoded from JSON) fit for a
// tool event: text blocks capped by TruncateToolText, image blocks without
// their "data" but with "bytes" (the length of the base64 data) and
// "omitted": true. Other values are returned as they are.
func SanitizeToolResult(result any) any {
	rec, ok := result.(map[string]any)
	if !ok {
		return result
	}
	content, ok := rec["content"].([]any)
	if !ok {
		return rec
	}
	out := make(map[string]any, len(rec))
	for k, v := range rec {
		out[k] = v
	}
	items := make([]any, len(content))
	for i, it := range content {
		entry, ok := it.(map[string]any)
		if !ok {
			items[i] = it
			continue
		}
		typ, _ := entry["type"].(string)
		switch typ {
		case "text":
			text, ok := entry["text"].(string)
			if !ok {
				items[i] = entry
				continue
			}
			c := copyMap(entry)
			c["text"] = TruncateToolText(text)
			items[i] = c
		case "image":
			c := copyMap(entry)
			delete(c, "data")
			if data, ok := entry["data"].(string); ok && data != "" {
				c["bytes"] = ecmatext.Len(data)
			} else {
				delete(c, "bytes")
			}
			c["omitted"] = true
			items[i] = c
		default:
			items[i] = entry
		}
	}
	out["content"] = items
	return out
}

func copyMap(m map[string]any) map[string]any {
	c := make(map[string]any, len(m)+2)
	for k, v := range m {
		c[k] = v
	}
	return c
}

var crlf = regexp.MustCompile(`\r?\n`)

// ToolErrorText normalises an error text for display: trimmed, first line
// only, capped at ToolErrorMaxChars UTF-16 units with "…". It reports false
// when nothing is left.
func ToolErrorText(text string) (string, bool) {
	t := ecmatext.Trim(text)
	if t == "" {
		return "", false
	}
	first := ecmatext.Trim(crlf.Split(t, 2)[0])
	if first == "" {
		return "", false
	}
	if ecmatext.Len(first) > ToolErrorMaxChars {
		return ecmatext.Prefix(first, ToolErrorMaxChars) + "…", true
	}
	return first, true
}

var errorLikeStatus = regexp.MustCompile(`error|fail|timeout|timed[_\s-]?out|denied|cancel|invalid|forbidden`)

func isErrorLikeStatus(status string) bool {
	n := strings.ToLower(strings.TrimSpace(status))
	switch n {
	case "", "0", "ok", "success", "completed", "running":
		return false
	}
	return errorLikeStatus.MatchString(n)
}

func readErrorCandidate(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return ToolErrorText(x)
	case map[string]any:
		if m, ok := x["message"].(string); ok {
			return ToolErrorText(m)
		}
		if e, ok := x["error"].(string); ok {
			return ToolErrorText(e)
		}
	}
	return "", false
}

func errorField(v any) (string, bool) {
	rec, ok := v.(map[string]any)
	if !ok {
		return "", false
	}
	for _, k := range []string{"error", "message", "reason"} {
		if s, ok := readErrorCandidate(rec[k]); ok {
			return s, true
		}
	}
	status, _ := rec["status"].(string)
	if !isErrorLikeStatus(status) {
		return "", false
	}
	return ToolErrorText(strings.TrimSpace(status))
}

// ToolErrorMessage extracts the error of a failed tool's JSON-shaped result:
// an error, message or reason field (or an error-like status) of "details",
// then of the result itself, then of the result's text parsed as JSON, else
// the text's first line. Every form is normalised by ToolErrorText.
func ToolErrorMessage(result any) (string, bool) {
	rec, ok := result.(map[string]any)
	if !ok {
		return "", false
	}
	if s, ok := errorField(rec["details"]); ok {
		return s, true
	}
	if s, ok := errorField(rec); ok {
		return s, true
	}
	text := toolResultText(rec)
	if text == "" {
		return "", false
	}
	var parsed any
	if json.Unmarshal([]byte(text), &parsed) == nil {
		if s, ok := errorField(parsed); ok {
			return s, true
		}
	}
	return ToolErrorText(text)
}

// toolResultText joins the trimmed, non-empty text blocks with newlines.
func toolResultText(rec map[string]any) string {
	content, _ := rec["content"].([]any)
	var parts []string
	for _, it := range content {
		entry, ok := it.(map[string]any)
		if !ok || entry["type"] != "text" {
			continue
		}
		if s, ok := entry["text"].(string); ok {
			if t := ecmatext.Trim(s); t != "" {
				parts = append(parts, t)
			}
		}
	}
	return strings.Join(parts, "\n")
}
