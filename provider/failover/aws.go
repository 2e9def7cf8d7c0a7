package failover

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/lanefleet/lanefleet/provider"
)

// awsExceptions maps the exceptions AWS services answer with (Amazon
// Bedrock's, lower-cased) to reasons. An exception names its cause more
// precisely than its status does, so it decides: Bedrock sends
// ModelNotReadyException as a 429 although no quota of the caller's is
// spent (overloaded, like ServiceUnavailableException), and
// ServiceQuotaExceededException as a 400 although it is a quota (a rate
// limit). A validation error is format unless its text says more (see
// FromAWS).
var awsExceptions = map[string]provider.Reason{
	"throttlingexception":                 provider.ReasonRateLimit,
	"toomanyrequestsexception":            provider.ReasonRateLimit,
	"servicequotaexceededexception":       provider.ReasonRateLimit,
	"modelnotreadyexception":              provider.ReasonOverloaded,
	"serviceunavailableexception":         provider.ReasonOverloaded,
	"internalserverexception":             provider.ReasonTimeout,
	"modelstreamerrorexception":           provider.ReasonTimeout,
	"modeltimeoutexception":               provider.ReasonTimeout,
	"modelerrorexception":                 provider.ReasonTimeout,
	"accessdeniedexception":               provider.ReasonAuth,
	"unrecognizedclientexception":         provider.ReasonAuth,
	"invalidsignatureexception":           provider.ReasonAuth,
	"signaturedoesnotmatch":               provider.ReasonAuth,
	"incompletesignature":                 provider.ReasonAuth,
	"missingauthenticationtokenexception": provider.ReasonAuth,
	"expiredtokenexception":               provider.ReasonAuth,
	"resourcenotfoundexception":           provider.ReasonModelNotFound,
	"validationexception":                 provider.ReasonFormat,
}

// AWSErrorType returns the exception name in an AWS error type as
// responses carry it: the x-amzn-ErrorType header
// ("ThrottlingException:http://internal.amazon.com/…"), a body's __type
// ("com.amazon.coral.service#ThrottlingException") or an event-stream
// frame's :exception-type ("throttlingException").
func AWSErrorType(t string) string {
	t = strings.TrimSpace(t)
	if i := strings.LastIndexByte(t, '#'); i >= 0 {
		t = t[i+1:]
	}
	if i := strings.IndexByte(t, ':'); i >= 0 {
		t = t[:i]
	}
	return t
}

// FromAWS builds the classified error of a failed call of an AWS API
// (Amazon Bedrock) from its HTTP status (0 for an exception inside an
// event stream), headers (may be nil), exception name (see AWSErrorType)
// and message; cause is kept as the wrapped error and now is the clock for
// Retry-After dates. A known exception decides the reason (an
// AccessDeniedException with a permanent-auth text is auth_permanent; a
// ValidationException is format unless its text is a context overflow, a
// billing, role-ordering or image-size error, or says the model id cannot
// be served (model_not_found: an invalid id, or one that needs an
// inference profile)); anything else is classified
// as an HTTP failure (ClassifyHTTP).
func FromAWS(status int, h http.Header, exception, message string, cause error, now time.Time) *provider.Error {
	exception = AWSErrorType(exception)
	if message == "" && status != 0 {
		message = http.StatusText(status)
	}
	r, known := awsExceptions[lower(exception)]
	switch {
	case !known:
		r = ClassifyHTTP(Info{Status: status, Code: exception, Message: message, Body: message})
	case r == provider.ReasonAuth && IsAuthPermanent(message):
		r = provider.ReasonAuthPermanent
	case r == provider.ReasonFormat && modelUnservable(message):
		r = provider.ReasonModelNotFound
	case r == provider.ReasonFormat:
		switch m := ClassifyMessage(message); m {
		case provider.ReasonBilling, provider.ReasonContextOverflow, provider.ReasonRoleOrdering, provider.ReasonImageSize:
			r = m
		}
	}
	msg := message
	if exception != "" && !strings.Contains(msg, exception) {
		msg = exception + ": " + msg
	}
	return &provider.Error{Reason: r, Status: status, RetryAfter: RetryAfter(h, nil, message, now), Message: msg, Err: cause}
}

// awsType returns the AWS exception an error response names in its
// x-amzn-ErrorType header or its body's __type, "" when it names none.
func awsType(h http.Header, body []byte) string {
	if h != nil {
		if t := h.Get("X-Amzn-Errortype"); t != "" {
			return AWSErrorType(t)
		}
	}
	var in struct {
		Type string `json:"__type"`
	}
	if len(body) > 0 && body[0] == '{' && json.Unmarshal(body, &in) == nil && in.Type != "" {
		return AWSErrorType(in.Type)
	}
	return ""
}

// modelUnservable reports a validation message that says the model id
// cannot be called as given: another model may be.
func modelUnservable(message string) bool {
	l := lower(message)
	return strings.Contains(l, "model identifier is invalid") ||
		strings.Contains(l, "on-demand throughput") && strings.Contains(l, "inference profile")
}
