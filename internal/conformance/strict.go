package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/lanefleet/lanefleet/message"
)

// Strict decodes raw into v and fails t on a key v does not know: a case
// whose format grew a key the harness does not play must fail, not pass
// untested.
func Strict(t testing.TB, raw json.RawMessage, v any) {
	t.Helper()
	if err := strict(raw, v); err != nil {
		t.Fatalf("conformance: %v (the harness must play every key of the case format)", err)
	}
}

func strict(raw json.RawMessage, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

// Keys fails t on a key of m that known does not list.
func Keys(t testing.TB, what string, m map[string]any, known ...string) {
	t.Helper()
	for k := range m {
		if !slices.Contains(known, k) {
			t.Fatalf("conformance: %s has the key %q, which the harness does not check (it knows %v)", what, k, known)
		}
	}
}

// hexID is how the cases write a generated id: "<9 lowercase hex chars>".
var hexID = regexp.MustCompile(`^<(\d+) lowercase hex chars>$`)

// Subset compares got with want on the keys want has, recursively: an
// object may have more keys than want names, and a key want sets to null
// may be absent. Arrays compare item by item and must have as many items;
// numbers compare by value; "$now" is Now; a string "<N lowercase hex
// chars>" matches any N lowercase hex digits; two strings that both hold
// JSON objects compare as JSON (object key order is irrelevant, also in
// a JSON text such as a tool call's arguments). It reports the first
// difference as a path.
func Subset(got, want any) (bool, string) {
	return subset(normalizeGot(got), want, "$")
}

func subset(got, want any, path string) (bool, string) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return false, fmt.Sprintf("%s: got %s, want an object", path, short(got))
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				if wv == nil {
					continue
				}
				return false, fmt.Sprintf("%s.%s: missing (want %s)", path, k, short(wv))
			}
			if ok, diff := subset(gv, wv, path+"."+k); !ok {
				return false, diff
			}
		}
		return true, ""
	case []any:
		g, ok := got.([]any)
		if !ok {
			return false, fmt.Sprintf("%s: got %s, want an array", path, short(got))
		}
		if len(g) != len(w) {
			return false, fmt.Sprintf("%s: got %d items, want %d: got %s", path, len(g), len(w), short(got))
		}
		for i := range w {
			if ok, diff := subset(g[i], w[i], fmt.Sprintf("%s[%d]", path, i)); !ok {
				return false, diff
			}
		}
		return true, ""
	case string:
		g, ok := got.(string)
		if m := hexID.FindStringSubmatch(w); m != nil && ok {
			n, _ := strconv.Atoi(m[1])
			if regexp.MustCompile(fmt.Sprintf(`^[0-9a-f]{%d}$`, n)).MatchString(g) {
				return true, ""
			}
			return false, fmt.Sprintf("%s: got %q, want %d lowercase hex chars", path, g, n)
		}
		if ok && g != w {
			var gj, wj map[string]any
			if json.Unmarshal([]byte(g), &gj) == nil && json.Unmarshal([]byte(w), &wj) == nil {
				return subsetJSON(gj, wj, path)
			}
		}
	}
	return equal(got, want, path)
}

// subsetJSON compares two JSON texts' objects exactly, whatever their key
// order.
func subsetJSON(got, want map[string]any, path string) (bool, string) {
	if ok, diff := Equal(got, want); !ok {
		return false, path + " (as JSON) " + diff
	}
	return true, ""
}

// usageAliases are the field names the reference's normalizeUsage accepts
// for each usage field (runtime spec §3.3).
var usageAliases = map[string][]string{
	"input":      {"input", "inputTokens", "input_tokens", "promptTokens", "prompt_tokens"},
	"output":     {"output", "outputTokens", "output_tokens", "completionTokens", "completion_tokens"},
	"cacheRead":  {"cacheRead", "cache_read", "cache_read_input_tokens", "cached_tokens"},
	"cacheWrite": {"cacheWrite", "cache_write", "cache_creation_input_tokens"},
	"total":      {"total", "totalTokens", "total_tokens"},
}

// Usage decodes a usage object as the cases write one (the reference's
// field names and their aliases, prompt_tokens_details.cached_tokens and
// a cost) into the fleet's.
func Usage(raw json.RawMessage) (message.Usage, error) {
	var u message.Usage
	if len(raw) == 0 || string(raw) == "null" {
		return u, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return u, fmt.Errorf("usage: %w", err)
	}
	fields := map[string]*int64{"input": &u.Input, "output": &u.Output, "cacheRead": &u.CacheRead, "cacheWrite": &u.CacheWrite, "total": &u.TotalTokens}
	for k, v := range m {
		switch {
		case k == "prompt_tokens_details":
			var d struct {
				CachedTokens *float64 `json:"cached_tokens"`
			}
			if err := strict(v, &d); err != nil {
				return u, fmt.Errorf("usage.%s: %w", k, err)
			}
			if d.CachedTokens != nil && u.CacheRead == 0 {
				u.CacheRead = int64(*d.CachedTokens)
			}
			continue
		case k == "cost":
			var c struct {
				Input, Output, CacheRead, CacheWrite, Total float64
			}
			if err := strict(v, &c); err != nil {
				return u, fmt.Errorf("usage.cost: %w", err)
			}
			u.Cost = message.Cost{Input: c.Input, Output: c.Output, CacheRead: c.CacheRead, CacheWrite: c.CacheWrite, Total: c.Total}
			continue
		}
		field := ""
		for f, names := range usageAliases {
			if slices.Contains(names, k) {
				field = f
			}
		}
		if field == "" {
			return u, fmt.Errorf("usage: unknown field %q", k)
		}
		var n float64
		if err := json.Unmarshal(v, &n); err != nil {
			return u, fmt.Errorf("usage.%s: %w", k, err)
		}
		if *fields[field] == 0 {
			*fields[field] = int64(n)
		}
	}
	return u, nil
}
