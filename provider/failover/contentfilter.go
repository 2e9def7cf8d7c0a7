package failover

import (
	"encoding/json"
	"sort"
	"strings"
)

// ContentFilter reports an error body that is a content filter's refusal
// (Azure OpenAI's {"error":{"code":"content_filter","innererror":{"code":
// "ResponsibleAIPolicyViolation","content_filter_result":{...}}}}) and
// returns what it says in words: "Azure's content filter blocked the
// prompt (violence: medium)". Such a refusal is about the text, not the
// key or the model: it is neither retried nor failed over, and it cools
// no profile (reason unknown), so the run ends saying why.
func ContentFilter(body []byte) (string, bool) {
	if len(body) > maxBodyText {
		return "", false
	}
	var b struct {
		Error struct {
			Code       json.RawMessage `json:"code"`
			Param      string          `json:"param"`
			InnerError *struct {
				Code    string                 `json:"code"`
				Results map[string]filterState `json:"content_filter_result"`
			} `json:"innererror"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &b) != nil {
		return "", false
	}
	e := b.Error
	inner := e.InnerError
	if rawString(e.Code) != "content_filter" && (inner == nil || inner.Code != "ResponsibleAIPolicyViolation") {
		return "", false
	}
	what := "the prompt"
	if e.Param != "" && e.Param != "prompt" && e.Param != "messages" && e.Param != "input" {
		what = "the request's " + e.Param
	}
	s := "Azure's content filter blocked " + what
	if inner != nil {
		if c := filteredCategories(inner.Results); c != "" {
			s += " (" + c + ")"
		}
	}
	return s + "; rephrase it, or change the deployment's content filter", true
}

// filterState is one category of a content filter's result.
type filterState struct {
	Filtered bool   `json:"filtered"`
	Severity string `json:"severity"`
	Detected bool   `json:"detected"`
}

// filteredCategories lists the categories a content filter result
// filtered, sorted, with their severities ("hate: high, jailbreak"); ""
// when none says filtered. results is the JSON object Azure sends as
// content_filter_result(s), decoded.
func filteredCategories(results map[string]filterState) string {
	var out []string
	for k, v := range results {
		if !v.Filtered || len(k) > 64 {
			continue
		}
		if v.Severity != "" && v.Severity != "safe" && len(v.Severity) <= 16 {
			k += ": " + v.Severity
		}
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// StreamFilter returns the categories a streamed choice's
// content_filter_results filtered (see filteredCategories); raw is that
// JSON object, "" when it is not one.
func StreamFilter(raw json.RawMessage) string {
	if len(raw) == 0 || len(raw) > maxBodyText {
		return ""
	}
	var m map[string]filterState
	if json.Unmarshal(raw, &m) != nil {
		return ""
	}
	return filteredCategories(m)
}
