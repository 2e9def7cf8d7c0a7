package failover

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/lanefleet/lanefleet/provider"
)

// ParseBody extracts the provider's error type, code and message from an
// error body. It understands Anthropic ({"type":"error","error":{"type",
// "message"}}), OpenAI ({"error":{"message","type","code"}}), Gemini
// ({"error":{"code","message","status","details"}}) and flat bodies such as
// Mistral's ({"object":"error","message","type","code"}), and Vertex AI's
// array around a Gemini-style one ([{"error":{...}}]). A body that is not
// JSON becomes the message, trimmed.
func ParseBody(body []byte) Info {
	var in Info
	if t := bytes.TrimSpace(body); len(t) > 0 && t[0] == '[' {
		// Vertex AI wraps a Google error in an array
		// ([{"error":{...}}]): the first element is the error.
		var arr []json.RawMessage
		if json.Unmarshal(t, &arr) == nil && len(arr) > 0 && len(bytes.TrimSpace(arr[0])) > 0 && bytes.TrimSpace(arr[0])[0] == '{' {
			return ParseBody(arr[0])
		}
	}
	var raw map[string]json.RawMessage
	if json.Unmarshal(body, &raw) != nil {
		in.Message = strings.TrimSpace(string(body))
		return in
	}
	var flat struct {
		Type    string          `json:"type"`
		Message string          `json:"message"`
		Code    json.RawMessage `json:"code"`
	}
	_ = json.Unmarshal(body, &flat)
	in.Message, in.Code = flat.Message, rawString(flat.Code)
	if flat.Type != "error" {
		in.Type = flat.Type
	}
	if e, ok := raw["error"]; ok {
		var nested struct {
			Type    string          `json:"type"`
			Message string          `json:"message"`
			Code    json.RawMessage `json:"code"`
			Status  json.RawMessage `json:"status"` // Gemini's name, or Azure's number
			Details []struct {
				Reason     string `json:"reason"`
				RetryDelay string `json:"retryDelay"`
			} `json:"details"`
		}
		if json.Unmarshal(e, &nested) == nil {
			if nested.Message != "" {
				in.Message = nested.Message
			}
			if nested.Type != "" {
				in.Type = nested.Type
			} else if st := rawString(nested.Status); st != "" {
				in.Type = st
			}
			if c := rawString(nested.Code); c != "" {
				in.Code = c
			}
			for _, d := range nested.Details {
				if d.Reason != "" {
					// Gemini ErrorInfo reasons (API_KEY_INVALID) are the
					// most specific code there is.
					in.Code = d.Reason
				}
			}
		} else {
			var s string
			if json.Unmarshal(e, &s) == nil {
				in.Message = s
			}
		}
	}
	return in
}

// maxBodyText bounds the body classified as text.
const maxBodyText = 64 << 10

// bodyText is an error body as text for the classifiers, trimmed and
// bounded.
func bodyText(body []byte) string {
	if len(body) > maxBodyText {
		body = body[:maxBodyText]
	}
	return strings.TrimSpace(string(body))
}

// rawString renders a JSON string or number as text; numeric codes (Gemini's
// "code": 400) are dropped because the status already carries them.
func rawString(r json.RawMessage) string {
	var s string
	if json.Unmarshal(r, &s) == nil {
		return s
	}
	return ""
}

var (
	tryAgainRe   = regexp.MustCompile(`(?i)(?:try again|retry) (?:in|after)\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?)\b`)
	retryDelayRe = regexp.MustCompile(`"retryDelay"\s*:\s*"([0-9]+(?:\.[0-9]+)?)s"`)
)

// RetryAfter returns the delay a server asked for: the retry-after-ms header,
// the Retry-After header (seconds or an HTTP date, relative to now), a Gemini
// RetryInfo retryDelay in the body, or a "try again in 1.574s" (OpenAI) or
// "retry after 6 seconds" (Azure) hint in the message. 0 means none.
func RetryAfter(h http.Header, body []byte, message string, now time.Time) time.Duration {
	if h != nil {
		if v := h.Get("Retry-After-Ms"); v != "" {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && f > 0 {
				return time.Duration(f * float64(time.Millisecond))
			}
		}
		if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				if f > 0 {
					return time.Duration(f * float64(time.Second))
				}
			} else if t, err := http.ParseTime(v); err == nil {
				if d := t.Sub(now); d > 0 {
					return d
				}
			}
		}
	}
	if m := retryDelayRe.FindSubmatch(body); m != nil {
		if f, err := strconv.ParseFloat(string(m[1]), 64); err == nil && f > 0 {
			return time.Duration(f * float64(time.Second))
		}
	}
	if m := tryAgainRe.FindStringSubmatch(message); m != nil {
		f, err := strconv.ParseFloat(m[1], 64)
		if err == nil && f > 0 {
			unit := time.Second
			switch u := strings.ToLower(m[2]); {
			case strings.HasPrefix(u, "ms"), strings.HasPrefix(u, "milli"):
				unit = time.Millisecond
			case strings.HasPrefix(u, "m"):
				unit = time.Minute
			}
			return time.Duration(f * float64(unit))
		}
	}
	return 0
}

// FromHTTP builds the classified error for a failed HTTP response from its
// status, headers and body (an AWS API's error, one that names its
// exception in an x-amzn-ErrorType header or a __type field, as FromAWS
// classifies it). cause (may be nil) is kept as the wrapped error;
// it must not contain credentials.
func FromHTTP(status int, h http.Header, body []byte, cause error, now time.Time) *provider.Error {
	in := ParseBody(body)
	if t := awsType(h, body); t != "" {
		// An AWS API's error (Bedrock): its exception decides.
		return FromAWS(status, h, t, in.Message, cause, now)
	}
	in.Status = status
	if in.Message == "" {
		in.Message = http.StatusText(status)
	}
	if why, ok := ContentFilter(body); ok {
		return &provider.Error{Reason: provider.ReasonUnknown, Status: status, Message: why + ": " + in.Message, Err: cause}
	}
	in.Body = bodyText(body)
	msg := in.Message
	if htmlStart.MatchString(msg) {
		// An HTML error page (a proxy's, a CDN's) is worded as a JavaScript
		// client words it, "<status> <page>": the reference recognises
		// such a page only behind its status and shows the user
		// "temporarily unavailable (HTTP <status>)" instead of the page.
		msg = strconv.Itoa(status) + " " + msg
	}
	return &provider.Error{
		Reason:     ClassifyHTTP(in),
		Status:     status,
		RetryAfter: RetryAfter(h, body, in.Message, now),
		Message:    msg,
		Err:        cause,
	}
}

// FromStream builds the classified error for an error reported inside a 200
// stream (an SSE error event, a response.failed event, a chunk with a
// top-level error object). body is the event's JSON, parsed like an error
// body.
func FromStream(body []byte, cause error) *provider.Error {
	in := ParseBody(body)
	in.Body = bodyText(body)
	if why, ok := ContentFilter(body); ok {
		return &provider.Error{Reason: provider.ReasonUnknown, Message: why + ": " + in.Message, Err: cause}
	}
	return &provider.Error{
		Reason:  ClassifyHTTP(in),
		Message: in.Message,
		Err:     cause,
	}
}
