package sanitize

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/lanefleet/lanefleet/message"
)

// The conformance cases use a neutral message model that differs from pi's
// field names in a few places (thinking "signature" for "thinkingSignature",
// image "mime" for "mimeType"). The message package also writes a few fields
// pi always has (a result's isError and toolCallId, every usage counter) even
// when a case left them out. toPi and fromPi translate, and record the keys a
// case left out under markKey so that they are left out again on the way back.

const markKey = "__conformanceKeys"

// Keys the message encoder writes whether or not they were in the input.
var (
	defaultedResultKeys = []string{"isError", "toolCallId"}
	defaultedUsageKeys  = []string{"input", "output", "cacheRead", "cacheWrite", "totalTokens", "cost"}
	// A tool call's name and arguments are written even when a case left
	// them out (a call without a name, §7.2).
	defaultedCallKeys = []string{"name", "arguments"}
)

func keySet(m map[string]any) []any {
	keys := make([]any, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

func rename(m map[string]any, from, to string) {
	if v, ok := m[from]; ok {
		delete(m, from)
		m[to] = v
	}
}

// toPiMessages converts neutral messages (from conformance.Decode) to
// message.Message values.
func toPiMessages(t testing.TB, v any) []message.Message {
	t.Helper()
	arr, _ := v.([]any)
	for _, e := range arr {
		m, ok := e.(map[string]any)
		if !ok {
			continue
		}
		if m["role"] == "toolResult" || m["role"] == "user" || m["role"] == "assistant" {
			m[markKey] = keySet(m)
		}
		if u, ok := m["usage"].(map[string]any); ok {
			u[markKey] = keySet(u)
		}
		if blocks, ok := m["content"].([]any); ok {
			toPiBlocks(blocks)
		}
	}
	data, err := json.Marshal(arr)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []message.Message
	if err := json.Unmarshal(data, &msgs); err != nil {
		t.Fatalf("decode messages: %v", err)
	}
	return msgs
}

func toPiBlocks(blocks []any) {
	for _, e := range blocks {
		b, ok := e.(map[string]any)
		if !ok {
			continue
		}
		switch b["type"] {
		case "thinking":
			rename(b, "signature", "thinkingSignature")
		case "image":
			rename(b, "mime", "mimeType")
		case "toolCall":
			b[markKey] = keySet(b)
		}
	}
}

func toPiBlockList(t testing.TB, v any) []message.Block {
	t.Helper()
	arr, _ := v.([]any)
	toPiBlocks(arr)
	data, err := json.Marshal(arr)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []message.Block
	if err := json.Unmarshal(data, &blocks); err != nil {
		t.Fatalf("decode blocks: %v", err)
	}
	return blocks
}

// fromPi converts any value holding messages or blocks back to the neutral
// model as generic JSON.
func fromPi(t testing.TB, v any) any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var out any
	if err := d.Decode(&out); err != nil {
		t.Fatal(err)
	}
	return neutral(out)
}

func restoreKeys(m map[string]any, defaulted []string) {
	keys, ok := m[markKey].([]any)
	if !ok {
		return
	}
	delete(m, markKey)
	had := map[string]bool{}
	for _, k := range keys {
		had[k.(string)] = true
	}
	for _, k := range defaulted {
		if !had[k] {
			delete(m, k)
		} else if _, ok := m[k]; !ok && k == "totalTokens" {
			m[k] = json.Number("0")
		}
	}
}

func neutral(v any) any {
	switch x := v.(type) {
	case []any:
		for i := range x {
			x[i] = neutral(x[i])
		}
	case map[string]any:
		if _, ok := x["role"]; ok {
			defaulted := []string(nil)
			if x["role"] == "toolResult" {
				defaulted = defaultedResultKeys
			}
			restoreKeys(x, defaulted)
			if u, ok := x["usage"].(map[string]any); ok {
				restoreKeys(u, defaultedUsageKeys)
			}
		}
		switch x["type"] {
		case "thinking":
			rename(x, "thinkingSignature", "signature")
		case "image":
			rename(x, "mimeType", "mime")
		case "toolCall":
			restoreKeys(x, defaultedCallKeys)
		}
		for k, e := range x {
			x[k] = neutral(e)
		}
	}
	return v
}
