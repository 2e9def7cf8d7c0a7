package failover

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/lanefleet/lanefleet/ecmatext"
	"github.com/lanefleet/lanefleet/provider"
)

// User-facing texts.
const (
	TextUnknown           = "LLM request failed with an unknown error."
	TextContextOverflow   = "Context overflow: prompt too large for the model. Try /reset (or /new) to start a fresh session, or use a larger-context model."
	TextReasoningRequired = "Reasoning is required for this model endpoint. Use /think minimal (or any non-off level) and try again."
	TextRoleOrdering      = "Message ordering conflict - please try again. If this persists, use /new to start a fresh session."
	TextMissingToolInput  = "Session history looks corrupted (tool call input missing). Use /new to start a fresh session. If this keeps happening, reset the session or delete the corrupted session transcript."
	TextRateLimit         = "⚠️ API rate limit reached. Please try again later."
	TextOverloaded        = "The AI service is temporarily overloaded. Please try again in a moment."
	TextTimeout           = "LLM request timed out."
)

// maxRawUnits is how many UTF-16 code units of an unrecognised error a user
// sees before it is cut with "…".
const maxRawUnits = 600

// BillingText is the billing message, naming "<provider> (<model>)" when a
// provider is known.
func BillingText(providerName, model string) string {
	p, m := strings.TrimSpace(providerName), strings.TrimSpace(model)
	label := p
	if p != "" && m != "" {
		label = p + " (" + m + ")"
	}
	if label != "" {
		return "⚠️ " + label + " returned a billing error — your API key has run out of credits or has an insufficient balance. Check your " + p + " billing dashboard and top up or switch to a different API key."
	}
	return "⚠️ API provider returned a billing error — your API key has run out of credits or has an insufficient balance. Check your provider's billing dashboard and top up or switch to a different API key."
}

var (
	invalidRequestRe = regexp.MustCompile(`"type":"invalid_request_error".*?"message":"([^"]+)"`)
	payloadPrefixRe  = regexp.MustCompile(`(?i)^(?:error|api\s*error|apierror|openai\s*error|anthropic\s*error|gateway\s*error)[:\s-]+`)
	httpPrefixRe     = regexp.MustCompile(`(?s)^(\d{3})\s+(.+)$`)
)

var httpErrorHints = []string{
	"error", "bad request", "not found", "unauthorized", "forbidden", "internal server",
	"service unavailable", "gateway", "rate limit", "overloaded", "timeout", "timed out",
	"invalid", "too many requests", "permission",
}

// UserText rewrites a provider error message into the text a user sees (the
// reference's formatAssistantErrorText): fixed sentences for context
// overflow, reasoning required, role ordering, corrupted history, rate
// limits, overload, timeouts and billing; "LLM request rejected: <m>" for an
// invalid_request_error body; a compact form of HTTP status lines and JSON
// error payloads; otherwise the raw text cut at 600 UTF-16 units. provider
// and model, when known, name the account in the billing sentence.
func UserText(raw, providerName, model string) string {
	raw = strings.TrimSpace(raw)
	switch {
	case raw == "":
		return TextUnknown
	case IsContextOverflow(raw):
		return TextContextOverflow
	case IsReasoningRequired(raw):
		return TextReasoningRequired
	case IsRoleOrdering(raw):
		return TextRoleOrdering
	case IsMissingToolCallInput(raw):
		return TextMissingToolInput
	}
	if m := invalidRequestRe.FindStringSubmatch(raw); m != nil && m[1] != "" {
		return "LLM request rejected: " + m[1]
	}
	switch {
	case IsRateLimit(raw):
		return TextRateLimit
	case IsOverloaded(raw):
		return TextOverloaded
	case IsTimeout(raw):
		return TextTimeout
	case IsBilling(raw):
		return BillingText(providerName, model)
	case isLikelyHTTPErrorText(raw), isAPIErrorPayload(raw):
		return formatRaw(raw)
	}
	return truncateUnits(raw, maxRawUnits)
}

// isLikelyHTTPErrorText reports an HTML error page behind a status, or a
// status line of 400 or more whose text names an error.
func isLikelyHTTPErrorText(raw string) bool {
	if IsHTMLErrorPage(raw) {
		return true
	}
	m := httpStatusRe.FindStringSubmatch(raw)
	if m == nil || atoi(m[1]) < 400 {
		return false
	}
	l := lower(m[2])
	for _, h := range httpErrorHints {
		if strings.Contains(l, h) {
			return true
		}
	}
	return false
}

// formatRaw is the reference's formatRawAssistantErrorForUi.
func formatRaw(raw string) string {
	t := strings.TrimSpace(raw)
	if t == "" {
		return TextUnknown
	}
	if IsHTMLErrorPage(t) {
		n, _, _ := LeadingStatus(t)
		return fmt.Sprintf("The AI service is temporarily unavailable (HTTP %d). Please try again in a moment.", n)
	}
	if m := httpStatusRe.FindStringSubmatch(t); m != nil {
		rest := strings.TrimSpace(m[2])
		if !strings.HasPrefix(rest, "{") {
			return "HTTP " + m[1] + ": " + rest
		}
	}
	if info, ok := parseAPIErrorInfo(t); ok && info.message != "" {
		prefix := "LLM error"
		if info.httpCode != "" {
			prefix = "HTTP " + info.httpCode
		}
		if info.typ != "" {
			prefix += " " + info.typ
		}
		s := prefix + ": " + info.message
		if info.requestID != "" {
			s += " (request_id: " + info.requestID + ")"
		}
		return s
	}
	return truncateUnits(t, maxRawUnits)
}

type apiErrorInfo struct{ httpCode, typ, message, requestID string }

// parseAPIPayload decodes an error payload: a JSON object with type "error",
// a request id, or an "error" object carrying a message, type or code.
func parseAPIPayload(raw string) (map[string]any, bool) {
	t := strings.TrimSpace(raw)
	cands := []string{t}
	if payloadPrefixRe.MatchString(t) {
		cands = append(cands, strings.TrimSpace(payloadPrefixRe.ReplaceAllString(t, "")))
	}
	for _, c := range cands {
		if !strings.HasPrefix(c, "{") || !strings.HasSuffix(c, "}") {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(c), &m) != nil {
			continue
		}
		if m["type"] == "error" {
			return m, true
		}
		if _, ok := m["request_id"].(string); ok {
			return m, true
		}
		if _, ok := m["requestId"].(string); ok {
			return m, true
		}
		if e, ok := m["error"].(map[string]any); ok {
			_, a := e["message"].(string)
			_, b := e["type"].(string)
			_, c := e["code"].(string)
			if a || b || c {
				return m, true
			}
		}
	}
	return nil, false
}

func isAPIErrorPayload(raw string) bool { _, ok := parseAPIPayload(raw); return ok }

func parseAPIErrorInfo(raw string) (apiErrorInfo, bool) {
	var info apiErrorInfo
	cand := strings.TrimSpace(raw)
	if m := httpPrefixRe.FindStringSubmatch(cand); m != nil {
		info.httpCode = m[1]
		cand = strings.TrimSpace(m[2])
	}
	p, ok := parseAPIPayload(cand)
	if !ok {
		return info, false
	}
	str := func(m map[string]any, k string) string { s, _ := m[k].(string); return s }
	info.requestID = str(p, "request_id")
	if info.requestID == "" {
		info.requestID = str(p, "requestId")
	}
	info.typ, info.message = str(p, "type"), str(p, "message")
	if e, ok := p["error"].(map[string]any); ok {
		if t := str(e, "type"); t != "" {
			info.typ = t
		} else if c := str(e, "code"); c != "" {
			info.typ = c
		}
		if m := str(e, "message"); m != "" {
			info.message = m
		}
	}
	return info, true
}

// truncateUnits cuts s after n UTF-16 code units (the reference counts in
// JavaScript string units) and appends "…"; it never splits a character.
func truncateUnits(s string, n int) string {
	p := ecmatext.Prefix(s, n)
	if len(p) == len(s) {
		return s
	}
	return p + "…"
}

// Label names a failed provider call for a person, where a run's error or
// a retry's wait says why: its reason (ClassifyError) with the HTTP status
// the provider answered, "rate_limit (HTTP 429)", and "server error (HTTP
// 503)" for a 5xx the reason names no better than timeout (a run loop
// treats a server error like a timeout, and the reference names it so,
// but nothing timed out). The status is the provider's own: that of the
// innermost *provider.Error in err's chain, not one a failover error
// carries for its reason (StatusOf). Without a status it is the reason
// alone; "" for a nil error.
func Label(err error) string {
	if err == nil {
		return ""
	}
	r := ClassifyError(err)
	status := 0
	for e := err; e != nil; e = errors.Unwrap(e) {
		if pe, ok := e.(*provider.Error); ok {
			status = pe.Status
		}
	}
	switch {
	case status >= 500 && status <= 599 && (r == provider.ReasonTimeout || r == provider.ReasonUnknown):
		return fmt.Sprintf("server error (HTTP %d)", status)
	case status != 0:
		return fmt.Sprintf("%s (HTTP %d)", r, status)
	}
	return string(r)
}
