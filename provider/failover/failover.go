package failover

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/lanefleet/lanefleet/provider"
)

// Flags is every classifier's verdict on one error text, as the reference
// runtime computes them.
type Flags struct {
	// FailoverReason is the reference's failover reason ("" = none); see
	// FailoverReason.
	FailoverReason          provider.Reason
	ContextOverflow         bool
	LikelyContextOverflow   bool
	CompactionFailure       bool
	RateLimit               bool
	Overloaded              bool
	Billing                 bool
	Auth                    bool
	AuthPermanent           bool
	Timeout                 bool
	Format                  bool
	TransientHTTP           bool
	HTMLErrorPage           bool
	ModelNotFound           bool
	MissingToolCallInput    bool
	RoleOrderingPromptError bool
	// ImageSizeMB is set for an "image exceeds N MB" error.
	ImageSizeMB *float64
	// ImageDimension is set for an image dimension error.
	ImageDimension *ImageDimension
}

// Classify runs every classifier of the reference runtime on text.
func Classify(text string) Flags {
	f := Flags{
		FailoverReason:          FailoverReason(text),
		ContextOverflow:         IsContextOverflow(text),
		LikelyContextOverflow:   IsLikelyContextOverflow(text),
		CompactionFailure:       IsCompactionFailure(text),
		RateLimit:               IsRateLimit(text),
		Overloaded:              IsOverloaded(text),
		Billing:                 IsBilling(text),
		Auth:                    IsAuth(text),
		AuthPermanent:           IsAuthPermanent(text),
		Timeout:                 IsTimeout(text),
		Format:                  IsFormat(text),
		TransientHTTP:           IsTransientHTTP(text),
		HTMLErrorPage:           IsHTMLErrorPage(text),
		ModelNotFound:           IsModelNotFound(text),
		MissingToolCallInput:    IsMissingToolCallInput(text),
		RoleOrderingPromptError: IsRoleOrdering(text),
	}
	if mb, ok := ParseImageSize(text); ok {
		f.ImageSizeMB = &mb
	}
	if d, ok := ParseImageDimension(text); ok {
		f.ImageDimension = &d
	}
	return f
}

// FailoverReason is the reference runtime's classifyFailoverReason: the
// failover reason of an error text, or "" when the text is not a failover
// error. First hit wins: image dimension or size → ""; model not found;
// leading transient HTTP status → timeout; JSON internal server error →
// timeout; rate limit; overloaded → rate_limit (sic); format; billing;
// timeout; permanent auth; auth. Context overflows return "" (the run loop
// compacts instead of failing over); use ClassifyMessage to see them.
func FailoverReason(text string) provider.Reason {
	switch {
	case text == "":
		return ""
	case IsImageDimension(text), IsImageSize(text):
		return ""
	case IsModelNotFound(text):
		return provider.ReasonModelNotFound
	case IsTransientHTTP(text), isJSONInternalError(text):
		return provider.ReasonTimeout
	case IsRateLimit(text), IsOverloaded(text):
		return provider.ReasonRateLimit
	case IsFormat(text):
		return provider.ReasonFormat
	case IsBilling(text):
		return provider.ReasonBilling
	case IsTimeout(text):
		return provider.ReasonTimeout
	case IsAuthPermanent(text):
		return provider.ReasonAuthPermanent
	case IsAuth(text):
		return provider.ReasonAuth
	}
	return ""
}

// ClassifyMessage is the reason adapters and the run loop act on for an error
// text. It differs from FailoverReason in that it keeps apart what the
// reference merges or leaves out:
//
//   - image size and dimension errors → image_size;
//   - context overflows (the strict list plus provider wordings such as
//     "exceeds the context window") → context_overflow;
//   - role ordering errors → role_ordering;
//   - overloaded (also a leading 529) → overloaded rather than rate_limit;
//   - "API key not valid" (Gemini) → auth_permanent;
//   - a corrupted history (tool call input missing) → format;
//   - transient transport wordings ("Provider disconnected", "server_error")
//     → timeout;
//   - a likely overflow that nothing else claimed → context_overflow.
//
// It returns ReasonUnknown when nothing matches.
func ClassifyMessage(text string) provider.Reason {
	text = strings.TrimSpace(text)
	if text == "" {
		return provider.ReasonUnknown
	}
	l := lower(text)
	switch {
	case IsImageDimension(text), IsImageSize(text):
		return provider.ReasonImageSize
	case IsContextOverflow(text), !hasTPMHint(l) && matchAny(l, extraOverflow):
		return provider.ReasonContextOverflow
	case IsRoleOrdering(text):
		return provider.ReasonRoleOrdering
	case IsMissingToolCallInput(text):
		return provider.ReasonFormat
	case matchAny(l, extraAuthPermanent):
		return provider.ReasonAuthPermanent
	}
	if n, _, ok := LeadingStatus(text); ok && n == 529 {
		return provider.ReasonOverloaded
	}
	r := FailoverReason(text)
	switch {
	case r == provider.ReasonRateLimit && !IsRateLimit(text) && IsOverloaded(text):
		return provider.ReasonOverloaded
	case r == provider.ReasonTimeout && IsOverloaded(text) && !IsRateLimit(text):
		return provider.ReasonOverloaded
	case r != "":
		return r
	case matchAny(l, extraTransient):
		return provider.ReasonTimeout
	case IsLikelyContextOverflow(text):
		return provider.ReasonContextOverflow
	}
	return provider.ReasonUnknown
}

// Info is what an adapter knows about one failure: the HTTP status (0 for an
// error inside a 200 stream or no response at all), the provider's error type
// and code (Anthropic error.type, OpenAI error.type and error.code, Gemini
// error.status and details reasons), and its human message.
type Info struct {
	Status  int
	Type    string
	Code    string
	Message string
}

// codeReasons maps provider error types and codes (lower-cased) to reasons.
var codeReasons = map[string]provider.Reason{
	"context_length_exceeded":    provider.ReasonContextOverflow,
	"request_too_large":          provider.ReasonContextOverflow,
	"string_above_max_length":    provider.ReasonContextOverflow,
	"model_not_found":            provider.ReasonModelNotFound,
	"not_found_error":            provider.ReasonModelNotFound,
	"insufficient_quota":         provider.ReasonBilling,
	"billing_hard_limit_reached": provider.ReasonBilling,
	"invalid_api_key":            provider.ReasonAuthPermanent,
	"api_key_invalid":            provider.ReasonAuthPermanent,
	"authentication_error":       provider.ReasonAuth,
	"permission_error":           provider.ReasonAuth,
	"unauthenticated":            provider.ReasonAuth,
	"permission_denied":          provider.ReasonAuth,
	"rate_limit_error":           provider.ReasonRateLimit,
	"rate_limit_exceeded":        provider.ReasonRateLimit,
	"resource_exhausted":         provider.ReasonRateLimit,
	"overloaded_error":           provider.ReasonOverloaded,
	"server_is_overloaded":       provider.ReasonOverloaded,
	"slow_down":                  provider.ReasonOverloaded,
	"unavailable":                provider.ReasonOverloaded,
	"api_error":                  provider.ReasonTimeout,
	"server_error":               provider.ReasonTimeout,
	"internal":                   provider.ReasonTimeout,
	"timeout_error":              provider.ReasonTimeout,
	"deadline_exceeded":          provider.ReasonTimeout,
}

// ClassifyHTTP classifies a failure from its HTTP status, provider error
// type/code and message. The more specific signal wins: a message that says
// context overflow, image size, role ordering or billing beats the status; a
// known error code beats a generic status; the status decides the rest
// (402 billing, 429 rate_limit, 401/403 auth or auth_permanent, 404
// model_not_found, 408 timeout, 529 overloaded, 5xx timeout or overloaded,
// 400/422 format). An error inside a 200 stream (Status 0 or 200) that
// nothing recognises is a transient failure (timeout).
func ClassifyHTTP(in Info) provider.Reason {
	msg := ClassifyMessage(in.Message)
	code := codeReason(in.Code)
	if code == "" {
		code = codeReason(in.Type)
	}
	switch msg {
	case provider.ReasonContextOverflow, provider.ReasonImageSize, provider.ReasonRoleOrdering:
		if in.Status != 429 {
			return msg
		}
	}
	if code == provider.ReasonContextOverflow || code == provider.ReasonBilling ||
		code == provider.ReasonAuthPermanent || code == provider.ReasonModelNotFound {
		return code
	}
	switch s := in.Status; {
	case s == 402:
		return provider.ReasonBilling
	case s == 429:
		if msg == provider.ReasonBilling {
			return msg
		}
		return provider.ReasonRateLimit
	case s == 401 || s == 403:
		if msg == provider.ReasonAuthPermanent || IsAuthPermanent(in.Message) {
			return provider.ReasonAuthPermanent
		}
		if msg == provider.ReasonBilling {
			return msg
		}
		return provider.ReasonAuth
	case s == 404:
		switch msg {
		case provider.ReasonBilling, provider.ReasonAuth, provider.ReasonAuthPermanent:
			return msg
		}
		return provider.ReasonModelNotFound
	case s == 408 || s == 499 || s == 504:
		return provider.ReasonTimeout
	case s == 529:
		return provider.ReasonOverloaded
	case s >= 500:
		if msg == provider.ReasonOverloaded || code == provider.ReasonOverloaded {
			return provider.ReasonOverloaded
		}
		return provider.ReasonTimeout
	case s == 400 || s == 422 || s == 413:
		if s == 413 && msg == provider.ReasonUnknown {
			return provider.ReasonContextOverflow
		}
		if code != "" && code != provider.ReasonTimeout {
			return code
		}
		if msg != provider.ReasonUnknown && msg != provider.ReasonTimeout {
			return msg
		}
		return provider.ReasonFormat
	}
	if code != "" {
		return code
	}
	if msg != provider.ReasonUnknown {
		return msg
	}
	if in.Status == 0 || in.Status == 200 {
		return provider.ReasonTimeout
	}
	return provider.ReasonUnknown
}

func codeReason(code string) provider.Reason {
	if code == "" {
		return ""
	}
	return codeReasons[lower(strings.TrimSpace(code))]
}

// ClassifyError returns the reason of any Go error: a *provider.Error's own
// reason; aborted for context cancellation; timeout for deadlines, network
// timeouts, connection resets and truncated bodies; otherwise the
// ClassifyMessage of its text (ReasonUnknown when nothing matches). A nil
// error has no reason ("").
func ClassifyError(err error) provider.Reason {
	if err == nil {
		return ""
	}
	var pe *provider.Error
	if errors.As(err, &pe) {
		return pe.Reason
	}
	if errors.Is(err, context.Canceled) {
		return provider.ReasonAborted
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ETIMEDOUT) {
		return provider.ReasonTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return provider.ReasonTimeout
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return provider.ReasonTimeout
	}
	return ClassifyMessage(err.Error())
}

// StatusOf is the HTTP status the reference attaches to a failover reason
// (billing 402, rate_limit 429, auth 401, auth_permanent 403, timeout 408,
// format 400, model_not_found 404), plus overloaded 503 (a Lanefleet
// reason the reference folds into rate_limit); 0 for any other reason.
func StatusOf(r provider.Reason) int {
	switch r {
	case provider.ReasonBilling:
		return 402
	case provider.ReasonRateLimit:
		return 429
	case provider.ReasonAuth:
		return 401
	case provider.ReasonAuthPermanent:
		return 403
	case provider.ReasonTimeout:
		return 408
	case provider.ReasonFormat:
		return 400
	case provider.ReasonModelNotFound:
		return 404
	case provider.ReasonOverloaded:
		return 503
	}
	return 0
}

// IsFailover reports whether r makes the run loop try another profile or
// model (everything except context_overflow, role_ordering, image_size,
// aborted, unknown and "").
func IsFailover(r provider.Reason) bool {
	switch r {
	case provider.ReasonRateLimit, provider.ReasonOverloaded, provider.ReasonAuth,
		provider.ReasonAuthPermanent, provider.ReasonBilling, provider.ReasonTimeout,
		provider.ReasonFormat, provider.ReasonModelNotFound:
		return true
	}
	return false
}

func atoi(s string) int { n, _ := strconv.Atoi(strings.TrimSpace(s)); return n }
