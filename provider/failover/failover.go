package failover

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"regexp"
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
// text: the reference's failover reason (FailoverReason), with overloaded
// kept apart from rate_limit where the text names no rate limit, and, where
// the reference has no failover reason, the reasons it handles on other
// paths: image size and dimension errors → image_size; context overflows
// (the strict list, provider wordings such as "exceeds the context window",
// and the likely-overflow heuristic) → context_overflow; role ordering →
// role_ordering. Two texts differ on purpose: a strict context
// overflow whose only rate-limit sign is "429" inside a larger number
// ("prompt is too long: 214290 tokens > 200000 maximum") is the overflow
// it says, not a rate limit, so the run compacts instead of rotating; and
// a corrupted history (tool call input missing) is format, as another
// model may accept it, where the reference has no reason. It returns
// ReasonUnknown when nothing matches.
func ClassifyMessage(text string) provider.Reason {
	text = strings.TrimSpace(text)
	if text == "" {
		return provider.ReasonUnknown
	}
	if r, _, ok := deliberate(text); ok {
		return r
	}
	r := FailoverReason(text)
	switch {
	case r == provider.ReasonRateLimit && !IsRateLimit(text) && IsOverloaded(text):
		return provider.ReasonOverloaded
	case r != "":
		return r
	case IsImageDimension(text), IsImageSize(text):
		return provider.ReasonImageSize
	case IsLikelyContextOverflow(text), !hasTPMHint(lower(text)) && matchAny(lower(text), extraOverflow):
		return provider.ReasonContextOverflow
	case IsRoleOrdering(text):
		return provider.ReasonRoleOrdering
	}
	return provider.ReasonUnknown
}

// deliberate is the reason ClassifyMessage gives a (trimmed) text on
// purpose where the reference gives another, and why; ok is false for
// every other text.
func deliberate(text string) (r provider.Reason, why string, ok bool) {
	switch {
	case overflowBehindA429(text):
		return provider.ReasonContextOverflow, "a context overflow whose tokens count holds 429 is the overflow, not a rate limit", true
	case IsMissingToolCallInput(text) && FailoverReason(text) == "":
		return provider.ReasonFormat, "a corrupted history (tool call input missing) is a format error: another model may accept it", true
	}
	return "", "", false
}

// longNumber is a number of more than three digits.
var longNumber = regexp.MustCompile(`\d{4,}`)

// overflowBehindA429 reports a strict context overflow that the reference
// takes for a rate limit only because a larger number holds "429".
func overflowBehindA429(text string) bool {
	if !IsContextOverflow(text) || !IsRateLimit(text) {
		return false
	}
	return !IsRateLimit(longNumber.ReplaceAllString(text, "0"))
}

// Info is what an adapter knows about one failure: the HTTP status (0 for an
// error inside a 200 stream or no response at all), the provider's error type
// and code (Anthropic error.type, OpenAI error.type and error.code, Gemini
// error.status and details reasons), its human message, and the body as
// text (the message when it is not JSON).
type Info struct {
	Status  int
	Type    string
	Code    string
	Message string
	Body    string
}

// codeReasons maps provider error types and codes (lower-cased) to reasons.
var codeReasons = map[string]provider.Reason{
	"context_length_exceeded":    provider.ReasonContextOverflow,
	"request_too_large":          provider.ReasonContextOverflow,
	"string_above_max_length":    provider.ReasonContextOverflow,
	"model_not_found":            provider.ReasonModelNotFound,
	"deploymentnotfound":         provider.ReasonModelNotFound, // Azure OpenAI
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

// specificCodes are the codes that name what no status can tell: they
// decide whatever the status says.
var specificCodes = map[provider.Reason]bool{
	provider.ReasonContextOverflow: true, provider.ReasonBilling: true,
	provider.ReasonAuthPermanent: true, provider.ReasonModelNotFound: true,
}

// ClassifyHTTP classifies a failure from its HTTP status, provider error
// type/code, message and body, as the reference classifies an error with
// a status (runtime spec §15), in this order:
//
//  1. a provider code that names what the status cannot (Lanefleet):
//     context_length_exceeded, insufficient_quota (sent as 429),
//     invalid_api_key and Gemini's API_KEY_INVALID (sent as 400),
//     model_not_found;
//  2. the reference's status table: 402 billing, 429 rate_limit, 401 and
//     403 auth (auth_permanent for a permanent-auth text), 408 and
//     502-504 timeout, 400 format. Two bodies say more than their status
//     (Lanefleet, the recorded provider bodies): a 503 whose body says
//     "overloaded" is overloaded (the reference's timeout), and a 400 whose
//     body is a billing error (Anthropic's credit balance), a context
//     overflow (Gemini's token count), a role-ordering or an image-size
//     error is that;
//  3. any other status, and an error inside a 200 stream: the text
//     decides, as the reference's classifyFailoverReason of the message
//     and then of the body (ClassifyMessage), then the provider's type or
//     code. An error inside a stream (Status 0 or 200) that nothing
//     recognises is a transient failure (timeout).
func ClassifyHTTP(in Info) provider.Reason {
	code := codeReason(in.Code)
	if code == "" {
		code = codeReason(in.Type)
	}
	if specificCodes[code] {
		return code
	}
	switch s := in.Status; s {
	case 402:
		return provider.ReasonBilling
	case 429:
		return provider.ReasonRateLimit
	case 401, 403:
		if IsAuthPermanent(in.Message) || IsAuthPermanent(in.Body) {
			return provider.ReasonAuthPermanent
		}
		return provider.ReasonAuth
	case 503:
		if strings.Contains(lower(in.Message), "overloaded") || code == provider.ReasonOverloaded {
			return provider.ReasonOverloaded
		}
		return provider.ReasonTimeout
	case 408, 502, 504:
		return provider.ReasonTimeout
	case 400:
		switch r := ClassifyMessage(in.Message); r {
		case provider.ReasonBilling, provider.ReasonContextOverflow, provider.ReasonRoleOrdering, provider.ReasonImageSize:
			return r
		}
		return provider.ReasonFormat
	}
	r := ClassifyMessage(in.Message)
	if r == provider.ReasonUnknown && in.Body != in.Message {
		r = ClassifyMessage(in.Body)
	}
	switch {
	case r != provider.ReasonUnknown:
		return r
	case code != "":
		return code
	case IsContextOverflow(strconv.Itoa(in.Status) + " " + in.Message):
		// "413 Request Entity Too Large", as a JavaScript client words
		// it (the reference has no failover reason for it either).
		return provider.ReasonContextOverflow
	case in.Status == 0 || in.Status == 200:
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

// ClassifyError returns the reason of any Go error, as the reference
// resolves the failover reason of an error (runtime spec §15): a
// *provider.Error's own reason; aborted for context cancellation; timeout
// for the network errors the reference names (ETIMEDOUT, ECONNRESET,
// ECONNABORTED), for a truncated body (io.ErrUnexpectedEOF, Go's form of
// a connection cut mid-response) and for a timeout-like error
// (IsTimeoutError); otherwise the ClassifyMessage of its text
// (ReasonUnknown when nothing matches: a refused connection, for one,
// which the adapters' transport classification treats as transient); a
// *net.OpError by its cause alone, never by the addresses in its text. A
// nil error has no reason ("").
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
	if errors.Is(err, syscall.ETIMEDOUT) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, io.ErrUnexpectedEOF) || IsTimeoutError(err) {
		return provider.ReasonTimeout
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		// A transport failure: its text names addresses and the request's
		// URL, whose digits say nothing (a refused port 42909 holds
		// "429"), so its cause alone is classified.
		return ClassifyError(oe.Err)
	}
	return ClassifyMessage(err.Error())
}

// timeoutHint is the reference's timeout-like message (isTimeoutError).
var timeoutHint = regexp.MustCompile(`(?i)timeout|timed out|deadline exceeded|context deadline exceeded|stop reason:\s*abort|reason:\s*abort|unhandled stop reason:\s*abort`)

// IsTimeoutError reports whether err is a timeout as the reference's
// isTimeoutError sees one: a passed deadline (context.DeadlineExceeded,
// os.ErrDeadlineExceeded, a network timeout; Go's forms of a TimeoutError
// and of an abort its request timer caused) or an error whose message
// says it timed out. A network error code (ETIMEDOUT) is not one: the
// reference tells them apart.
func IsTimeoutError(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		if _, errno := ne.(syscall.Errno); !errno {
			return true
		}
	}
	msg := err.Error()
	var pe *provider.Error
	if errors.As(err, &pe) && pe.Message != "" {
		msg = pe.Message
	}
	return timeoutHint.MatchString(msg)
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
